// Choosing between two ways of computing the same result by timing both, as cuDNN's benchmark
// mode does for its convolution algorithms: nimble::linear's GEMM (linear_ops.cpp) and
// nimble::conv2d_relu's fusion (fused_ops.cpp).
#pragma once

#include <functional>
#include <string>

namespace nimble::fused {

// Whether `second` is clearly faster than `first` (under 97% of its time, so that noise does not
// flip a tie) for the case `key` (an op and its shapes, layouts and settings). Both are timed on
// the current stream the first time `key` is seen outside a capture, and the answer is
// remembered for the process. Inside a capture nothing can be timed: the answer is `false` (the
// first way), not remembered.
bool second_is_faster(const std::string& key, const std::function<void()>& first, const std::function<void()>& second);

}  // namespace nimble::fused
