// Nimble's own fused CUDA kernels, behind the custom ops that the inference rewrites put into a
// frozen TorchScript graph (see fused_ops.cpp, linear_ops.cpp):
//
//  * the epilogue of a convolution or a matrix product: bias, an optional residual, an
//    activation, in one pass over the output (ATen runs the product, then one kernel for the
//    bias, one for the add, one for the activation);
//  * squeeze-and-excitation in three kernels: partial plane means, the first 1×1 convolution
//    with its activation, then the second one with the sigmoid gate fused into the scaling of the
//    input (ATen needs eight or more kernels for the same block at batch 1); channels-last
//    inputs take four (the gates are computed once, then the scaling runs over NHWC).
//
// Plain CUDA with no libtorch headers: the launchers take raw float32 pointers, shapes and the
// stream, and return the launch's cudaError_t. The shim checks layouts, dtypes and shapes and
// calls them only for what they handle (float32, contiguous NCHW or NHWC); everything else takes ATen's path.

#include "nimble_kernels.h"

namespace {

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case kNkRelu: return fmaxf(v, 0.f);
    case kNkSilu: return v / (1.f + expf(-v));
    case kNkRelu6: return fminf(fmaxf(v, 0.f), 6.f);
    case kNkGelu: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case kNkGeluTanh: return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
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

constexpr int kThreads = 256;
// Squeeze-and-excitation works in chunks of a plane, one warp each, every lane loading its
// elements at once: at batch 1 the planes are too few to fill the GPU, and a loop of dependent
// loads per thread would leave it waiting on memory latency.
constexpr int kPerLane = 8;
constexpr int64_t kChunk = 32 * kPerLane;

// partials[p * chunks + k] = (sum of chunk k of plane p) / hw.
__global__ void se_pool(const float* __restrict__ x, float* __restrict__ partials, int64_t planes, int64_t hw,
                        int64_t chunks) {
  int lane = threadIdx.x % 32;
  float inv = 1.f / (float)hw;
  for (int64_t item = first_warp(); item < planes * chunks; item += warp_stride()) {
    const float* plane = x + (item / chunks) * hw;
    int64_t start = (item % chunks) * kChunk + lane;
    float v[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; e++) v[e] = start + 32 * e < hw ? plane[start + 32 * e] : 0.f;
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < kPerLane; e++) s += v[e];
    s = warp_sum(s);
    if (lane == 0) partials[item] = s * inv;
  }
}

// hidden[b, j] = act(b1[j] + sum_c w1[j, c] * mean[b, c]), one block per (b, j). A mean is the
// sum of its plane's chunk partials, so the sum runs over (c, chunk) pairs, spread over the block.
__global__ void se_reduce(const float* __restrict__ partials, const float* __restrict__ w1, const float* __restrict__ b1,
                          float* __restrict__ hidden, int64_t squeeze, int64_t channels, int64_t chunks, int act) {
  __shared__ float warp_sums[kThreads / 32];
  int64_t item = blockIdx.x, b = item / squeeze, j = item % squeeze;
  const float* row = w1 + j * channels;
  const float* part = partials + b * channels * chunks;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < channels * chunks; i += blockDim.x) s += row[i / chunks] * part[i];
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.f;
    t = warp_sum(t);
    if (threadIdx.x == 0) hidden[item] = activate(t + (b1 != nullptr ? b1[j] : 0.f), act);
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

// y = x * gate, one warp per chunk of a plane (each computes its plane's gate).
__global__ void se_scale(const float* __restrict__ x, const float* __restrict__ hidden, const float* __restrict__ w2,
                         const float* __restrict__ b2, float* __restrict__ y, int64_t planes, int64_t channels,
                         int64_t squeeze, int64_t hw, int64_t chunks) {
  int lane = threadIdx.x % 32;
  for (int64_t item = first_warp(); item < planes * chunks; item += warp_stride()) {
    int64_t p = item / chunks;
    int64_t start = p * hw + (item % chunks) * kChunk + lane, end = (p + 1) * hw;
    float v[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; e++) v[e] = start + 32 * e < end ? x[start + 32 * e] : 0.f;
    float gate = se_gate(hidden, w2, b2, p, channels, squeeze);
#pragma unroll
    for (int e = 0; e < kPerLane; e++)
      if (start + 32 * e < end) y[start + 32 * e] = v[e] * gate;
  }
}

// Channels-last (NHWC) squeeze-and-excitation: a plane's elements lie `channels` apart. A block
// takes 32 neighbouring channels (a warp's lanes, coalesced) over a chunk of kChunk pixels; each
// warp sums kChunk / 8 of its rows, kPerLane loads in flight per lane, and the block adds the
// warps' sums. Chunks and partials are laid out as in NCHW, so se_reduce serves both.
constexpr int kRowsPerWarp = (int)(kChunk / (kThreads / 32));

__global__ void se_pool_nhwc(const float* __restrict__ x, float* __restrict__ partials, int64_t channels, int64_t hw,
                             int64_t chunks) {
  __shared__ float sums[kThreads / 32][32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t groups = (channels + 31) / 32;
  int64_t k = blockIdx.x % chunks, g = (blockIdx.x / chunks) % groups, b = blockIdx.x / (chunks * groups);
  int64_t c = g * 32 + lane;
  int64_t first = k * kChunk + (int64_t)warp * kRowsPerWarp, last = first + kRowsPerWarp < hw ? first + kRowsPerWarp : hw;
  float s = 0.f;
  if (c < channels) {
    const float* base = x + b * hw * channels + c;
    for (int64_t p = first; p < last; p += kPerLane) {
      float v[kPerLane];
#pragma unroll
      for (int e = 0; e < kPerLane; e++) v[e] = p + e < last ? base[(p + e) * channels] : 0.f;
#pragma unroll
      for (int e = 0; e < kPerLane; e++) s += v[e];
    }
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < channels) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; w++) t += sums[w][lane];
    partials[(b * channels + c) * chunks + k] = t / (float)hw;
  }
}

// gates[p] = the gate of plane p, one warp each.
__global__ void se_gates(const float* __restrict__ hidden, const float* __restrict__ w2, const float* __restrict__ b2,
                         float* __restrict__ gates, int64_t planes, int64_t channels, int64_t squeeze) {
  for (int64_t p = first_warp(); p < planes; p += warp_stride()) {
    float gate = se_gate(hidden, w2, b2, p, channels, squeeze);
    if (threadIdx.x % 32 == 0) gates[p] = gate;
  }
}

// y = x * gates[b, c] over NHWC x; four channels per thread when channels % 4 == 0.
__global__ void se_scale_nhwc(const float* __restrict__ x, const float* __restrict__ gates, float* __restrict__ y,
                              int64_t n, int64_t channels, int64_t hw) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] * gates[(i / (hw * channels)) * channels + i % channels];
}

__global__ void se_scale_nhwc4(const float4* __restrict__ x, const float* __restrict__ gates, float4* __restrict__ y,
                               int64_t n4, int64_t channels, int64_t hw) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t e = i * 4;
    const float* g = gates + (e / (hw * channels)) * channels + e % channels;
    float4 v = x[i];
    v.x *= g[0];
    v.y *= g[1];
    v.z *= g[2];
    v.w *= g[3];
    y[i] = v;
  }
}

unsigned grid_for(int64_t work, int64_t per_block) {
  int64_t blocks = (work + per_block - 1) / per_block;
  // A grid-stride loop covers the rest; far more blocks than that only costs scheduling.
  return (unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// Declared, with what each does, in nimble_kernels.h.
extern "C" int nk_epilogue(float* y, const float* bias, const float* other, int64_t n, int64_t channels,
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

extern "C" int64_t nk_se_chunks(int64_t hw) { return (hw + kChunk - 1) / kChunk; }

extern "C" int nk_squeeze_excite(const float* x, const float* w1, const float* b1, const float* w2, const float* b2,
                                 float* y, float* partials, float* hidden, float* gates, int64_t batch, int64_t channels,
                                 int64_t squeeze, int64_t hw, int channels_last, int act, cudaStream_t stream) {
  int64_t planes = batch * channels, chunks = nk_se_chunks(hw);
  if (planes == 0) return 0;
  const int warps = kThreads / 32;
  if (!channels_last) {
    se_pool<<<grid_for(planes * chunks, warps), kThreads, 0, stream>>>(x, partials, planes, hw, chunks);
  } else {
    se_pool_nhwc<<<(unsigned)(batch * ((channels + 31) / 32) * chunks), kThreads, 0, stream>>>(x, partials, channels, hw,
                                                                                             chunks);
  }
  se_reduce<<<(unsigned)(batch * squeeze), kThreads, 0, stream>>>(partials, w1, b1, hidden, squeeze, channels, chunks, act);
  if (!channels_last) {
    se_scale<<<grid_for(planes * chunks, warps), kThreads, 0, stream>>>(x, hidden, w2, b2, y, planes, channels, squeeze,
                                                                        hw, chunks);
    return (int)cudaGetLastError();
  }
  int64_t n = planes * hw;
  se_gates<<<grid_for(planes, warps), kThreads, 0, stream>>>(hidden, w2, b2, gates, planes, channels, squeeze);
  if (channels % 4 == 0 && aligned16(x) && aligned16(y)) {
    se_scale_nhwc4<<<grid_for(n / 4, kThreads), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), gates,
                                                                        reinterpret_cast<float4*>(y), n / 4, channels, hw);
  } else {
    se_scale_nhwc<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, gates, y, n, channels, hw);
  }
  return (int)cudaGetLastError();
}
