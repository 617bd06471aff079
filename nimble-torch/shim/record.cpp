// Recording a forward: a thread-local RecordFunction callback that keeps every top-level ATen op
// (nesting depth 1) with the storages its tensors live in, which of them it writes, and the
// first host-synchronizing op it runs. The dependency analysis of the result is done in Rust
// (nimble-torch's `trace` module).
//
// Text format of ns_trace_end, one line each:
//   op  <name> <has_schema 0|1> <host-sync op or ->
//   in  <storage> <write 0|1> <device 0 cpu|1 cuda|2 other> <dtype> <shape, comma-separated>
//   out (same fields as in)
//   param <storage> <bytes> <dtype>      (after the ops, when the trace keeps state: each
//                                         parameter, in order of first use)

#include "common.h"

#include <torch/csrc/autograd/grad_mode.h>
#include "nimble_shim.h"

#include <memory>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace nimble_shim {
namespace {

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
  // Each parameter's storage id, size in bytes and dtype, in the order of `params`.
  std::vector<std::tuple<int64_t, int64_t, std::string>> param_info;
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
      if (param) {
        params.push_back(t);
        param_info.emplace_back(storage_id(t), static_cast<int64_t>(t.nbytes()), c10::toString(t.scalar_type()));
      }
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

}  // namespace

bool trace_running() { return g_recorder != nullptr; }

}  // namespace nimble_shim

using namespace nimble_shim;

extern "C" {

// `keep_state`: also collect the forward's external tensors (see Recorder::state).
int ns_trace_begin(int keep_state) {
  return guarded([&] {
    check_no_trace_or_pass();
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
    for (const auto& [storage, bytes, dtype] : recorder->param_info)
      o << "param\t" << storage << '\t' << bytes << '\t' << dtype << '\n';
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

}  // extern "C"
