// Nimble's own fused CUDA kernels, behind the custom ops that the inference rewrites put into a
// frozen TorchScript graph (see nimble_shim.cpp, "Fused kernels"):
//
//  * a convolution's epilogue: bias, an optional residual, an activation, in one pass over the
//    output (ATen runs cuDNN's convolution, then one kernel for the bias, one for the add, one
//    for the activation);
//  * squeeze-and-excitation in three kernels: per-plane means, the first 1×1 convolution with
//    its activation, then the second one with the sigmoid gate fused into the scaling of the
//    input (ATen needs eight or more kernels for the same block at batch 1).
//
// Plain CUDA with no libtorch headers: the launchers take raw float32 pointers, shapes and the
// stream, and return the launch's cudaError_t. The shim checks layouts, dtypes and shapes and
// calls them only for what they handle (contiguous float32); everything else takes ATen's path.

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

// Activation codes shared with the shim (NimbleAct there).
enum Act : int { kNone = 0, kRelu = 1, kSilu = 2, kRelu6 = 3 };

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case kRelu: return fmaxf(v, 0.f);
    case kSilu: return v / (1.f + expf(-v));
    case kRelu6: return fminf(fmaxf(v, 0.f), 6.f);
    default: return v;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// y[i] = act(y[i] + bias[channel(i)] + other[i]) over a contiguous NCHW (`inner` = H*W) or NHWC
// (`inner` = 1) tensor of `n` elements with `channels` channels. `bias`, `other` may be null.
__global__ void epilogue_kernel(float* __restrict__ y, const float* __restrict__ bias, const float* __restrict__ other,
                                int64_t n, int64_t channels, int64_t inner, int act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = y[i];
    if (bias != nullptr) v += bias[(i / inner) % channels];
    if (other != nullptr) v += other[i];
    y[i] = activate(v, act);
  }
}

// The same with four elements per thread, when every run of four shares a channel (NCHW with
// inner % 4 == 0) or holds four consecutive channels (NHWC with channels % 4 == 0).
__global__ void epilogue_kernel4(float4* __restrict__ y, const float* __restrict__ bias, const float4* __restrict__ other,
                                 int64_t n4, int64_t channels, int64_t inner, int act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = y[i];
    if (bias != nullptr) {
      if (inner == 1) {
        int64_t c = (i * 4) % channels;
        v.x += bias[c];
        v.y += bias[c + 1];
        v.z += bias[c + 2];
        v.w += bias[c + 3];
      } else {
        float b = bias[(i * 4 / inner) % channels];
        v.x += b;
        v.y += b;
        v.z += b;
        v.w += b;
      }
    }
    if (other != nullptr) {
      float4 o = other[i];
      v.x += o.x;
      v.y += o.y;
      v.z += o.z;
      v.w += o.w;
    }
    v.x = activate(v.x, act);
    v.y = activate(v.y, act);
    v.z = activate(v.z, act);
    v.w = activate(v.w, act);
    y[i] = v;
  }
}

// Warp-per-item kernels: the first item of this thread's warp, and the step to its next one.
__device__ __forceinline__ int64_t first_warp() { return blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; }
__device__ __forceinline__ int64_t warp_stride() { return (int64_t)gridDim.x * (blockDim.x / 32); }

// Planes of at least this many elements get a block each; smaller ones a warp each.
constexpr int64_t kBlockPlane = 2048;
constexpr int kThreads = 256;

// means[p] = mean of plane p of x (planes of `hw` elements), one warp per plane.
__global__ void plane_mean_warp(const float* __restrict__ x, float* __restrict__ means, int64_t planes, int64_t hw) {
  int lane = threadIdx.x % 32;
  for (int64_t p = first_warp(); p < planes; p += warp_stride()) {
    const float* plane = x + p * hw;
    float s = 0.f;
    for (int64_t i = lane; i < hw; i += 32) s += plane[i];
    s = warp_sum(s);
    if (lane == 0) means[p] = s / (float)hw;
  }
}

// The same with one block per plane.
__global__ void plane_mean_block(const float* __restrict__ x, float* __restrict__ means, int64_t hw) {
  __shared__ float partial[kThreads / 32];
  const float* plane = x + blockIdx.x * hw;
  float s = 0.f;
  if (hw % 4 == 0) {
    const float4* plane4 = reinterpret_cast<const float4*>(plane);
    for (int64_t i = threadIdx.x; i < hw / 4; i += blockDim.x) {
      float4 v = plane4[i];
      s += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) s += plane[i];
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    t = warp_sum(t);
    if (threadIdx.x == 0) means[blockIdx.x] = t / (float)hw;
  }
}

// hidden[b, j] = act(b1[j] + sum_c w1[j, c] * means[b, c]), one warp per (b, j).
__global__ void se_reduce(const float* __restrict__ means, const float* __restrict__ w1, const float* __restrict__ b1,
                          float* __restrict__ hidden, int64_t batch, int64_t channels, int64_t squeeze, int act) {
  int lane = threadIdx.x % 32;
  for (int64_t k = first_warp(); k < batch * squeeze; k += warp_stride()) {
    int64_t b = k / squeeze, j = k % squeeze;
    const float* row = w1 + j * channels;
    const float* m = means + b * channels;
    float s = 0.f;
    for (int64_t c = lane; c < channels; c += 32) s += row[c] * m[c];
    s = warp_sum(s);
    if (lane == 0) hidden[k] = activate(s + (b1 != nullptr ? b1[j] : 0.f), act);
  }
}

// The gate of plane p = (b, c): sigmoid(b2[c] + sum_j w2[c, j] * hidden[b, j]), by one warp.
__device__ __forceinline__ float se_gate(const float* __restrict__ hidden, const float* __restrict__ w2,
                                         const float* __restrict__ b2, int64_t p, int64_t channels, int64_t squeeze) {
  int lane = threadIdx.x % 32;
  int64_t b = p / channels, c = p % channels;
  const float* row = w2 + c * squeeze;
  const float* h = hidden + b * squeeze;
  float s = 0.f;
  for (int64_t j = lane; j < squeeze; j += 32) s += row[j] * h[j];
  s = warp_sum(s) + (b2 != nullptr ? b2[c] : 0.f);
  return 1.f / (1.f + expf(-s));
}

// y = x * gate, plane by plane: one warp per plane.
__global__ void se_scale_warp(const float* __restrict__ x, const float* __restrict__ hidden, const float* __restrict__ w2,
                              const float* __restrict__ b2, float* __restrict__ y, int64_t planes, int64_t channels,
                              int64_t squeeze, int64_t hw) {
  for (int64_t p = first_warp(); p < planes; p += warp_stride()) {
    float gate = se_gate(hidden, w2, b2, p, channels, squeeze);
    for (int64_t i = threadIdx.x % 32; i < hw; i += 32) y[p * hw + i] = x[p * hw + i] * gate;
  }
}

// The same with one block per plane (the first warp computes the gate).
__global__ void se_scale_block(const float* __restrict__ x, const float* __restrict__ hidden, const float* __restrict__ w2,
                               const float* __restrict__ b2, float* __restrict__ y, int64_t channels, int64_t squeeze,
                               int64_t hw) {
  __shared__ float gate;
  int64_t p = blockIdx.x;
  if (threadIdx.x < 32) {
    float g = se_gate(hidden, w2, b2, p, channels, squeeze);
    if (threadIdx.x == 0) gate = g;
  }
  __syncthreads();
  float g = gate;
  const float* in = x + p * hw;
  float* out = y + p * hw;
  if (hw % 4 == 0) {
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (int64_t i = threadIdx.x; i < hw / 4; i += blockDim.x) {
      float4 v = in4[i];
      out4[i] = make_float4(v.x * g, v.y * g, v.z * g, v.w * g);
    }
  } else {
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) out[i] = in[i] * g;
  }
}

unsigned grid_for(int64_t work, int64_t per_block) {
  int64_t blocks = (work + per_block - 1) / per_block;
  // A grid-stride loop covers the rest; far more blocks than that only costs scheduling.
  return (unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// In place on `y` (n elements, `channels` channels; `inner` = H*W for NCHW, 1 for NHWC).
extern "C" int nk_conv_epilogue(float* y, const float* bias, const float* other, int64_t n, int64_t channels,
                                int64_t inner, int act, cudaStream_t stream) {
  if (n == 0) return 0;
  bool by4 = n % 4 == 0 && aligned16(y) && aligned16(other) && (inner == 1 ? channels % 4 == 0 : inner % 4 == 0);
  if (by4) {
    epilogue_kernel4<<<grid_for(n / 4, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(y), bias, reinterpret_cast<const float4*>(other), n / 4, channels, inner, act);
  } else {
    epilogue_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, bias, other, n, channels, inner, act);
  }
  return (int)cudaGetLastError();
}

// y = x * sigmoid(W2 act(W1 mean_hw(x) + b1) + b2) for contiguous NCHW x of `batch` × `channels`
// planes of `hw` elements; w1 is squeeze × channels, w2 channels × squeeze. `means` (batch ×
// channels) and `hidden` (batch × squeeze) are scratch.
extern "C" int nk_squeeze_excite(const float* x, const float* w1, const float* b1, const float* w2, const float* b2,
                                 float* y, float* means, float* hidden, int64_t batch, int64_t channels,
                                 int64_t squeeze, int64_t hw, int act, cudaStream_t stream) {
  int64_t planes = batch * channels;
  if (planes == 0) return 0;
  const int warps = kThreads / 32;
  bool by_block = hw >= kBlockPlane;
  bool vec = aligned16(x) && aligned16(y);
  if (by_block && vec) {
    plane_mean_block<<<(unsigned)planes, kThreads, 0, stream>>>(x, means, hw);
  } else {
    plane_mean_warp<<<grid_for(planes, warps), kThreads, 0, stream>>>(x, means, planes, hw);
  }
  se_reduce<<<grid_for(batch * squeeze, warps), kThreads, 0, stream>>>(means, w1, b1, hidden, batch, channels, squeeze, act);
  if (by_block && vec) {
    se_scale_block<<<(unsigned)planes, kThreads, 0, stream>>>(x, hidden, w2, b2, y, channels, squeeze, hw);
  } else {
    se_scale_warp<<<grid_for(planes, warps), kThreads, 0, stream>>>(x, hidden, w2, b2, y, planes, channels, squeeze, hw);
  }
  return (int)cudaGetLastError();
}
