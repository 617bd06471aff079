// The helpers every file of the shim shares (see common.h), and the C ABI's memory functions.

#include "common.h"

#include "nimble_shim.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace nimble_shim {

thread_local std::string g_error;

char* owned_copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

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

namespace {

// Ops whose result the host reads (it must wait for the device to compute it) or whose output
// size depends on the data: on a device tensor, none of them can be captured in a CUDA graph.
bool is_host_sync_op(const char* name) {
  static const std::unordered_set<std::string> names = {
      "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero",
      "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
      "aten::unique_consecutive", "aten::unique_dim", "aten::equal", "aten::allclose",
      "aten::tolist", "aten::_assert_async", "aten::repeat_interleave"};
  return names.count(name) != 0;
}

// Whether any of the op's own tensor arguments lives off the CPU (on the GPU).
bool reads_device_tensor(const at::RecordFunction& fn) {
  bool device = false;
  for (const auto& v : own_inputs(fn, op_info(fn)))
    for_each_tensor(v, [&](const at::Tensor& t) { device |= t.defined() && !t.is_cpu(); });
  return device;
}

// Whether the op's own arguments hold both a CPU tensor and a CUDA one: a copy between them. A
// 0-dim CPU tensor next to CUDA tensors is a wrapped scalar, passed by value.
bool tensors_on_both_sides(const at::RecordFunction& fn) {
  bool cpu = false, cuda = false;
  for (const auto& v : own_inputs(fn, op_info(fn))) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      cpu |= t.is_cpu() && t.dim() > 0;
      cuda |= t.is_cuda();
    });
  }
  return cpu && cuda;
}

}  // namespace

bool syncs_with_host(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (is_host_sync_op(name)) return reads_device_tensor(fn);
  return (std::strcmp(name, "aten::copy_") == 0 || std::strcmp(name, "aten::_copy_from") == 0) && tensors_on_both_sides(fn);
}

void record_streams(const c10::IValue& v, const c10::cuda::CUDAStream& stream) {
  for_each_tensor(v, [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage() && t.is_cuda()) {
      // Marks the block as in use by `stream`, so the caching allocator does not hand it to a
      // later op of its own stream while `stream` may still read it.
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
  });
}

void check_no_trace_or_pass() {
  if (trace_running() || pass_running()) throw std::runtime_error("a trace or scheduled pass is already running on this thread");
}

}  // namespace nimble_shim

extern "C" {

const char* ns_last_error() { return nimble_shim::g_error.c_str(); }
void ns_free_string(char* s) { std::free(s); }
void ns_free_array(void** array) { std::free(array); }

}  // extern "C"
