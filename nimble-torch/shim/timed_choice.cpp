// See timed_choice.h.

#include "timed_choice.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace nimble::fused {
namespace {

// Spin cycles per microsecond the host needs to queue a round: 2000 is the H200's 1.98 GHz with
// room to spare (a slower clock only lengthens the spin).
constexpr double kSpinCyclesPerUs = 2000.0;

// Microseconds per call of `run` on `stream` (the current stream): the best of five rounds after
// three warm-ups (the first calls also run cuDNN's algorithm search). A round is ten calls, or
// fewer for a call that takes longer than 20 us, so that timing a large convolution costs about
// as much as timing a small one. Each round waits behind a spin kernel twice as long as the host
// took to queue as many calls in the warm-up, so that its calls are all queued before the GPU
// reaches them: the events time the GPU's work alone, as a graph replays it, not the host's
// launching (for a small convolution at batch 1, ATen's host side takes longer than the kernels,
// which made the way with fewer host calls look faster: ResNet-18 took a way that was 5% slower
// in its graph). Infinity if the events fail.
double time_us(const std::function<void()>& run, cudaStream_t stream) {
  for (int i = 0; i < 2; i++) run();
  auto queued = std::chrono::steady_clock::now();
  run();
  double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - queued).count();
  cudaEvent_t start = nullptr, end = nullptr;
  double best = std::numeric_limits<double>::infinity();
  if (cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess) {
    int calls = 1;
    for (int round = 0; round < 6; round++) {
      at::cuda::sleep(static_cast<int64_t>((2.0 * host_us * calls + 20.0) * kSpinCyclesPerUs));
      cudaEventRecord(start, stream);
      for (int i = 0; i < calls; i++) run();
      cudaEventRecord(end, stream);
      float ms = 0;
      if (cudaEventSynchronize(end) != cudaSuccess || cudaEventElapsedTime(&ms, start, end) != cudaSuccess) break;
      double us = ms * 1000.0 / calls;
      if (round == 0) {
        // The first round (one call) only sizes the others.
        calls = static_cast<int>(std::clamp(std::ceil(200.0 / std::max(us, 1e-3)), 1.0, 10.0));
        continue;
      }
      best = std::min(best, us);
    }
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  cudaGetLastError();  // a failed event call must not be reported by the next launch
  return best;
}

struct Choices {
  std::mutex mutex;
  std::unordered_map<std::string, bool> second;
};

Choices& choices() {
  static Choices all;
  return all;
}

}  // namespace

bool second_is_faster(const std::string& key, const std::function<void()>& first, const std::function<void()>& second) {
  auto& all = choices();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    auto found = all.second.find(key);
    if (found != all.second.end()) return found->second;
  }
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return false;
  }
  double first_us = time_us(first, stream);
  double second_us = time_us(second, stream);
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.second.emplace(key, second_us < 0.97 * first_us).first->second;
}

}  // namespace nimble::fused
