// The device and its allocator (device count, synchronize, the caching allocator's statistics
// and cache), event timing, and a device-side profile of whatever runs between two calls.

#include "common.h"
#include "nimble_shim.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>
#include <sstream>
#include <utility>

using namespace nimble_shim;

extern "C" {

int ns_cuda_device_count(int* out) {
  return guarded([&] { *out = static_cast<int>(c10::cuda::device_count()); });
}

int ns_cuda_synchronize() {
  return guarded([&] { c10::cuda::device_synchronize(); });
}

// What one multiprocessor of `device` holds at once: out = {multiprocessors, max threads, max
// blocks, 32-bit registers, shared memory bytes} per multiprocessor.
int ns_sm_limits(int device, long long* out) {
  return guarded([&] {
    if (device < 0 || device >= static_cast<int>(c10::cuda::device_count())) throw std::runtime_error("no CUDA device " + std::to_string(device));
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
    out[0] = p->multiProcessorCount;
    out[1] = p->maxThreadsPerMultiProcessor;
    out[2] = p->maxBlocksPerMultiProcessor;
    out[3] = p->regsPerMultiprocessor;
    out[4] = static_cast<long long>(p->sharedMemPerMultiprocessor);
  });
}

// Makes `device` this thread's current CUDA device (a data-parallel rank's GPU).
int ns_set_device(int device) {
  return guarded([&] {
    int count = c10::cuda::device_count();
    if (device < 0 || device >= count)
      throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (this process sees " + std::to_string(count) + ")");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  });
}

// Bytes the caching allocator has handed out and not yet taken back, on `device`.
int ns_cuda_allocated_bytes(int device, long long* out) {
  return guarded([&] {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    *out = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  });
}

// Whether float32 convolutions on CUDA may run in TF32 (libtorch's and PyTorch's default: yes;
// torch.backends.cudnn.conv.fp32_precision = "tf32" or "ieee"). Matmuls keep libtorch's
// default, full float32.
int ns_set_conv_tf32(int allow) {
  return guarded([&] {
    // The legacy setter, as torch.backends.cudnn.allow_tf32 = ... calls it: setting the
    // per-op precision instead left TF32 in the channels-last convolutions' plans.
    at::globalContext().setAllowTF32CuDNN(allow != 0);
  });
}

int ns_conv_tf32(int* out) {
  return guarded([&] { *out = at::globalContext().allowTF32CuDNN() ? 1 : 0; });
}

// Returns the caching allocator's unused cached blocks to the driver (torch.cuda.empty_cache).
int ns_cuda_empty_cache() {
  return guarded([&] { c10::cuda::CUDACachingAllocator::emptyCache(); });
}

// A pair of timing events on the current stream: the paper's way to time one launch.
int ns_timer_new(void** out) {
  return guarded([&] {
    auto* pair = new std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>(cudaEventDefault, cudaEventDefault);
    *out = pair;
  });
}
void ns_timer_free(void* timer) { delete static_cast<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>*>(timer); }
int ns_timer_start(void* timer) {
  return guarded([&] { static_cast<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>*>(timer)->first.record(c10::cuda::getCurrentCUDAStream()); });
}
// Records the end on the current stream without waiting (read it with ns_timer_elapsed).
int ns_timer_end(void* timer) {
  return guarded([&] { static_cast<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>*>(timer)->second.record(c10::cuda::getCurrentCUDAStream()); });
}
// Waits for a recorded end and gives the elapsed milliseconds.
int ns_timer_elapsed(void* timer, float* ms) {
  return guarded([&] {
    auto* pair = static_cast<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>*>(timer);
    pair->second.synchronize();
    *ms = pair->first.elapsed_time(pair->second);
  });
}
// Records the end on the current stream, waits for it, and gives the elapsed milliseconds.
int ns_timer_stop(void* timer, float* ms) {
  return guarded([&] {
    auto* pair = static_cast<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>*>(timer);
    pair->second.record(c10::cuda::getCurrentCUDAStream());
    pair->second.synchronize();
    *ms = pair->first.elapsed_time(pair->second);
  });
}

// ---------------------------------------------------------------------------------------------
// Device-side profiling through libtorch's Kineto profiler (CUPTI underneath): every kernel,
// copy and memset the GPU ran between ns_profile_begin and ns_profile_end, kernels launched
// by a CUDA graph replay included.
// ---------------------------------------------------------------------------------------------

int ns_profile_begin() {
  return guarded([&] {
    namespace prof = torch::autograd::profiler;
    using torch::profiler::impl::ActivityType;
    using torch::profiler::impl::ProfilerConfig;
    using torch::profiler::impl::ProfilerState;
    if (torch::profiler::impl::profilerEnabled()) throw std::runtime_error("a profiler is already running");
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    using torch::profiler::impl::ExperimentalConfig;
    // Kineto's per-activity metadata (a kernel's grid, block, registers and occupancy) on events().
    ExperimentalConfig experimental({}, false, false, {}, false, false, false, false, false, false,
                                    /*expose_kineto_event_metadata=*/true);
    ProfilerConfig config(ProfilerState::KINETO, false, false, false, false, false, experimental);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  });
}

// Ends the profile. `chrome_trace`: when not null, the whole trace is also written there
// (chrome://tracing / Perfetto format). `out`: one line per device activity,
//   <kind kernel|memcpy|memset> \t <start ns> \t <duration ns> \t <stream> \t <name> \t <metadata>
// where metadata is Kineto's JSON fragment for the activity (no braces; may be empty).
int ns_profile_end(const char* chrome_trace, char** out) {
  return guarded([&] {
    auto result = torch::autograd::profiler::disableProfiler();
    if (!result) throw std::runtime_error("the profiler returned no result");
    // libkineto::ActivityType's codes for what the device itself runs.
    constexpr uint8_t kMemcpy = 3, kMemset = 4, kKernel = 5;
    std::ostringstream o;
    for (const auto& e : result->events()) {
      const uint8_t kind = e.activityType();
      const char* label = kind == kKernel ? "kernel" : kind == kMemcpy ? "memcpy" : kind == kMemset ? "memset" : nullptr;
      if (label == nullptr || e.deviceType() != c10::DeviceType::CUDA) continue;
      std::string name = e.name();
      for (char& c : name)
        if (c == '\t' || c == '\n') c = ' ';
      std::string meta = e.metadataJson();
      for (char& c : meta)
        if (c == '\t' || c == '\n') c = ' ';
      o << label << '\t' << e.startNs() << '\t' << e.durationNs() << '\t' << e.deviceResourceId() << '\t' << name << '\t' << meta
        << '\n';
    }
    if (chrome_trace != nullptr) result->save(chrome_trace);
    *out = owned_copy(o.str());
  });
}

// A copy of `tensor` in channels-last layout (4-D tensors; others are copied as they are).
int ns_channels_last_copy(void* tensor, void** out) {
  return guarded([&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    *out = new at::Tensor(t.dim() == 4 ? t.contiguous(at::MemoryFormat::ChannelsLast).clone(at::MemoryFormat::Preserve) : t.clone());
  });
}

}  // extern "C"
