// The C++ half of nimble-torch: the few libtorch facilities tch does not expose.
//
//  * recording the top-level ATen ops of a forward (a thread-local RecordFunction callback),
//  * issuing the ops of later passes on planned CUDA streams with events at the plan's syncs,
//  * capturing one pass as an at::cuda::CUDAGraph and replaying it,
//  * TorchScript: tracing a tch forward into a module, freezing and optimizing it, running it,
//  * the caching allocator's statistics,
//  * a device-side profile of whatever runs between two calls (libtorch's Kineto/CUPTI),
//  * training: backward passes on chosen streams, fused optimizer steps, and the autograd
//    function that replays a captured forward and backward graph.
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
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
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

#include "fused_ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <set>
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

// A malloc'd array of `new at::Tensor`s (the caller adopts them and frees the array).
void** new_tensor_array(const std::vector<at::Tensor>& tensors) {
  void** array = static_cast<void**>(std::malloc(sizeof(void*) * std::max<size_t>(tensors.size(), 1)));
  if (array == nullptr) throw std::bad_alloc();
  for (size_t i = 0; i < tensors.size(); i++) array[i] = new at::Tensor(tensors[i]);
  return array;
}

std::vector<at::Tensor> tensor_list(void* const* tensors, int n) {
  std::vector<at::Tensor> out;
  for (int i = 0; i < n; i++) out.push_back(*static_cast<const at::Tensor*>(tensors[i]));
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
  // With `keep_state` (training): every tensor the forward reads that no earlier op produced
  // (parameters, buffers such as BatchNorm's running statistics) with a copy of its value
  // before the op ran, and the leaves among them that require gradients (the parameters).
  bool keep_state = false;
  std::vector<std::pair<at::Tensor, at::Tensor>> state;
  std::vector<at::Tensor> params;
  std::unordered_set<const void*> state_seen;

  void keep_external(const c10::IValue& v) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || !t.has_storage()) return;
      const void* impl = t.unsafeGetTensorImpl();
      if (state_seen.count(impl) != 0) return;
      bool external = storage_ids.count(t.storage().unsafeGetStorageImpl()) == 0;
      bool param = t.is_leaf() && t.requires_grad();
      if (!external && !param) return;
      state_seen.insert(impl);
      if (param) params.push_back(t);
      if (external) {
        // The copy must not be recorded, nor join the autograd graph.
        at::DisableRecordFunctionGuard no_record;
        at::NoGradGuard no_grad;
        state.emplace_back(t, t.detach().clone());
      }
    });
  }

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

// The callbacks below are thread-local, but libtorch hands a thread's callbacks on to the
// threads that work for it (the autograd engine's device threads): there the state pointer is
// null and they do nothing.
std::unique_ptr<at::ObserverContext> record_start(const at::RecordFunction& fn) {
  if (g_recorder == nullptr) return nullptr;
  Recorder& r = *g_recorder;
  r.depth++;
  if (r.depth == 1) {
    OpRecord op;
    op.name = fn.name();
    const OpInfo* info = op_info(fn);
    op.has_schema = info != nullptr;
    auto inputs = own_inputs(fn, info);
    if (r.keep_state)
      for (const auto& v : inputs) r.keep_external(v);
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
  if (g_recorder == nullptr) return;
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
  bool open = false;   // a pass is running
  bool armed = false;  // ... and its per-op callback is on
  std::string problem;  // what disarming found
  std::string mismatch;
  std::string host_sync;
  int host_sync_index = 0;
  at::CallbackHandle handle = 0;
  std::unique_ptr<c10::cuda::CUDAStream> previous;
};

thread_local Schedule* g_schedule = nullptr;
thread_local Schedule* g_open_pass = nullptr;

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

// `keep_state`: also collect the forward's external tensors (see Recorder::state).
int ns_trace_begin(int keep_state) {
  return guarded([&] {
    if (g_recorder != nullptr || g_schedule != nullptr || g_open_pass != nullptr)
      throw std::runtime_error("a trace or scheduled pass is already running on this thread");
    auto recorder = std::make_unique<Recorder>();
    recorder->keep_state = keep_state != 0;
    recorder->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(record_start, record_end)
                                                      .needsInputs(true)
                                                      .needsOutputs(true)
                                                      .scopes({at::RecordScope::FUNCTION}));
    g_recorder = recorder.release();
  });
}

// Ends the trace. `out` null: abandoned. Otherwise the text, and (when kept) the parameters as
// `n_params` new tensors and the external tensors as `n_state` pairs (tensor, its value before
// the forward), 2·n_state new tensors; arrays malloc'd (ns_free_array).
int ns_trace_end(char** out, void*** params, int* n_params, void*** state, int* n_state) {
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
    if (params != nullptr) {
      std::vector<at::Tensor> flat;
      for (const auto& kv : recorder->state) {
        flat.push_back(kv.first);
        flat.push_back(kv.second);
      }
      *params = new_tensor_array(recorder->params);
      *n_params = static_cast<int>(recorder->params.size());
      *state = new_tensor_array(flat);
      *n_state = static_cast<int>(recorder->state.size());
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
// queue up behind it and their events time the GPU work alone, not the launches. Without `arm`
// the streams are forked (and captured) but ops run where libtorch puts them, unchecked: the
// backward pass of training, whose ops the autograd engine issues.
int ns_pass_begin(void* schedule, void* graph, int capture_mode, long long gate_cycles, int arm) {
  return guarded([&] {
    auto* s = static_cast<Schedule*>(schedule);
    if (g_recorder != nullptr || g_schedule != nullptr || g_open_pass != nullptr)
      throw std::runtime_error("a trace or scheduled pass is already running on this thread");
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
    ProfilerConfig config(ProfilerState::KINETO);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  });
}

// Ends the profile. `chrome_trace`: when not null, the whole trace is also written there
// (chrome://tracing / Perfetto format). `out`: one line per device activity,
//   <kind kernel|memcpy|memset> \t <start ns> \t <duration ns> \t <stream> \t <name>
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
      o << label << '\t' << e.startNs() << '\t' << e.durationNs() << '\t' << e.deviceResourceId() << '\t' << name << '\n';
    }
    if (chrome_trace != nullptr) result->save(chrome_trace);
    *out = owned_copy(o.str());
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

// Saves the module as a TorchScript file (what torch.jit.save writes; torch.jit.load and tch's
// CModule read it).
int ns_jit_save(void* module, const char* path) {
  return guarded([&] { static_cast<torch::jit::Module*>(module)->save(std::string(path)); });
}

// Freezes the module (parameters become constants) and applies the inference rewrites:
// BatchNorm folded into the preceding convolution (and the other frozen foldings), dropout
// removed, when `fuse` is set (CUDA only), convolution(+add)+ReLU fused into cuDNN's fused
// kernels, and when `kernels` is set, squeeze-and-excitation blocks and convolutions with their
// activation or residual add replaced by Nimble's fused ops (fused_ops.cpp; `fused` says how
// many the graph then has).
//
// `channels_last` (0 off, 1 on, 2 auto): 4-D constants (the frozen convolution weights) are
// stored channels-last, so that with a channels-last input cuDNN runs NHWC kernels without
// layout transforms (what inductor's layout optimization does for torch.compile). Auto turns it
// on unless the graph has grouped (e.g. depthwise) convolutions, which cuDNN runs slower in
// NHWC. `applied`: bit 0, it was applied; bit 1, the graph has grouped convolutions.
int ns_jit_optimize(void* module, int fuse, int kernels, int channels_last, void** out, int* applied, int* fused) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    m->eval();
    auto frozen = torch::jit::freeze_module(*m);
    auto graph = frozen.get_method("forward").graph();
    torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
    torch::jit::removeDropout(graph);
    torch::jit::OptimizeFrozenGraph(graph, true);
    // x * sigmoid(x) (swish, as tch's EfficientNet writes it) is one SiLU kernel instead of two.
    torch::jit::SubgraphRewriter silu;
    for (const char* product : {"aten::mul(%x, %s)", "aten::mul(%s, %x)"}) {
      silu.RegisterRewritePattern(std::string("graph(%x):\n  %s = aten::sigmoid(%x)\n  %y = ") + product + "\n  return (%y)",
                                  "graph(%x):\n  %y = aten::silu(%x)\n  return (%y)");
    }
    silu.runOnGraph(graph);
    // Looked for before the fusions below, which turn convolutions into other ops.
    bool grouped = false;
    for (auto* node : graph->nodes()) {
      if (node->kind() != c10::Symbol::fromQualString("aten::conv2d")) continue;
      auto groups = torch::jit::toIValue(node->inputs().back());
      grouped |= !groups || !groups->isInt() || groups->toInt() != 1;
    }
    if (channels_last == 2) channels_last = grouped ? 0 : 1;
    if (kernels) nimble::fuse_squeeze_excite(graph);
    if (fuse) torch::jit::FuseFrozenConvAddRelu(graph);
    if (kernels) nimble::fuse_conv_tails(graph);
    *fused = nimble::fused_op_count(*graph);
    *applied = (channels_last ? 1 : 0) | (grouped ? 2 : 0);
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
    *outputs = new_tensor_array(flat);
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

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The stream every op of a one-stream backward is issued on (see ns_backward). Set and cleared by
// the thread that calls backward, read by the autograd engine's threads in between.
std::atomic<const c10::cuda::CUDAStream*> g_backward_stream{nullptr};

std::unique_ptr<at::ObserverContext> backward_start(const at::RecordFunction&) {
  const auto* stream = g_backward_stream.load();
  if (stream != nullptr) c10::cuda::setCurrentCUDAStream(*stream);
  return nullptr;
}

// A forward and a backward graph captured for autograd: the forward's static outputs, the
// backward's static gradient inputs, the parameters and the backward's static gradients of
// them (undefined for parameters the outputs do not depend on). Shared by the Rust owner and
// every autograd node of a forward it ran; the owner marks it released when the graphs go away.
struct TrainState : torch::CustomClassHolder {
  at::cuda::CUDAGraph* forward = nullptr;
  at::cuda::CUDAGraph* backward = nullptr;
  std::vector<at::Tensor> outputs;       // the captured forward's (detached)
  std::vector<at::Tensor> grad_outputs;  // read by the backward graph
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> param_grads;   // written by the backward graph
  int64_t generation = 0;
  bool backward_pending = false;
  bool released = false;
};

// The paper's glue: forward replays the forward graph and returns its static outputs; backward
// copies the incoming gradients into the backward graph's static inputs, replays it, and returns
// its static parameter gradients, which autograd then accumulates into the parameters' `.grad`
// as for any op (taking the tensor over when `.grad` is unset, so usually without a copy).
struct ReplayFn : torch::autograd::Function<ReplayFn> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<TrainState> state, at::TensorList params) {
    (void)params;  // inputs only so that the outputs require gradients
    state->forward->replay();
    state->generation++;
    state->backward_pending = true;
    ctx->saved_data["generation"] = state->generation;
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    variable_list out;
    for (const auto& o : state->outputs) out.push_back(o.detach());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<TrainState>(ctx->saved_data["state"].toCapsule());
    if (state->released)
      throw std::runtime_error("nimble: the Nimble that produced this output was dropped or prepared again; run its forward again");
    if (ctx->saved_data["generation"].toInt() != state->generation)
      throw std::runtime_error(
          "nimble: backward of an earlier forward's output; a later forward has overwritten its saved activations "
          "(run backward before the next forward)");
    if (!state->backward_pending) throw std::runtime_error("nimble: backward ran twice for one forward; run forward again first");
    for (size_t i = 0; i < state->grad_outputs.size(); i++) {
      if (i < grads.size() && grads[i].defined()) {
        state->grad_outputs[i].copy_(grads[i]);
      } else {
        state->grad_outputs[i].zero_();
      }
    }
    // A `.grad` that autograd took over from an earlier backward is the graph's own memory,
    // which the replay overwrites: give it memory of its own first (gradient accumulation over
    // several backwards without zeroing in between).
    for (size_t i = 0; i < state->params.size(); i++) {
      auto& grad = state->params[i].mutable_grad();
      if (grad.defined() && state->param_grads[i].defined() && grad.is_alias_of(state->param_grads[i])) grad = grad.clone();
    }
    state->backward->replay();
    state->backward_pending = false;
    variable_list out;
    out.emplace_back();  // the state argument
    for (const auto& g : state->param_grads) out.push_back(g.defined() ? g.detach() : at::Tensor());
    return out;
  }
};

// Keeps the parameters whose gradient is defined, with their gradients and (when given) state.
struct StepLists {
  std::vector<at::Tensor> params, grads;
  std::vector<std::vector<at::Tensor>> state;
};

StepLists step_lists(void* const* params, int n, std::initializer_list<void* const*> state) {
  StepLists l;
  l.state.resize(state.size());
  for (int i = 0; i < n; i++) {
    const auto& p = *static_cast<const at::Tensor*>(params[i]);
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    l.params.push_back(p);
    l.grads.push_back(g);
    size_t k = 0;
    for (auto* list : state) l.state[k++].push_back(*static_cast<const at::Tensor*>(list[i]));
  }
  return l;
}

}  // namespace

extern "C" {

int ns_grad_enabled(int* out) {
  return guarded([&] { *out = at::GradMode::is_enabled() ? 1 : 0; });
}

// Backward from `tensors` with gradients `grads` (null: implicit ones for scalars), keeping the
// autograd graph when `retain`. With `one_stream` (a schedule), every backward op runs on that
// schedule's origin stream instead of its forward op's stream. Without `wrt`, the gradients
// accumulate into the leaves' `.grad`; with `wrt` (n_wrt tensors), they are returned instead
// (`*out`: n_wrt new tensors, undefined where a tensor is unused) and `.grad` is untouched.
int ns_backward(void* const* tensors, void* const* grads, int n, int retain, void* one_stream, void* const* wrt, int n_wrt, void*** out) {
  return guarded([&] {
    auto outs = tensor_list(tensors, n);
    std::vector<at::Tensor> gs;
    if (grads != nullptr) gs = tensor_list(grads, n);
    std::unique_ptr<c10::cuda::CUDAStream> stream;
    at::CallbackHandle handle = 0;
    if (one_stream != nullptr) {
      auto* s = static_cast<Schedule*>(one_stream);
      if (s->streams.empty()) throw std::runtime_error("a one-stream backward needs a schedule on a CUDA device");
      if (g_backward_stream.load() != nullptr) throw std::runtime_error("a one-stream backward is already running");
      stream = std::make_unique<c10::cuda::CUDAStream>(s->streams[0]);
      g_backward_stream.store(stream.get());
      // Thread-local, so the autograd engine hands it on to the threads that run this backward.
      handle = at::addThreadLocalCallback(at::RecordFunctionCallback(backward_start).scopes({at::RecordScope::FUNCTION}));
    }
    auto done = [&] {
      if (handle != 0) at::removeCallback(handle);
      g_backward_stream.store(nullptr);
    };
    std::vector<at::Tensor> result;
    try {
      if (wrt == nullptr) {
        torch::autograd::backward(outs, gs, retain != 0, false);
      } else {
        result = torch::autograd::grad(outs, tensor_list(wrt, n_wrt), gs, retain != 0, false, /*allow_unused=*/true);
      }
    } catch (...) {
      done();
      throw;
    }
    done();
    if (wrt != nullptr) *out = new_tensor_array(result);
  });
}

// Sets the parameters' `.grad` to undefined, so the next backward creates them (in a capture:
// in the graph's pool, written afresh by every replay, nothing to zero).
// Makes autograd create the parameters' gradient accumulators afresh at their next use. An
// accumulator remembers the stream current when it was made and the engine syncs gradients onto
// that stream; one made eagerly on the default stream (or kept alive by an old autograd graph
// the caller still holds) would put a default-stream wait into a capture and invalidate it.
int ns_fresh_grad_accumulators(void* const* params, int n) {
  return guarded([&] {
    for (auto& p : tensor_list(params, n)) {
      auto* meta = torch::autograd::impl::get_autograd_meta(p);
      if (meta != nullptr) meta->grad_accumulator_.reset();
    }
  });
}

int ns_grads_reset(void* const* params, int n) {
  return guarded([&] {
    for (auto& p : tensor_list(params, n)) p.mutable_grad().reset();
  });
}

// One SGD step (PyTorch's: weight decay added to the gradient, momentum buffer, optional
// Nesterov) over every parameter with a gradient, as libtorch's fused multi-tensor kernel.
// Momentum buffers start at zero, which with dampening 0 equals PyTorch's first step.
int ns_sgd_step(void* const* params, void* const* momentum_buffers, int n, double lr, double momentum, double dampening,
                double weight_decay, int nesterov) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    auto l = momentum != 0.0 ? step_lists(params, n, {momentum_buffers}) : step_lists(params, n, {});
    if (l.params.empty()) return;
    std::vector<at::Tensor> buffers = momentum != 0.0 ? l.state[0] : std::vector<at::Tensor>{};
    at::_fused_sgd_(l.params, l.grads, buffers, weight_decay, momentum, lr, dampening, nesterov != 0, false, false);
  });
}

// One Adam step (L2 weight decay, as torch.optim.Adam), fused; `steps` are per-parameter
// one-element float tensors on the device, so a captured step counts correctly on replay.
int ns_adam_step(void* const* params, void* const* exp_avgs, void* const* exp_avg_sqs, void* const* steps, int n, double lr,
                 double beta1, double beta2, double eps, double weight_decay) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    auto l = step_lists(params, n, {exp_avgs, exp_avg_sqs, steps});
    if (l.params.empty()) return;
    at::_foreach_add_(l.state[2], 1);
    at::_fused_adam_(l.params, l.grads, l.state[0], l.state[1], {}, l.state[2], lr, beta1, beta2, weight_decay, eps, false, false);
  });
}

// `param_grads` may hold undefined tensors (parameters the outputs do not depend on). The
// outputs are kept detached: the captured forward's autograd graph is not needed once the
// backward graph is captured.
int ns_train_state_new(void* forward_graph, void* backward_graph, void* const* outputs, void* const* grad_outputs, int n_outputs,
                       void* const* params, void* const* param_grads, int n_params, void** out) {
  return guarded([&] {
    auto state = c10::make_intrusive<TrainState>();
    state->forward = static_cast<Graph*>(forward_graph);
    state->backward = static_cast<Graph*>(backward_graph);
    for (const auto& o : tensor_list(outputs, n_outputs)) state->outputs.push_back(o.detach());
    state->grad_outputs = tensor_list(grad_outputs, n_outputs);
    state->params = tensor_list(params, n_params);
    state->param_grads = tensor_list(param_grads, n_params);
    *out = state.release();
  });
}

// Marks the state released (its graphs are about to be freed) and drops the owner's reference.
void ns_train_state_free(void* raw) {
  try {
    auto state = c10::intrusive_ptr<TrainState>::reclaim(static_cast<TrainState*>(raw));
    state->released = true;
    state->forward = nullptr;
    state->backward = nullptr;
    state->outputs.clear();
    state->grad_outputs.clear();
    state->params.clear();
    state->param_grads.clear();
  } catch (...) {
  }
}

// Replays the forward graph through the autograd function; the outputs (new tensors) carry its
// backward.
int ns_train_forward(void* raw, void*** outputs, int* n_out) {
  return guarded([&] {
    auto state = c10::intrusive_ptr<TrainState>::unsafe_reclaim_from_nonowning(static_cast<TrainState*>(raw));
    if (!at::GradMode::is_enabled())
      throw std::runtime_error("nimble: forward of a model prepared for training ran with gradients off (no_grad); prepare for inference to run without gradients");
    // As a TensorList, so autograd sees the parameters as inputs (a vector would not be).
    variable_list result = ReplayFn::apply(state, at::TensorList(state->params));
    *outputs = new_tensor_array(result);
    *n_out = static_cast<int>(result.size());
  });
}

}  // extern "C"
