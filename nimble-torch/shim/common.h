// What the shim's files share: the per-thread error slot every entry point reports through, the
// helpers that pass tensors and strings across the C ABI, and what both the recorder
// (record.cpp) and the scheduled passes (passes.cpp) need to know about an op: its schema, its
// own arguments and results, and whether it synchronizes with the host.
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAStream.h>

#include <string>
#include <vector>

namespace nimble_shim {

// The message of the last failing entry point on this thread (ns_last_error).
extern thread_local std::string g_error;

// Runs `body`, turning any C++ exception into -1 and the message in g_error; 0 on success. Every
// `extern "C"` entry point that can fail is a call of this.
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

// A malloc'd copy of `s` (the caller frees it with ns_free_string).
char* owned_copy(const std::string& s);

// A malloc'd array of `new at::Tensor`s (the caller adopts them and frees the array).
void** new_tensor_array(const std::vector<at::Tensor>& tensors);

// The tensors behind `n` `at::Tensor*`s, as new references.
std::vector<at::Tensor> tensor_list(void* const* tensors, int n);

enum Device : int { kDevCpu = 0, kDevCuda = 1, kDevOther = 2 };

// Calls `f` on every tensor in `v`, looking into lists, tuples and dicts (keys and values).
// Returns false when something else (a scalar, None, a string, …) was found on the way.
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
  } else if (v.isGenericDict()) {
    for (const auto& entry : v.toGenericDict()) {
      only_tensors &= for_each_tensor(entry.key(), f);
      only_tensors &= for_each_tensor(entry.value(), f);
    }
  } else {
    only_tensors = false;
  }
  return only_tensors;
}

// What the schema says about an op: how many arguments and results it has, and which arguments
// it writes (`Tensor(a!)`). Cached per overload; null when the op has no schema.
struct OpInfo {
  size_t arguments = 0;
  size_t returns = 0;
  std::vector<bool> writes;
};
const OpInfo* op_info(const at::RecordFunction& fn);

// An op called boxed (as the TorchScript interpreter calls them) sees the interpreter's whole
// stack as its inputs and outputs; its own arguments and results are the last ones.
c10::ArrayRef<const c10::IValue> own_inputs(const at::RecordFunction& fn, const OpInfo* info);
c10::ArrayRef<c10::IValue> own_outputs(const at::RecordFunction& fn, const OpInfo* info);

// Whether the op makes the host wait for the device or copies between host and device memory,
// which no CUDA graph can capture. Judged by the op and the devices of its own arguments: an
// `aten::item` of a CPU tensor (traced shape arithmetic) is no synchronization.
bool syncs_with_host(const at::RecordFunction& fn);

// Marks every CUDA tensor in `v` as in use by `stream` (the caching allocator's recordStream).
void record_streams(const c10::IValue& v, const c10::cuda::CUDAStream& stream);

// A trace (record.cpp) and a scheduled pass (passes.cpp) each own this thread's op callback
// while they run: neither may start while either runs. Throws naming the one running.
void check_no_trace_or_pass();
bool trace_running();
bool pass_running();

}  // namespace nimble_shim
