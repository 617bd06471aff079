// Scheduled passes: a forward run again with every op on its planned CUDA stream, waiting on
// events exactly at the plan's syncs, checked op by op against the trace, optionally timed per
// op, and optionally captured into one at::cuda::CUDAGraph; and the graph's own entry points.

#include "common.h"
#include "nimble_shim.h"
#include "schedule.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>

#include <map>
#include <mutex>
#include <sstream>

namespace nimble_shim {
namespace {

thread_local Schedule* g_schedule = nullptr;
thread_local Schedule* g_open_pass = nullptr;

// How many nodes the capture running on `stream` holds so far (-1 when it is not capturing).
int captured_nodes(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  if (cudaStreamGetCaptureInfo(stream, &status, &id, &graph) != cudaSuccess || status != cudaStreamCaptureStatusActive || graph == nullptr) {
    (void)cudaGetLastError();
    return -1;
  }
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return static_cast<int>(count);
}

std::unique_ptr<at::ObserverContext> schedule_start(const at::RecordFunction& fn) {
  if (g_schedule == nullptr) return nullptr;
  Schedule& s = *g_schedule;
  s.depth++;
  // Only matters where there is a device to synchronize with.
  if (!s.streams.empty() && s.host_sync.empty() && syncs_with_host(fn)) {
    s.host_sync = fn.name();
    s.host_sync_index = s.k;
  }
  if (s.depth != 1 || !s.mismatch.empty()) return nullptr;
  int k = s.k;
  if (k >= static_cast<int>(s.names.size())) {
    s.mismatch = "op #" + std::to_string(k) + " is " + fn.name() + ", but the traced forward ended after " +
                 std::to_string(s.names.size()) + " ops";
    return nullptr;
  }
  if (s.names[k] != fn.name()) {
    s.mismatch = "op #" + std::to_string(k) + " is " + fn.name() + ", but the trace has " + s.names[k] + " there";
    return nullptr;
  }
  if (s.streams.empty()) return nullptr;  // a check-only pass (no device)
  const auto& stream = s.streams[s.stream_of[k]];
  for (int p : s.waits[k]) s.events[p]->block(stream);
  c10::cuda::setCurrentCUDAStream(stream);
  // A no-op for tensors allocated on this stream; marks the ones produced on other streams.
  for (const auto& v : own_inputs(fn, op_info(fn))) record_streams(v, stream);
  if (s.timing) s.starts[k]->record(stream);
  if (s.count_nodes) s.node_range[k].first = captured_nodes(stream);
  return nullptr;
}

void schedule_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (g_schedule == nullptr) return;
  Schedule& s = *g_schedule;
  if (s.depth == 1 && s.mismatch.empty() && s.streams.empty()) {
    s.k++;
  } else if (s.depth == 1 && s.mismatch.empty()) {
    int k = s.k;
    const auto& stream = s.streams[s.stream_of[k]];
    if (s.timing) s.ends[k]->record(stream);
    if (s.count_nodes) s.node_range[k].second = captured_nodes(stream);
    if (s.record[k]) s.events[k]->record(stream);
    s.k++;
  }
  s.depth--;
}

void join_streams(Schedule& s) {
  if (s.streams.empty()) return;
  for (size_t i = 1; i < s.streams.size(); i++) {
    if (s.streams[i] == s.streams[0]) continue;
    at::cuda::CUDAEvent join(cudaEventDisableTiming);
    join.record(s.streams[i]);
    join.block(s.streams[0]);
  }
}

// Turns the per-op callback off (the forward is done) and checks the op sequence; the pass stays
// open, with the origin stream current, for what follows in the same capture (loss, backward,
// optimizer). Returns "" or what went wrong, as ns_pass_end does.
// `for_tail`: what follows in the pass runs on the origin stream, so join every stream into it.
std::string disarm(Schedule& s, bool for_tail) {
  if (!s.armed) return s.problem;
  at::removeCallback(s.handle);
  g_schedule = nullptr;
  s.armed = false;
  std::string what;
  if (!s.host_sync.empty()) {
    int k = s.host_sync_index;
    what = "op #" + std::to_string(k) + " (" + (k < static_cast<int>(s.names.size()) ? s.names[k] : std::string("beyond the trace")) +
           ") synchronizes with the host through " + s.host_sync;
  } else if (!s.mismatch.empty()) {
    what = s.mismatch;
  } else if (s.k != static_cast<int>(s.names.size())) {
    what = "the forward ended after " + std::to_string(s.k) + " ops, but the trace has " + std::to_string(s.names.size()) +
           "; the first missing op is " + s.names[s.k];
  }
  if (!s.streams.empty() && for_tail) {
    // What follows runs on the origin stream and may read anything the forward produced.
    join_streams(s);
    c10::cuda::setCurrentCUDAStream(s.streams[0]);
  }
  s.problem = what;
  return what;
}

}  // namespace

bool pass_running() { return g_schedule != nullptr || g_open_pass != nullptr; }

}  // namespace nimble_shim

using namespace nimble_shim;

extern "C" {

// names: the traced op names joined by '\n'; waits: flattened, wait_counts[i] entries per op.
// timing: 0 none, 1 an event pair per op (durations), 2 count a captured pass's nodes per op.
int ns_schedule_new(int n, const char* names, const int* stream_of, const int* wait_counts, const int* wait_list,
                    const unsigned char* record, int n_streams, int device, int timing, void** out) {
  return guarded([&] {
    auto s = std::make_unique<Schedule>();
    std::istringstream is(names);
    std::string line;
    while (std::getline(is, line)) s->names.push_back(line);
    if (static_cast<int>(s->names.size()) != n) throw std::runtime_error("schedule: op names and op count differ");
    int offset = 0;
    for (int i = 0; i < n; i++) {
      if (stream_of[i] < 0 || stream_of[i] >= n_streams) throw std::runtime_error("schedule: stream index out of range");
      s->stream_of.push_back(stream_of[i]);
      std::vector<int> w(wait_list + offset, wait_list + offset + wait_counts[i]);
      for (int p : w)
        if (p < 0 || p >= i) throw std::runtime_error("schedule: an op waits on one that is not earlier");
      offset += wait_counts[i];
      s->waits.push_back(std::move(w));
      s->record.push_back(record[i] != 0);
    }
    if (device < 0) {  // check-only: the op sequence is compared, nothing is scheduled
      if (timing != 0) throw std::runtime_error("schedule: timing needs a CUDA device");
      *out = s.release();
      return;
    }
    for (int i = 0; i < n; i++) s->events.emplace_back(new at::cuda::CUDAEvent(cudaEventDisableTiming));
    // Logical stream i is the i-th of a process-wide list of c10 pool streams, the same for
    // every schedule: libtorch keeps per-stream state for the process's lifetime (a cuBLAS
    // workspace per stream), so fresh streams per prepare would grow memory each time. The
    // pool has 32 streams per priority, handed out round-robin, so the list has up to 32
    // distinct ones; plans with more logical streams share them, which only adds ordering (ops
    // are issued in a topological order), never removes it.
    static std::mutex streams_mutex;
    static std::map<int, std::vector<c10::cuda::CUDAStream>> streams_by_device;
    {
      std::lock_guard<std::mutex> lock(streams_mutex);
      auto& list = streams_by_device[device];
      while (static_cast<int>(list.size()) < std::min(n_streams, 32)) list.push_back(c10::cuda::getStreamFromPool(false, device));
      for (int i = 0; i < n_streams; i++) s->streams.push_back(list[i % list.size()]);
    }
    s->timing = timing == 1;
    s->count_nodes = timing == 2;
    if (s->count_nodes) s->node_range.assign(n, {-1, -1});
    if (s->timing) {
      for (int i = 0; i < n; i++) {
        s->starts.emplace_back(new at::cuda::CUDAEvent(cudaEventDefault));
        s->ends.emplace_back(new at::cuda::CUDAEvent(cudaEventDefault));
      }
    }
    *out = s.release();
  });
}

void ns_schedule_free(void* schedule) { delete static_cast<Schedule*>(schedule); }

// Starts a pass: the origin stream becomes current, the capture (if `graph`) begins, every stream
// forks from the origin, and the callback is armed (after capture_begin, which runs ops itself).
// `gate_cycles` > 0 first holds the origin stream busy that long, so the ops of a timing pass
// queue up behind it and their events time the GPU work alone, not the launches. Without `arm`
// the streams are forked (and captured) but ops run where libtorch puts them, unchecked: the
// backward pass of training, whose ops the autograd engine issues.
int ns_pass_begin(void* schedule, void* graph, int capture_mode, long long gate_cycles, int arm) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    check_no_trace_or_pass();
    s->k = 0;
    s->depth = 0;
    s->mismatch.clear();
    s->host_sync.clear();
    s->problem.clear();
    if (s->streams.empty() && (graph != nullptr || gate_cycles > 0)) throw std::runtime_error("a check-only schedule cannot capture or time");
    if (!s->streams.empty()) {
      s->previous = std::make_unique<c10::cuda::CUDAStream>(c10::cuda::getCurrentCUDAStream(s->streams[0].device_index()));
      c10::cuda::setCurrentCUDAStream(s->streams[0]);
    }
    if (graph != nullptr) {
      cudaStreamCaptureMode mode = capture_mode == 1 ? cudaStreamCaptureModeThreadLocal
                                   : capture_mode == 2 ? cudaStreamCaptureModeRelaxed
                                                       : cudaStreamCaptureModeGlobal;
      try {
        // cuBLAS caches a workspace per handle and stream for the process's life (32 MiB each
        // on Hopper): dropped here, the capture allocates the ones its matmuls use from the
        // graph's pool, given back with the graph, instead of baking in ones the warm-up left
        // outside it (33 MB stayed allocated after a side-stream plan was dropped). Dropped
        // again after the capture (ns_pass_end), so no eager matmul computes in the pool.
        at::cuda::clearCublasWorkspaces();
        static_cast<Graph*>(graph)->capture_begin({0, 0}, mode);
      } catch (...) {
        if (s->previous) c10::cuda::setCurrentCUDAStream(*s->previous);
        throw;
      }
    }
    try {
      if (gate_cycles > 0) at::cuda::sleep(gate_cycles);
      if (!s->streams.empty()) {
        at::cuda::CUDAEvent fork(cudaEventDisableTiming);
        fork.record(s->streams[0]);
        for (size_t i = 1; i < s->streams.size(); i++)
          if (s->streams[i] != s->streams[0]) fork.block(s->streams[i]);
      }
      if (arm)
        s->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(schedule_start, schedule_end)
                                                   .needsInputs(true)
                                                   .needsOutputs(true)
                                                   .scopes({at::RecordScope::FUNCTION}));
    } catch (...) {
      if (graph != nullptr) {
        try {
          static_cast<Graph*>(graph)->end_capture();
        } catch (...) {
        }
      }
      if (s->previous) c10::cuda::setCurrentCUDAStream(*s->previous);
      throw;
    }
    g_open_pass = s;
    s->open = true;
    if (arm) {
      g_schedule = s;
      s->armed = true;
    }
  });
}

// Ends a pass: disarms (if still armed), joins every stream into the origin, ends the capture
// (always, so the stream is never left capturing), restores the previous current stream.
// `problem` receives "" or what went wrong with the op sequence (the first differing op, or a
// host sync) or the capture.
int ns_pass_end(void* schedule, void* graph, char** problem) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (!s->open) throw std::runtime_error("no pass is running on this schedule");
    std::string what = disarm(*s, false);
    s->open = false;
    g_open_pass = nullptr;
    std::string capture_error;
    try {
      join_streams(*s);
    } catch (const std::exception& e) {
      capture_error = e.what();
    }
    if (graph != nullptr) {
      try {
        static_cast<Graph*>(graph)->end_capture();
      } catch (const c10::Error& e) {
        if (capture_error.empty()) capture_error = e.what_without_backtrace();
      } catch (const std::exception& e) {
        if (capture_error.empty()) capture_error = e.what();
      }
      at::cuda::clearCublasWorkspaces();
    }
    if (s->previous) c10::cuda::setCurrentCUDAStream(*s->previous);
    if (!capture_error.empty() && what.empty()) what = "capture failed: " + capture_error;
    *problem = owned_copy(what);
  });
}

// Marks `tensors` (made on any of the schedule's streams) as used on its origin stream.
int ns_record_on_origin(void* schedule, void* const* tensors, int n) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (s->streams.empty()) return;
    for (const auto& t : tensor_list(tensors, n)) record_streams(t, s->streams[0]);
  });
}

int ns_pass_disarm(void* schedule, char** problem) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (!s->open) throw std::runtime_error("no pass is running on this schedule");
    *problem = owned_copy(disarm(*s, true));
  });
}

// Per op of the last captured pass of a node-counting schedule: the capture's node count before
// and after it (out: 2n ints; -1 where the pass was not captured).
int ns_schedule_node_ranges(void* schedule, int* out, int n) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (!s->count_nodes) throw std::runtime_error("this schedule does not count captured nodes");
    if (n != static_cast<int>(s->node_range.size())) throw std::runtime_error("node range buffer has the wrong length");
    for (int i = 0; i < n; i++) {
      out[2 * i] = s->node_range[i].first;
      out[2 * i + 1] = s->node_range[i].second;
    }
  });
}

// Per-op GPU time in microseconds of the last timing pass (waits for it to finish).
int ns_schedule_durations(void* schedule, float* out_us, int n) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (!s->timing) throw std::runtime_error("this schedule does not time its ops");
    if (n != static_cast<int>(s->starts.size())) throw std::runtime_error("duration buffer has the wrong length");
    for (int i = 0; i < n; i++) {
      s->ends[i]->synchronize();
      out_us[i] = s->starts[i]->elapsed_time(*s->ends[i]) * 1000.0f;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// CUDA graphs
// ---------------------------------------------------------------------------------------------

int ns_graph_new(void** out) {
  return guarded([&] { *out = new Graph(); });
}
void ns_graph_free(void* graph) {
  try {
    delete static_cast<Graph*>(graph);
  } catch (...) {
  }
}
int ns_graph_instantiate(void* graph) {
  return guarded([&] { static_cast<Graph*>(graph)->instantiate(); });
}
int ns_graph_replay(void* graph) {
  return guarded([&] { static_cast<Graph*>(graph)->replay(); });
}
int ns_graph_raw(void* graph, void** out) {
  return guarded([&] { *out = static_cast<Graph*>(graph)->raw_cuda_graph(); });
}

}  // extern "C"
