// The launchers of Nimble's fused CUDA kernels (nimble_kernels.cu), shared by the kernels and the
// custom ops that call them (fused_ops.cpp). Plain C declarations: no libtorch headers.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

// Activation codes of the fused kernels.
// kNkGelu is GELU with erf, kNkGeluTanh its tanh approximation (PyTorch's approximate="tanh").
enum NkAct : int { kNkNone = 0, kNkRelu = 1, kNkSilu = 2, kNkRelu6 = 3, kNkGelu = 4, kNkGeluTanh = 5 };

extern "C" {

// In place on `y` (n elements, `channels` channels; `inner` = H*W for NCHW, 1 for NHWC and for
// a matrix product's rows of `channels` features): y = act(y + bias[channel] + other), `bias`
// and `other` may be null. Returns the cudaError_t.
int nk_epilogue(float* y, const float* bias, const float* other, int64_t n, int64_t channels, int64_t inner, int act,
                cudaStream_t stream);

// Chunks per plane of `hw` elements (the size of squeeze-and-excitation's scratch per plane).
int64_t nk_se_chunks(int64_t hw);

// y = x * sigmoid(W2 act(W1 mean_hw(x) + b1) + b2) for x of `batch` × `channels` planes of `hw`
// elements, contiguous NCHW or (`channels_last`) NHWC, y in the same layout; w1 is squeeze ×
// channels, w2 channels × squeeze, b1 and b2 may be null. Scratch: `partials` (batch × channels
// × nk_se_chunks(hw)), `hidden` (batch × squeeze) and, channels-last only,
// `gates` (batch × channels). Returns the cudaError_t.
int nk_squeeze_excite(const float* x, const float* w1, const float* b1, const float* w2, const float* b2, float* y,
                      float* partials, float* hidden, float* gates, int64_t batch, int64_t channels, int64_t squeeze,
                      int64_t hw, int channels_last, int act, cudaStream_t stream);

}  // extern "C"
