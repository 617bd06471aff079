// Data parallelism over NCCL: communicators (one per process and GPU, made from a unique id the
// launcher hands every rank), the few collectives prepare needs eagerly (broadcast, all-gather,
// mean), and the gradient reducer that a whole-step capture records.
//
// The reducer all-reduces the gradients in buckets (chosen in Rust) on a stream of its own. A
// post-accumulate-grad hook on every bucketed parameter records an event on the stream that
// produced the gradient; once every gradient of a bucket is ready (and every earlier bucket has
// been launched, so that all ranks issue the collectives in one order), the reducer's stream
// waits for those events and all-reduces the bucket with ncclAvg as one NCCL group: the
// gradients smaller than `pack_below` bytes are packed into one flat tensor (one all-reduce for
// many small tensors) and become views of its means; larger ones are all-reduced where they are,
// so their bytes are never copied. `finish` launches what is left; `wait` makes the current
// stream wait for one bucket's means, so the optimizer can update that bucket's parameters while
// later buckets are still being all-reduced. Inside a capture all of this becomes graph nodes: the
// all-reduces overlap the rest of the backward on every replay.

#include "common.h"
#include "nimble_shim.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <nccl.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <memory>
#include <mutex>

namespace nimble_shim {
namespace {

void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  std::string message = std::string("NCCL ") + call + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  throw std::runtime_error(message);
}

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    default: throw std::runtime_error(std::string("NCCL cannot reduce tensors of type ") + c10::toString(t.scalar_type()));
  }
}

void check_on_device(const at::Tensor& t, int device, const char* what) {
  if (!t.is_cuda() || t.get_device() != device)
    throw std::runtime_error(std::string(what) + " is on " + t.device().str() + ", expected cuda:" + std::to_string(device) +
                             " (this rank's GPU)");
  if (!t.is_contiguous()) throw std::runtime_error(std::string(what) + " is not contiguous");
}

struct Comm {
  ncclComm_t comm = nullptr;
  int world = 0;
  int rank = 0;
  int device = 0;
};

struct Reducer;

// Tells the reducer that a parameter's gradient has been accumulated (called by autograd's
// AccumulateGrad on the engine's thread, with the gradient's stream current).
struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  Reducer* reducer;
  int index;
  ReadyHook(Reducer* r, int i) : reducer(r), index(i) {}
  void operator()(const torch::autograd::Variable& tensor) override;
};

struct Reducer {
  Comm* comm;
  c10::cuda::CUDAStream stream;
  std::vector<at::Tensor> params;
  std::vector<std::vector<int>> members;  // per bucket, its parameters in order
  std::vector<int> bucket_of;             // per parameter
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> ready_events;
  std::vector<bool> ready;
  std::vector<int> pending;               // per bucket, gradients not ready yet
  std::vector<at::Tensor> flats;          // per bucket, this step's packed gradients
  int64_t pack_below = -1;                // gradients of fewer bytes are packed; -1: all are
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> reduced;  // per bucket, after its all-reduce
  size_t next = 0;                        // the first bucket not launched
  bool armed = false;
  std::mutex mu;

  Reducer(Comm* c, c10::cuda::CUDAStream s) : comm(c), stream(s) {}

  void mark_ready(int i, const c10::cuda::CUDAStream& on) {
    if (ready[i]) return;
    ready[i] = true;
    ready_events[i]->record(on);
    pending[bucket_of[i]]--;
  }

  void launch_ready() {
    while (next < members.size() && pending[next] == 0) launch(next++);
  }

  // Whether gradient `g` goes into its bucket's flat tensor rather than being all-reduced in
  // place. A gradient NCCL cannot address as one dense block is always packed.
  bool packed(const at::Tensor& g) const {
    if (!g.is_non_overlapping_and_dense()) return true;
    return pack_below < 0 || static_cast<int64_t>(g.numel() * g.element_size()) < pack_below;
  }

  // The gradients of parameters `which`, as views of consecutive pieces of `flat`.
  std::vector<at::Tensor> views_of(const at::Tensor& flat, const std::vector<int>& which) const {
    std::vector<at::Tensor> views;
    int64_t offset = 0;
    for (int i : which) {
      const at::Tensor& g = params[i].grad();
      views.push_back(flat.narrow(0, offset, g.numel()).view(g.sizes()));
      offset += g.numel();
    }
    return views;
  }

  // The gradients of parameters `which` copied into one new flat tensor, on the current stream
  // (undefined when there are none). One multi-tensor copy: at::cat's kernel moved ResNet-50's
  // 94 MB at 1.2 TB/s on an H200 (167 us of kernel time a step; this copy 110 us).
  at::Tensor pack(const std::vector<int>& which) const {
    if (which.empty()) return at::Tensor();
    int64_t total = 0;
    std::vector<at::Tensor> grads;
    for (int i : which) {
      grads.push_back(params[i].grad());
      total += grads.back().numel();
    }
    at::Tensor flat = at::empty({total}, grads[0].options().memory_format(at::MemoryFormat::Contiguous));
    auto views = views_of(flat, which);
    at::_foreach_copy_(views, grads);
    return flat;
  }

  void launch(size_t b) {
    std::vector<int> small, large;
    for (int i : members[b]) {
      const at::Tensor& g = params[i].grad();
      if (!g.defined())
        throw std::runtime_error("parameter " + std::to_string(i) +
                                 " got no gradient in this step, but data parallelism reduces the same buckets on every rank and "
                                 "every bucketed parameter had one when the buckets were made");
      ready_events[i]->block(stream);
      (packed(g) ? small : large).push_back(i);
    }
    c10::cuda::CUDAStreamGuard guard(stream);
    at::Tensor flat = pack(small);
    // Every rank makes the same split (the buckets' fingerprint includes each gradient's size),
    // so the group holds the same collectives in the same order everywhere.
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (flat.defined())
      nccl_check(ncclAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), nccl_type(flat), ncclAvg, comm->comm, stream.stream()),
                 "ncclAllReduce", comm->comm);
    for (int i : large) {
      const at::Tensor& g = params[i].grad();
      nccl_check(ncclAllReduce(g.data_ptr(), g.data_ptr(), g.numel(), nccl_type(g), ncclAvg, comm->comm, stream.stream()), "ncclAllReduce",
                 comm->comm);
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm->comm);
    // The packed means stay where NCCL wrote them: each such gradient becomes a view of the
    // bucket (no copies back). Every gradient was read (or written) on this stream; recording
    // that keeps the allocator from handing its memory to other streams before that is done.
    if (flat.defined()) {
      auto means = views_of(flat, small);
      for (size_t k = 0; k < small.size(); k++) {
        at::Tensor& grad = params[small[k]].mutable_grad();
        grad.record_stream(stream);
        grad = means[k];
      }
    }
    for (int i : large) params[i].grad().record_stream(stream);
    flats[b] = flat;
    reduced[b]->record(stream);
  }
};

void ReadyHook::operator()(const torch::autograd::Variable&) {
  std::lock_guard<std::mutex> lock(reducer->mu);
  if (!reducer->armed) return;
  reducer->mark_ready(index, c10::cuda::getCurrentCUDAStream(reducer->comm->device));
  reducer->launch_ready();
}

// Issues `collective(tensor, stream)` for each tensor as one NCCL group on the current stream.
// Every tensor is checked first, so a bad one never leaves a group open.
template <class F>
void in_group(Comm* comm, void* const* tensors, int n, const char* what, F&& collective) {
  auto list = tensor_list(tensors, n);
  for (const auto& t : list) check_on_device(t, comm->device, what);
  auto stream = c10::cuda::getCurrentCUDAStream(comm->device);
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (auto& t : list) collective(t, stream.stream());
  nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm->comm);
}

}  // namespace
}  // namespace nimble_shim

using namespace nimble_shim;

extern "C" {

int ns_nccl_version(int* out) {
  return guarded([&] { nccl_check(ncclGetVersion(out), "ncclGetVersion"); });
}

// A fresh unique id (NCCL_UNIQUE_ID_BYTES bytes). The process that makes it runs NCCL's
// bootstrap root and must live until every rank has joined.
int ns_nccl_unique_id(unsigned char* out, int n) {
  return guarded([&] {
    if (n != NCCL_UNIQUE_ID_BYTES) throw std::runtime_error("an NCCL unique id has " + std::to_string(NCCL_UNIQUE_ID_BYTES) + " bytes");
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::memcpy(out, id.internal, NCCL_UNIQUE_ID_BYTES);
  });
}

// Joins the communicator of `world` ranks named by `id`, as `rank`, on GPU `device` (blocks
// until every rank has joined).
int ns_comm_new(const unsigned char* id, int n, int world, int rank, int device, void** out) {
  return guarded([&] {
    if (n != NCCL_UNIQUE_ID_BYTES) throw std::runtime_error("an NCCL unique id has " + std::to_string(NCCL_UNIQUE_ID_BYTES) + " bytes");
    ncclUniqueId unique;
    std::memcpy(unique.internal, id, NCCL_UNIQUE_ID_BYTES);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    auto comm = std::make_unique<Comm>();
    nccl_check(ncclCommInitRank(&comm->comm, world, unique, rank), "ncclCommInitRank");
    comm->world = world;
    comm->rank = rank;
    comm->device = device;
    *out = comm.release();
  });
}

void ns_comm_free(void* raw) {
  auto* comm = static_cast<Comm*>(raw);
  if (comm == nullptr) return;
  if (comm->comm != nullptr) ncclCommDestroy(comm->comm);
  delete comm;
}

// Copies rank `root`'s tensors into every rank's, in place, on the current stream (waits).
int ns_comm_broadcast(void* raw, void* const* tensors, int n, int root) {
  return guarded([&] {
    auto* comm = static_cast<Comm*>(raw);
    in_group(comm, tensors, n, "a broadcast tensor", [&](at::Tensor& t, cudaStream_t stream) {
      nccl_check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root, comm->comm, stream), "ncclBroadcast", comm->comm);
    });
    c10::cuda::getCurrentCUDAStream(comm->device).synchronize();
  });
}

// Every rank's `n` integers, rank by rank, into `all` (world × n), on the current stream (waits).
int ns_comm_all_gather_i64(void* raw, const long long* mine, int n, long long* all) {
  return guarded([&] {
    auto* comm = static_cast<Comm*>(raw);
    auto stream = c10::cuda::getCurrentCUDAStream(comm->device);
    auto options = at::TensorOptions().dtype(at::kLong).device(at::kCUDA, comm->device);
    at::Tensor send = at::from_blob(const_cast<long long*>(mine), {n}, at::kLong).to(options);
    at::Tensor recv = at::empty({static_cast<int64_t>(comm->world) * n}, options);
    nccl_check(ncclAllGather(send.data_ptr(), recv.data_ptr(), n, ncclInt64, comm->comm, stream.stream()), "ncclAllGather", comm->comm);
    at::Tensor host = recv.cpu();
    std::memcpy(all, host.data_ptr<int64_t>(), sizeof(long long) * comm->world * n);
  });
}

// Replaces each tensor by its mean over the ranks, in place, on the current stream.
int ns_comm_all_reduce_mean(void* raw, void* const* tensors, int n) {
  return guarded([&] {
    auto* comm = static_cast<Comm*>(raw);
    in_group(comm, tensors, n, "an all-reduced tensor", [&](at::Tensor& t, cudaStream_t stream) {
      nccl_check(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), ncclAvg, comm->comm, stream), "ncclAllReduce", comm->comm);
    });
  });
}

// A reducer over `params` (n), parameter i in bucket bucket_of[i] (buckets numbered from 0 in
// launch order, each in one dtype; -1: not reduced), all-reduced on a stream of high or normal
// priority, gradients of fewer than `pack_below` bytes packed (-1: every gradient). Installs a post-accumulate-grad hook on
// every bucketed parameter; ns_reducer_free removes them.
int ns_reducer_new(void* raw_comm, void* const* params, int n, const int* bucket_of, int n_buckets, int high_priority, long long pack_below,
                   void** out) {
  return guarded([&] {
    auto* comm = static_cast<Comm*>(raw_comm);
    auto stream = c10::cuda::getStreamFromPool(high_priority != 0, static_cast<c10::DeviceIndex>(comm->device));
    auto reducer = std::make_unique<Reducer>(comm, stream);
    reducer->pack_below = pack_below < 0 ? -1 : static_cast<int64_t>(pack_below);
    reducer->params = tensor_list(params, n);
    reducer->members.resize(n_buckets);
    for (int i = 0; i < n; i++) {
      int b = bucket_of[i];
      if (b < -1 || b >= n_buckets) throw std::runtime_error("bucket " + std::to_string(b) + " of parameter " + std::to_string(i) + " is out of range");
      reducer->bucket_of.push_back(b);
      reducer->ready_events.push_back(std::make_unique<at::cuda::CUDAEvent>());
      if (b < 0) continue;
      check_on_device(reducer->params[i], comm->device, "a reduced parameter");
      reducer->members[b].push_back(i);
      if (torch::autograd::impl::post_acc_grad_hooks(reducer->params[i]) != nullptr)
        throw std::runtime_error("parameter " + std::to_string(i) + " already has a post-accumulate-grad hook; data parallelism installs its own");
    }
    for (size_t b = 0; b < reducer->members.size(); b++)
      if (reducer->members[b].empty()) throw std::runtime_error("bucket " + std::to_string(b) + " has no parameter");
    for (int i = 0; i < n; i++)
      if (reducer->bucket_of[i] >= 0)
        torch::autograd::impl::set_post_acc_grad_hooks(reducer->params[i], std::make_unique<ReadyHook>(reducer.get(), i));
    reducer->flats.resize(n_buckets);
    for (int b = 0; b < n_buckets; b++) reducer->reduced.push_back(std::make_unique<at::cuda::CUDAEvent>());
    *out = reducer.release();
  });
}

void ns_reducer_free(void* raw) {
  auto* reducer = static_cast<Reducer*>(raw);
  if (reducer == nullptr) return;
  try {
    for (size_t i = 0; i < reducer->params.size(); i++)
      if (reducer->bucket_of[i] >= 0) torch::autograd::impl::set_post_acc_grad_hooks(reducer->params[i], nullptr);
  } catch (...) {
  }
  delete reducer;
}

// Starts a step: every gradient not ready, no bucket launched.
int ns_reducer_arm(void* raw) {
  return guarded([&] {
    auto* r = static_cast<Reducer*>(raw);
    std::lock_guard<std::mutex> lock(r->mu);
    r->ready.assign(r->params.size(), false);
    r->pending.assign(r->members.size(), 0);
    for (size_t b = 0; b < r->members.size(); b++) r->pending[b] = static_cast<int>(r->members[b].size());
    r->next = 0;
    r->armed = true;
  });
}

// Ends a step's backward: launches the buckets not launched yet (gradients whose hook did not
// run count as ready on the current stream). Nothing waits for them yet: see ns_reducer_wait.
int ns_reducer_finish(void* raw) {
  return guarded([&] {
    auto* r = static_cast<Reducer*>(raw);
    std::lock_guard<std::mutex> lock(r->mu);
    if (!r->armed) throw std::runtime_error("the gradient reducer finished a step it did not start");
    r->armed = false;
    auto current = c10::cuda::getCurrentCUDAStream(r->comm->device);
    for (size_t i = 0; i < r->params.size(); i++)
      if (r->bucket_of[i] >= 0) r->mark_ready(static_cast<int>(i), current);
    r->launch_ready();
  });
}

// Makes the current stream wait until bucket `bucket`'s gradients are averaged (buckets are
// all-reduced in order on one stream, so the last bucket's wait covers them all).
int ns_reducer_wait(void* raw, int bucket) {
  return guarded([&] {
    auto* r = static_cast<Reducer*>(raw);
    std::lock_guard<std::mutex> lock(r->mu);
    if (r->armed) throw std::runtime_error("the gradient reducer was asked for a bucket before the step's backward finished");
    if (bucket < 0 || static_cast<size_t>(bucket) >= r->reduced.size())
      throw std::runtime_error("bucket " + std::to_string(bucket) + " is out of range (" + std::to_string(r->reduced.size()) + " buckets)");
    if (r->next != r->members.size()) throw std::runtime_error("the gradient reducer has buckets it did not launch");
    r->reduced[bucket]->block(c10::cuda::getCurrentCUDAStream(r->comm->device));
  });
}

}  // extern "C"
