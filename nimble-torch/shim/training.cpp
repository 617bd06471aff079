// Training: backward passes on chosen streams, fused optimizer steps (libtorch's multi-tensor
// SGD and Adam kernels), and the autograd function that replays a captured forward graph and,
// on backward, a captured backward graph (the paper's training mode).

#include "common.h"
#include "nimble_shim.h"
#include "schedule.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

namespace nimble_shim {
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
}  // namespace nimble_shim

using namespace nimble_shim;

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
