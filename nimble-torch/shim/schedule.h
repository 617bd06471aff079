// A schedule (per-op streams, waits and events) and the CUDA graph a pass captures into: shared
// by the scheduled passes (passes.cpp) and training (training.cpp), whose backward runs on a
// schedule's origin stream and whose autograd function replays captured graphs.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <string>
#include <vector>

namespace nimble_shim {

struct Schedule {
  std::vector<std::string> names;
  std::vector<int> stream_of;
  std::vector<std::vector<int>> waits;  // per op: the ops whose events it waits on
  std::vector<char> record;             // per op: someone waits on it
  std::vector<c10::cuda::CUDAStream> streams;  // per logical stream; [0] is the origin
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  bool timing = false;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> starts, ends;
  // Per op, when the pass is captured: the capture's node count before and after the op, so
  // the nodes [first, second) of a one-stream capture are the op's (kernel timing).
  bool count_nodes = false;
  std::vector<std::pair<int, int>> node_range;

  // per pass
  int k = 0;
  int depth = 0;
  bool open = false;   // a pass is running
  bool armed = false;  // ... and its per-op callback is on
  std::string problem;  // what disarming found
  std::string mismatch;
  std::string host_sync;
  int host_sync_index = 0;
  at::CallbackHandle handle = 0;
  std::unique_ptr<c10::cuda::CUDAStream> previous;
};

// at::cuda::CUDAGraph, plus an end of capture that leaves libtorch usable when the capture
// failed. CUDAGraph::capture_end throws before undoing capture_begin's global changes when the
// capture was invalidated (the caching allocator keeps routing to the graph's pool, the CUDA
// generator stays in capture mode and every later randn fails); this undoes them.
struct Graph : at::cuda::CUDAGraph {
  Graph() : at::cuda::CUDAGraph(/*keep_graph=*/true) {}

  void end_capture() {
    c10::cuda::setCurrentCUDAStream(capture_stream_);
    try {
      capture_end();
    } catch (...) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(capture_stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        if (cudaStreamEndCapture(capture_stream_, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
      }
      (void)cudaGetLastError();  // the capture's error is reported by the rethrow below
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
      } catch (...) {  // capture_end got that far
      }
      // What CUDAGeneratorState::capture_epilogue does (it is not exported): leave capture mode.
      for (auto& entry : captured_generator_states_) entry.first->capturing_ = false;
      throw;
    }
  }
};

}  // namespace nimble_shim
