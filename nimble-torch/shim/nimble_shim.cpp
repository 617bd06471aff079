// The C++ half of nimble-torch: the few libtorch facilities tch does not expose.
//
//  * recording the top-level ATen ops of a forward (a thread-local RecordFunction callback),
//  * issuing the ops of later passes on planned CUDA streams with events at the plan's syncs,
//  * capturing one pass as an at::cuda::CUDAGraph and replaying it,
//  * TorchScript: tracing a tch forward into a module, freezing and optimizing it, running it,
//  * the caching allocator's statistics.
//
// Every entry point is `extern "C"`, returns 0 on success and -1 on failure, and never lets a
// C++ exception escape: the message is kept per thread and read with ns_last_error().
// Nothing here decides anything: the plan comes from Rust (nimble-sched), and the dependency
// analysis of a recorded trace is done in Rust.

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_conv_add_relu_fusion.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/csrc/jit/passes/normalize_ops.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

thread_local std::string g_error;

template <class F>
int guarded(F&& body) {
  try {
    body();
    return 0;
  } catch (const c10::Error& e) {
    g_error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    g_error = e.what();
  } catch (...) {
    g_error = "unknown C++ exception";
  }
  return -1;
}

char* owned_copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// Ops that make the host wait for the device (their result decides what the host does next), or
// copy between host and device memory: none of them can be captured in a CUDA graph.
bool is_host_sync_op(const char* name) {
  static const std::unordered_set<std::string> names = {
      "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero",
      "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
      "aten::unique_consecutive", "aten::unique_dim", "aten::equal", "aten::allclose",
      "aten::tolist", "aten::_assert_async", "aten::repeat_interleave"};
  return names.count(name) != 0;
}

enum Device : int { kDevCpu = 0, kDevCuda = 1, kDevOther = 2 };

// Calls `f` on every tensor in `v`, looking into lists and tuples. Returns false when something
// else (a scalar, None, …) was found on the way.
template <class F>
bool for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
    return true;
  }
  bool only_tensors = true;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) only_tensors &= for_each_tensor(e, f);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) only_tensors &= for_each_tensor(e, f);
  } else {
    only_tensors = false;
  }
  return only_tensors;
}

// What the schema says about an op: how many arguments and results it has, and which arguments
// it writes (`Tensor(a!)`). Cached per overload.
struct OpInfo {
  size_t arguments = 0;
  size_t returns = 0;
  std::vector<bool> writes;
};

const OpInfo* op_info(const at::RecordFunction& fn) {
  thread_local std::unordered_map<std::string, OpInfo> cache;
  auto op = fn.operator_name();
  if (!op) return nullptr;
  std::string key = op->name + "." + op->overload_name;
  auto found = cache.find(key);
  if (found != cache.end()) return &found->second;
  auto schema = fn.operator_schema();
  if (!schema) return nullptr;
  OpInfo info;
  info.arguments = schema->arguments().size();
  info.returns = schema->returns().size();
  for (const auto& argument : schema->arguments()) {
    const auto* alias = argument.alias_info();
    info.writes.push_back(alias != nullptr && alias->isWrite());
  }
  return &cache.emplace(key, std::move(info)).first->second;
}

// An op called boxed (as the TorchScript interpreter calls them) sees the interpreter's whole
// stack as its inputs and outputs; its own arguments and results are the last ones.
c10::ArrayRef<const c10::IValue> own_inputs(const at::RecordFunction& fn, const OpInfo* info) {
  auto all = fn.inputs();
  if (info == nullptr || all.size() <= info->arguments) return all;
  return all.slice(all.size() - info->arguments);
}

c10::ArrayRef<c10::IValue> own_outputs(const at::RecordFunction& fn, const OpInfo* info) {
  c10::ArrayRef<c10::IValue> all(fn.outputs());
  if (info == nullptr || all.size() <= info->returns) return all;
  return all.slice(all.size() - info->returns);
}

struct TensorUse {
  int64_t storage = 0;
  bool write = false;
  int device = kDevCpu;
  std::string dtype;
  std::vector<int64_t> shape;
};

struct OpRecord {
  std::string name;
  bool has_schema = false;
  std::vector<TensorUse> inputs;
  std::vector<TensorUse> outputs;
  std::string host_sync;  // first host-synchronizing op seen inside this one (or itself)
};

// ---------------------------------------------------------------------------------------------
// Recording a trace
// ---------------------------------------------------------------------------------------------

struct Recorder {
  std::vector<OpRecord> ops;
  // Every tensor seen stays alive until the trace ends, so no storage is freed and its address
  // handed to a later tensor: storage identity is then exact.
  std::vector<c10::IValue> keep_alive;
  std::unordered_map<const void*, int64_t> storage_ids;
  int depth = 0;
  at::CallbackHandle handle = 0;

  int64_t storage_id(const at::Tensor& t) {
    const void* key = t.storage().unsafeGetStorageImpl();
    auto found = storage_ids.find(key);
    if (found != storage_ids.end()) return found->second;
    int64_t id = static_cast<int64_t>(storage_ids.size());
    storage_ids.emplace(key, id);
    return id;
  }

  void collect(const c10::IValue& v, bool write, std::vector<TensorUse>& out) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || !t.has_storage()) return;
      TensorUse use;
      use.storage = storage_id(t);
      use.write = write;
      use.device = t.is_cuda() ? kDevCuda : (t.is_cpu() ? kDevCpu : kDevOther);
      use.dtype = c10::toString(t.scalar_type());
      use.shape = t.sizes().vec();
      out.push_back(std::move(use));
      keep_alive.emplace_back(t);
    });
  }

};

thread_local Recorder* g_recorder = nullptr;

bool tensors_on_both_sides(const at::RecordFunction& fn) {
  bool cpu = false, cuda = false;
  for (const auto& v : own_inputs(fn, op_info(fn))) {
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor& t = v.toTensor();
      // A 0-dim CPU tensor next to CUDA tensors is a wrapped scalar, passed by value.
      if (t.is_cpu() && t.dim() > 0) cpu = true;
      if (t.is_cuda()) cuda = true;
    }
  }
  return cpu && cuda;
}

bool syncs_with_host(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (is_host_sync_op(name)) return true;
  return (std::strcmp(name, "aten::copy_") == 0 || std::strcmp(name, "aten::_copy_from") == 0) &&
         tensors_on_both_sides(fn);
}

std::unique_ptr<at::ObserverContext> record_start(const at::RecordFunction& fn) {
  Recorder& r = *g_recorder;
  r.depth++;
  if (r.depth == 1) {
    OpRecord op;
    op.name = fn.name();
    const OpInfo* info = op_info(fn);
    op.has_schema = info != nullptr;
    auto inputs = own_inputs(fn, info);
    for (size_t i = 0; i < inputs.size(); i++) {
      bool write = info != nullptr && i < info->writes.size() && info->writes[i];
      r.collect(inputs[i], write, op.inputs);
    }
    r.ops.push_back(std::move(op));
  }
  if (!r.ops.empty() && r.ops.back().host_sync.empty() && syncs_with_host(fn)) {
    r.ops.back().host_sync = fn.name();
  }
  return nullptr;
}

void record_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Recorder& r = *g_recorder;
  if (r.depth == 1 && !r.ops.empty()) {
    for (const auto& v : own_outputs(fn, op_info(fn))) r.collect(v, false, r.ops.back().outputs);
  }
  r.depth--;
}

void write_uses(std::ostringstream& o, const char* tag, const std::vector<TensorUse>& uses) {
  for (const auto& u : uses) {
    o << tag << '\t' << u.storage << '\t' << (u.write ? 1 : 0) << '\t' << u.device << '\t' << u.dtype << '\t';
    for (size_t i = 0; i < u.shape.size(); i++) o << (i ? "," : "") << u.shape[i];
    o << '\n';
  }
}

// ---------------------------------------------------------------------------------------------
// Scheduled passes: every op on its planned stream, events at the plan's syncs
// ---------------------------------------------------------------------------------------------

struct Schedule {
  std::vector<std::string> names;
  std::vector<int> stream_of;
  std::vector<std::vector<int>> waits;  // per op: the ops whose events it waits on
  std::vector<char> record;             // per op: someone waits on it
  std::vector<c10::cuda::CUDAStream> streams;  // per logical stream; [0] is the origin
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  bool timing = false;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> starts, ends;

  // per pass
  int k = 0;
  int depth = 0;
  bool armed = false;
  std::string mismatch;
  std::string host_sync;
  int host_sync_index = 0;
  at::CallbackHandle handle = 0;
  std::unique_ptr<c10::cuda::CUDAStream> previous;
};

thread_local Schedule* g_schedule = nullptr;

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

void record_streams(const c10::IValue& v, const c10::cuda::CUDAStream& stream) {
  for_each_tensor(v, [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage() && t.is_cuda()) {
      // Marks the block as in use by `stream`, so the caching allocator does not hand it to a
      // later op of its own stream while `stream` may still read it.
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
  });
}

std::unique_ptr<at::ObserverContext> schedule_start(const at::RecordFunction& fn) {
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
  return nullptr;
}

void schedule_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Schedule& s = *g_schedule;
  if (s.depth == 1 && s.mismatch.empty() && s.streams.empty()) {
    s.k++;
  } else if (s.depth == 1 && s.mismatch.empty()) {
    int k = s.k;
    const auto& stream = s.streams[s.stream_of[k]];
    if (s.timing) s.ends[k]->record(stream);
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

}  // namespace

extern "C" {

const char* ns_last_error() { return g_error.c_str(); }
void ns_free_string(char* s) { std::free(s); }

int ns_cuda_device_count(int* out) {
  return guarded([&] { *out = static_cast<int>(c10::cuda::device_count()); });
}

// ---------------------------------------------------------------------------------------------
// Tracing. Text format of ns_trace_end, one line each:
//   op  <name> <has_schema 0|1> <host-sync op or ->
//   in  <storage> <write 0|1> <device 0 cpu|1 cuda|2 other> <dtype> <shape, comma-separated>
//   out (same fields as in)
// ---------------------------------------------------------------------------------------------

int ns_trace_begin() {
  return guarded([&] {
    if (g_recorder != nullptr || g_schedule != nullptr) throw std::runtime_error("a trace or scheduled pass is already running on this thread");
    auto recorder = std::make_unique<Recorder>();
    recorder->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(record_start, record_end)
                                                      .needsInputs(true)
                                                      .needsOutputs(true)
                                                      .scopes({at::RecordScope::FUNCTION}));
    g_recorder = recorder.release();
  });
}

int ns_trace_end(char** out) {
  return guarded([&] {
    if (g_recorder == nullptr) throw std::runtime_error("no trace is running on this thread");
    std::unique_ptr<Recorder> recorder(g_recorder);
    g_recorder = nullptr;
    at::removeCallback(recorder->handle);
    if (out == nullptr) return;  // abandoned
    std::ostringstream o;
    for (const auto& op : recorder->ops) {
      o << "op\t" << op.name << '\t' << (op.has_schema ? 1 : 0) << '\t' << (op.host_sync.empty() ? "-" : op.host_sync) << '\n';
      write_uses(o, "in", op.inputs);
      write_uses(o, "out", op.outputs);
    }
    *out = owned_copy(o.str());
  });
}

// ---------------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------------

// names: the traced op names joined by '\n'; waits: flattened, wait_counts[i] entries per op.
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
      if (timing) throw std::runtime_error("schedule: timing needs a CUDA device");
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
    s->timing = timing != 0;
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
// queue up behind it and their events time the GPU work alone, not the launches.
int ns_pass_begin(void* schedule, void* graph, int capture_mode, long long gate_cycles) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (g_recorder != nullptr || g_schedule != nullptr) throw std::runtime_error("a trace or scheduled pass is already running on this thread");
    s->k = 0;
    s->depth = 0;
    s->mismatch.clear();
    s->host_sync.clear();
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
    g_schedule = s;
    s->armed = true;
  });
}

// Ends a pass: disarms, joins every stream into the origin, ends the capture (always, so the
// stream is never left capturing), restores the previous current stream. `problem` receives ""
// or what went wrong with the op sequence (the first differing op, or a host sync).
int ns_pass_end(void* schedule, void* graph, char** problem) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (!s->armed) throw std::runtime_error("no pass is running on this schedule");
    at::removeCallback(s->handle);
    g_schedule = nullptr;
    s->armed = false;
    std::string what;
    if (!s->host_sync.empty()) {
      int k = s->host_sync_index;
      what = "op #" + std::to_string(k) + " (" + (k < static_cast<int>(s->names.size()) ? s->names[k] : std::string("beyond the trace")) +
             ") synchronizes with the host through " + s->host_sync;
    } else if (!s->mismatch.empty()) {
      what = s->mismatch;
    } else if (s->k != static_cast<int>(s->names.size())) {
      what = "the forward ended after " + std::to_string(s->k) + " ops, but the trace has " + std::to_string(s->names.size()) +
             "; the first missing op is " + s->names[s->k];
    }
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
    }
    if (s->previous) c10::cuda::setCurrentCUDAStream(*s->previous);
    if (!capture_error.empty() && what.empty()) what = "capture failed: " + capture_error;
    *problem = owned_copy(what);
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

// ---------------------------------------------------------------------------------------------
// CUDA utilities
// ---------------------------------------------------------------------------------------------

int ns_cuda_synchronize() {
  return guarded([&] { c10::cuda::device_synchronize(); });
}

// Bytes the caching allocator has handed out and not yet taken back, on `device`.
int ns_cuda_allocated_bytes(int device, long long* out) {
  return guarded([&] {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    *out = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  });
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
// TorchScript
// ---------------------------------------------------------------------------------------------

// Starts recording a TorchScript trace of whatever runs next on this thread, with `inputs` as
// the graph's inputs; ns_jit_trace_end turns it into a module with a `forward` method.
int ns_jit_trace_begin(void* const* inputs, int n, void** module) {
  return guarded([&] {
    if (torch::jit::tracer::isTracing()) throw std::runtime_error("a TorchScript trace is already running");
    auto m = std::make_unique<torch::jit::Module>("NimbleTraced");
    auto state = std::make_shared<torch::jit::tracer::TracingState>();
    torch::jit::tracer::setTracingState(state);
    try {
      state->graph->insertInput(0, "self")->setType(m->_ivalue()->type());
      for (int i = 0; i < n; i++) {
        auto* value = state->graph->addInput();
        value->setType(torch::jit::TensorType::get());
        state->setValue(*static_cast<const at::Tensor*>(inputs[i]), value);
      }
    } catch (...) {
      torch::jit::tracer::abandon();
      throw;
    }
    *module = m.release();
  });
}

int ns_jit_trace_end(void* module, void* const* outputs, int n) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    auto state = torch::jit::tracer::getTracingState();
    if (state == nullptr) throw std::runtime_error("no TorchScript trace is running");
    try {
      // A method has one result: several outputs become one tuple (ns_jit_forward flattens it).
      std::vector<torch::jit::Value*> values;
      for (int i = 0; i < n; i++) values.push_back(state->getOutput(*static_cast<const at::Tensor*>(outputs[i]), i));
      if (values.size() == 1) {
        state->graph->registerOutput(values[0]);
      } else {
        state->graph->registerOutput(state->graph->insertNode(state->graph->createTuple(values))->output());
      }
      torch::jit::FixupTraceScopeBlocks(state->graph, m);
      torch::jit::NormalizeOps(state->graph);
    } catch (...) {
      torch::jit::tracer::abandon();
      throw;
    }
    torch::jit::tracer::setTracingState(nullptr);
    auto fn = m->_ivalue()->compilation_unit()->create_function("forward", state->graph);
    m->type()->addMethod(fn);
  });
}

void ns_jit_trace_abandon() {
  try {
    if (torch::jit::tracer::isTracing()) torch::jit::tracer::abandon();
  } catch (...) {
  }
}

int ns_jit_load(const char* path, int device, void** out) {
  return guarded([&] {
    c10::Device d = device < 0 ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
    auto m = torch::jit::load(std::string(path), d);
    m.eval();
    *out = new torch::jit::Module(std::move(m));
  });
}

// A copy of `tensor` in channels-last layout (4-D tensors; others are copied as they are).
int ns_channels_last_copy(void* tensor, void** out) {
  return guarded([&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    *out = new at::Tensor(t.dim() == 4 ? t.contiguous(at::MemoryFormat::ChannelsLast).clone(at::MemoryFormat::Preserve) : t.clone());
  });
}

void ns_jit_free(void* module) { delete static_cast<torch::jit::Module*>(module); }

// Freezes the module (parameters become constants) and applies the inference rewrites:
// BatchNorm folded into the preceding convolution (and the other frozen foldings), dropout
// removed, and, when `fuse` is set (CUDA only), convolution(+add)+ReLU fused into cuDNN's fused
// kernels.
//
// `channels_last` (0 off, 1 on, 2 auto): 4-D constants (the frozen convolution weights) are
// stored channels-last, so that with a channels-last input cuDNN runs NHWC kernels without
// layout transforms (what inductor's layout optimization does for torch.compile). Auto turns it
// on unless the graph has grouped (e.g. depthwise) convolutions, which cuDNN runs slower in
// NHWC. `applied` tells whether it was.
int ns_jit_optimize(void* module, int fuse, int channels_last, void** out, int* applied) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    m->eval();
    auto frozen = torch::jit::freeze_module(*m);
    auto graph = frozen.get_method("forward").graph();
    torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
    torch::jit::removeDropout(graph);
    torch::jit::OptimizeFrozenGraph(graph, true);
    if (fuse) torch::jit::FuseFrozenConvAddRelu(graph);
    // x * sigmoid(x) (swish, as tch's EfficientNet writes it) is one SiLU kernel instead of two.
    torch::jit::SubgraphRewriter silu;
    for (const char* product : {"aten::mul(%x, %s)", "aten::mul(%s, %x)"}) {
      silu.RegisterRewritePattern(std::string("graph(%x):\n  %s = aten::sigmoid(%x)\n  %y = ") + product + "\n  return (%y)",
                                  "graph(%x):\n  %y = aten::silu(%x)\n  return (%y)");
    }
    silu.runOnGraph(graph);
    if (channels_last == 2) {
      channels_last = 1;
      for (auto* node : graph->nodes()) {
        std::string kind = node->kind().toQualString();
        if (kind != "aten::conv2d" && kind != "aten::cudnn_convolution_relu" && kind != "aten::cudnn_convolution_add_relu") continue;
        auto groups = torch::jit::toIValue(node->inputs().back());  // the last argument of all three
        if (!groups || !groups->isInt() || groups->toInt() != 1) channels_last = 0;
      }
    }
    *applied = channels_last;
    if (channels_last) {
      for (auto* node : graph->nodes()) {
        if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value) ||
            node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t)
          continue;
        const at::Tensor& t = node->t(c10::attr::value);
        if (t.dim() == 4) node->t_(c10::attr::value, t.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
    *out = new torch::jit::Module(std::move(frozen));
  });
}

// Runs `forward`, with the graph executor's optimizations off so every run issues the same ops.
// The outputs (a tensor, or a tuple/list of tensors, flattened) are returned as new tensors.
int ns_jit_forward(void* module, void* const* inputs, int n, void*** outputs, int* n_out) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    torch::jit::GraphOptimizerEnabledGuard no_optimizer(false);
    std::vector<c10::IValue> args;
    for (int i = 0; i < n; i++) args.emplace_back(*static_cast<const at::Tensor*>(inputs[i]));
    c10::IValue result = m->forward(args);
    std::vector<at::Tensor> flat;
    if (!for_each_tensor(result, [&](const at::Tensor& t) { flat.push_back(t); }))
      throw std::runtime_error("the module returned something other than tensors (in tuples or lists)");
    void** array = static_cast<void**>(std::malloc(sizeof(void*) * std::max<size_t>(flat.size(), 1)));
    if (array == nullptr) throw std::bad_alloc();
    for (size_t i = 0; i < flat.size(); i++) array[i] = new at::Tensor(flat[i]);
    *outputs = array;
    *n_out = static_cast<int>(flat.size());
  });
}
void ns_free_array(void** array) { std::free(array); }

// The module's forward graph, node kinds with their counts ("aten::conv2d=53\n…").
int ns_jit_node_kinds(void* module, char** out) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    std::map<std::string, int> counts;
    for (auto* node : m->get_method("forward").graph()->nodes()) counts[node->kind().toQualString()]++;
    std::ostringstream o;
    for (const auto& kv : counts) o << kv.first << '=' << kv.second << '\n';
    *out = owned_copy(o.str());
  });
}

}  // extern "C"
