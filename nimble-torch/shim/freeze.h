// Freezing a TorchScript module for inference (freeze.cpp): parameters become constants and
// PyTorch's frozen foldings (BatchNorm into convolutions, linear layers sharing an input merged)
// are applied, on a CPU copy when the module lives on a GPU.
#pragma once

#include <torch/script.h>

namespace nimble {

// A prim::Constant holding a tensor (its `value` attribute).
bool is_tensor_constant(const torch::jit::Node* node);

// Whether a frozen forward computes in half precision: a float16 or bfloat16 tensor among its
// constants (its frozen parameters, or the weights a forward traced from a closure holds).
bool computes_in_half_precision(const torch::jit::Graph& graph);

// `m` (put in eval mode) frozen, convolutions as aten::conv*, dropout removed and the frozen
// foldings applied (OptimizeFrozenGraph), with every constant on the device it would have had
// had the module been frozen where it lives. With `on_host`, a module on a GPU whose constants
// freezing would compare often enough to repay the copy is frozen and folded on a CPU copy, the
// constants going back afterwards (see freeze.cpp for why and how); when that throws, the module
// is frozen where it lives. `frozen_on_host` says which it was. In a half-precision module the
// foldings that change numbers are left out unless `fold_half`, which folds BatchNorm into the
// convolutions in float32 (see optimize_frozen in freeze.cpp).
torch::jit::Module frozen_and_folded(torch::jit::Module& m, bool on_host, bool fold_half, bool& frozen_on_host);

}  // namespace nimble
