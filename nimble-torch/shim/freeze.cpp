// Freezing a TorchScript module for inference, on a CPU copy when the module lives on a GPU.
//
// PyTorch's freezing pools equal constants by comparing tensors with at::equal, and on a GPU
// each comparison is a kernel and a synchronization with the host: timm's NASNet-A large froze
// in 6.8 s on an H200 and in 1.45 s on the CPU, HRNet-W18 in 5.9 s and 1.4 s
// (paper-figs/results/probes/freeze-on-gpu-vs-cpu-48ddd6f.h200.log). So a module on a GPU with many
// constants of one shape (host_copy_pays) is frozen and folded on a CPU copy of itself, and
// the constants go back afterwards:
//   - a constant that came from the GPU (a parameter, a buffer, a constant of its graphs) goes
//     back there, and so does a new one with a dimension (a folded weight, an index computed
//     from a buffer);
//   - the host's own constants stay (the 0-dim scalars of a traced forward's arithmetic), and
//     so does a new 0-dim one;
//   - tensors inside list and tuple constants go the same way (freezing folds Swin-V2's
//     `bias_table[index]` index into a constant List[Optional[Tensor]]);
//   - a scripted forward's `self.weight.device` (or `.is_cuda`) keeps the GPU's answer, or
//     freezing would bake the copy's CPU into the graph;
//   - linear layers that share an input are merged (FrozenConcatLinear) after the move, since
//     PyTorch merges them only on a GPU.
// What that rule gets wrong (a new 0-dim constant that the GPU would have kept) shows up as a
// forward that fails or synchronizes with the host; nimble-torch then freezes on the GPU
// (optimize.rs, inference.rs), as this file does when the host path throws.

#include "freeze.h"

#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_concat_linear.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace nimble {

bool is_tensor_constant(const torch::jit::Node* node) {
  return node->kind() == c10::prim::Constant && node->hasAttribute(c10::attr::value) &&
         node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t;
}

bool computes_in_half_precision(const torch::jit::Graph& graph) {
  for (const auto* node : graph.nodes()) {
    if (!is_tensor_constant(node)) continue;
    const auto dtype = node->t(c10::attr::value).scalar_type();
    if (dtype == at::kHalf || dtype == at::kBFloat16) return true;
  }
  return false;
}

namespace {

using torch::jit::Graph;
using torch::jit::Node;

// Every tensor constant of `graph` (nested blocks too), as `visit(node, tensor)`.
void for_each_tensor_constant(std::shared_ptr<Graph> graph, const std::function<void(Node*, const at::Tensor&)>& visit) {
  for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();)
    if (is_tensor_constant(node)) visit(node, node->t(c10::attr::value));
}

// What decides where a module is frozen: the device of its parameters and buffers (else of its
// graphs' constants; nullopt when they are on more than one: a traced Python number is a CPU
// constant beside GPU weights, and counts for nothing here), the bytes of its tensors on that
// device, and how many pairs of them have one shape and dtype (those freezing's pooling may
// compare).
struct TensorCensus {
  std::optional<c10::Device> device;
  double megabytes = 0;
  double same_shape_pairs = 0;
};

TensorCensus tensor_census(const torch::jit::Module& m) {
  std::vector<at::Tensor> state, constants;
  for (const auto& p : m.parameters()) state.push_back(p);
  for (const auto& b : m.buffers()) state.push_back(b);
  for (const auto& module : m.modules())
    for (const auto& method : module.get_methods())
      for_each_tensor_constant(method.graph(), [&](Node*, const at::Tensor& t) { constants.push_back(t); });
  const auto& owner = state.empty() ? constants : state;
  TensorCensus census;
  census.device = owner.empty() ? c10::Device(c10::kCPU) : owner.front().device();
  for (const auto& t : owner)
    if (t.device() != *census.device) census.device = std::nullopt;
  if (!census.device) return census;
  std::map<std::pair<std::vector<int64_t>, c10::ScalarType>, double> groups;
  for (const auto* tensors : {&state, &constants}) {
    for (const auto& t : *tensors) {
      if (t.device() != *census.device) continue;
      census.megabytes += static_cast<double>(t.numel() * t.element_size()) / 1e6;
      census.same_shape_pairs += groups[{t.sizes().vec(), t.scalar_type()}]++;
    }
  }
  return census;
}

// Whether freezing on a CPU copy should be faster. Freezing pools equal constants, and on a GPU
// each comparison of two constants of one shape is a kernel and a host synchronization (about
// 20 µs on an H200: 4 s of NASNet-A large's freezing, 200,000 such pairs); the copy costs the
// tensors' bytes twice over PCIe and the foldings on the CPU (about 0.5 ms per MB: ViT-B/16,
// BERT-base and Swin-V2-B, 350 to 440 MB and few pairs, prepared 0.15 to 0.18 s slower so).
// The copy is taken when the comparisons would cost twice what it does.
bool host_copy_pays(const TensorCensus& census) {
  constexpr double seconds_per_pair = 20e-6, seconds_per_megabyte = 0.5e-3;
  return census.same_shape_pairs * seconds_per_pair > 2 * census.megabytes * seconds_per_megabyte;
}

// PyTorch's foldings of the add, sub, mul or div after a convolution run that op on the
// convolution's weight and the other operand broadcast to the weight's shape, without moving
// the operand to the weight's device. A Python number in a traced forward (`conv(x) * 0.5`) is
// a 0-dim CPU tensor constant, which ns_jit_load leaves on the host, so on CUDA the op throws
// and libtorch fails an internal assert (timm's NF-ResNet-50 was refused so). Moves those
// operands to their convolution's device: they are elementwise operands of device data, not
// shape arithmetic, and a 0-dim tensor on either device gives the op the same result. The
// foldings repeat until nothing changes, so an op becomes "directly after a convolution" once
// what stood between them is folded: the operand counts when the op's first input goes back
// to a convolution through BatchNorms and such ops (timm's FastViT-T8 adds 0 after conv, + 0,
// BatchNorm, and failed the same way). Needed only when freezing on the GPU.
void scalars_after_convolutions_to_their_device(std::shared_ptr<Graph>& graph) {
  static const std::unordered_set<std::string> ops = {"aten::add", "aten::sub", "aten::mul", "aten::div"};
  static const std::unordered_set<std::string> convs = {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution"};
  auto tensor_constant = [](const torch::jit::Value* v) -> std::optional<at::Tensor> {
    if (!is_tensor_constant(v->node())) return std::nullopt;
    return v->node()->t(c10::attr::value);
  };
  for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();) {
    if (!ops.count(node->kind().toQualString()) || node->inputs().size() < 2) continue;
    const auto* conv = node->inputs()[0]->node();
    while ((ops.count(conv->kind().toQualString()) || conv->kind() == c10::Symbol::fromQualString("aten::batch_norm")) && !conv->inputs().empty())
      conv = conv->inputs()[0]->node();
    if (!convs.count(conv->kind().toQualString()) || conv->inputs().size() < 2) continue;
    auto weight = tensor_constant(conv->inputs()[1]);
    auto operand = tensor_constant(node->inputs()[1]);
    if (!weight || !operand || operand->dim() != 0 || operand->device() == weight->device()) continue;
    torch::jit::WithInsertPoint here(node);
    node->replaceInput(1, graph->insertConstant(operand->to(weight->device())));
  }
}

// The tensor a value holds when it is a tensor constant; an undefined tensor when it is None
// (an optional weight or bias left out); nullopt otherwise.
std::optional<at::Tensor> constant_or_none(const torch::jit::Value* v) {
  if (v->type()->kind() == c10::TypeKind::NoneType) return at::Tensor();
  if (!is_tensor_constant(v->node())) return std::nullopt;
  return v->node()->t(c10::attr::value);
}

// BatchNorm in inference after a convolution (its only reader), folded into the convolution's
// weight and bias computed in float32 and rounded to the weight's dtype once:
//   scale = gamma / sqrt(var + eps);  W' = W * scale (per output channel);
//   b' = (b - mean) * scale + beta.
// Eager rounds the convolution's output and BatchNorm's (which computes in float32 inside)
// each once; the folded convolution rounds its weights once and its output once. PyTorch's
// own folding computes all of it in the weights' half-precision dtype (var + eps, the square
// root, the bias's difference of near-equal numbers), which drifts further than either.
// Returns how many it folded.
int fold_batch_norm_in_float32(std::shared_ptr<Graph>& graph) {
  static const std::unordered_set<std::string> convs = {"aten::conv1d", "aten::conv2d", "aten::conv3d"};
  std::vector<Node*> norms;
  for (auto* node : graph->nodes())
    if (node->kind() == c10::Symbol::fromQualString("aten::batch_norm") && node->inputs().size() == 9) norms.push_back(node);
  int folded = 0;
  for (auto* norm : norms) {
    auto* conv = norm->inputs()[0]->node();
    if (!convs.count(conv->kind().toQualString()) || conv->inputs().size() < 3 || conv->output()->uses().size() != 1) continue;
    const auto training = torch::jit::constant_as<bool>(norm->inputs()[5]);
    const auto eps = torch::jit::constant_as<double>(norm->inputs()[7]);
    auto weight = constant_or_none(conv->inputs()[1]);
    auto bias = constant_or_none(conv->inputs()[2]);
    auto gamma = constant_or_none(norm->inputs()[1]);
    auto beta = constant_or_none(norm->inputs()[2]);
    auto mean = constant_or_none(norm->inputs()[3]);
    auto var = constant_or_none(norm->inputs()[4]);
    if (!training || *training || !eps || !weight || !weight->defined() || !bias || !gamma || !beta || !mean || !mean->defined() || !var || !var->defined()) continue;
    const auto channels = weight->size(0);
    const auto per_channel = [&](const at::Tensor& t) { return !t.defined() || (t.dim() == 1 && t.size(0) == channels); };
    if (!per_channel(*bias) || !per_channel(*gamma) || !per_channel(*beta) || !per_channel(*mean) || !per_channel(*var)) continue;
    const auto options = weight->options().dtype(at::kFloat);
    const auto f32 = [&](const at::Tensor& t, double otherwise) { return t.defined() ? t.to(options) : at::full({channels}, otherwise, options); };
    const auto scale = f32(*gamma, 1.0) * at::rsqrt(f32(*var, 1.0) + *eps);
    std::vector<int64_t> shape(weight->dim(), 1);
    shape[0] = channels;
    const auto new_weight = (weight->to(options) * scale.reshape(shape)).to(weight->scalar_type());
    const auto new_bias = ((f32(*bias, 0.0) - f32(*mean, 0.0)) * scale + f32(*beta, 0.0)).to(weight->scalar_type());
    torch::jit::WithInsertPoint here(conv);
    conv->replaceInput(1, graph->insertConstant(new_weight));
    conv->replaceInput(2, graph->insertConstant(new_bias));
    norm->output()->replaceAllUsesWith(conv->output());
    norm->destroy();
    ++folded;
  }
  return folded;
}

// PyTorch's optimizations of a frozen graph; the foldings that change its numbers (BatchNorm,
// and an add, sub, mul or div by a constant, into a convolution's or linear layer's weights)
// only in float32. In half precision any folded weight is rounded once more, which eager and
// Inductor (BatchNorm after the convolution, in float32 inside its kernel) never do: on an
// H200 (72a88ee) ResNet-50 in bfloat16 drifted 0.127 from eager even folded in float32
// (0.133 as PyTorch folds, in the weights' dtype), the compiler 0.084, GoogLeNet 0.134 against
// 0.021. So there they are left out, unless `fold_half` asks for the speed (ResNet-50 bf16
// 0.39 ms folded, 0.90 not): then BatchNorm after a convolution is folded in float32.
void optimize_frozen(std::shared_ptr<Graph>& graph, bool fold_half) {
  const bool half = computes_in_half_precision(*graph);
  if (half && fold_half) fold_batch_norm_in_float32(graph);
  torch::jit::OptimizeFrozenGraph(graph, /*optimize_numerics=*/!half);
}

// Freezing and the foldings where the module's tensors are.
torch::jit::Module frozen_in_place(torch::jit::Module& m, bool fold_half) {
  auto frozen = torch::jit::freeze_module(m);
  auto graph = frozen.get_method("forward").graph();
  torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
  torch::jit::removeDropout(graph);
  scalars_after_convolutions_to_their_device(graph);
  optimize_frozen(graph, fold_half);
  return frozen;
}

// `v` with every tensor in it (lists and tuples too) replaced by `placed(tensor)`; `changed` is
// set when one was.
c10::IValue placed_value(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& placed, bool& changed) {
  if (v.isTensor()) {
    at::Tensor t = placed(v.toTensor());
    if (t.is_same(v.toTensor())) return v;
    changed = true;
    return t;
  }
  bool any = false;
  if (v.isList()) {
    auto list = v.toList().copy();
    for (size_t i = 0; i < list.size(); i++) list.set(i, placed_value(list.get(i), placed, any));
    if (!any) return v;
    changed = true;
    return c10::IValue(list);
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& e : v.toTupleRef().elements()) elements.push_back(placed_value(e, placed, any));
    if (!any) return v;
    changed = true;
    auto type = v.toTupleRef().type();
    return type->name() ? c10::ivalue::Tuple::createNamed(std::move(elements), type) : c10::ivalue::Tuple::create(std::move(elements));
  }
  return v;
}

// Freezing and the foldings on a CPU copy of `m`, whose tensors are on `device`; see the top.
torch::jit::Module frozen_on_a_host_copy(const torch::jit::Module& m, c10::Device device, bool fold_half) {
  // A copy of its own: its tensors on the CPU and (clone) its methods' graphs copied, so that
  // moving their constants leaves `m` as it is.
  auto host = m.deepcopy(c10::Device(c10::kCPU)).clone(true);
  host.eval();
  std::unordered_set<const c10::TensorImpl*> from_device, host_constants;
  for (const auto& p : host.parameters()) from_device.insert(p.unsafeGetTensorImpl());
  for (const auto& b : host.buffers()) from_device.insert(b.unsafeGetTensorImpl());
  for (const auto& module : host.modules()) {
    for (const auto& method : module.get_methods()) {
      auto graph = method.graph();
      std::vector<Node*> queries;
      for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();)
        if ((node->kind() == c10::prim::device || node->kind() == c10::Symbol::fromQualString("prim::is_cuda")) &&
            node->input(0)->node()->kind() == c10::prim::GetAttr)
          queries.push_back(node);
      for (auto* node : queries) {
        torch::jit::WithInsertPoint here(node);
        auto answer = node->kind() == c10::prim::device ? graph->insertConstant(device) : graph->insertConstant(device.is_cuda());
        node->output()->replaceAllUsesWith(answer);
        node->destroy();
      }
      for_each_tensor_constant(graph, [&](Node* node, const at::Tensor& t) {
        if (t.device().is_cpu()) {
          host_constants.insert(t.unsafeGetTensorImpl());
          return;
        }
        auto moved = t.to(c10::kCPU);
        from_device.insert(moved.unsafeGetTensorImpl());
        node->t_(c10::attr::value, moved);
      });
    }
  }
  auto frozen = torch::jit::freeze_module(host);
  auto graph = frozen.get_method("forward").graph();
  torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
  torch::jit::removeDropout(graph);
  optimize_frozen(graph, fold_half);

  // One copy on the device per tensor, however many constants hold it.
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved;
  auto placed = [&](const at::Tensor& t) -> at::Tensor {
    const auto* impl = t.unsafeGetTensorImpl();
    if (!t.device().is_cpu() || !(from_device.count(impl) || (!host_constants.count(impl) && t.dim() > 0))) return t;
    auto [at, fresh] = moved.try_emplace(impl);
    if (fresh) at->second = t.to(device);
    return at->second;
  };
  for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();) {
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value)) continue;
    if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) {
      node->t_(c10::attr::value, placed(node->t(c10::attr::value)));
    } else if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::ival) {
      bool changed = false;
      auto value = placed_value(node->ival(c10::attr::value), placed, changed);
      if (changed) node->ival_(c10::attr::value, value);
    }
  }
  // Attributes freezing kept (buffers the forward mutates) go back too.
  frozen.to(device);
  torch::jit::FrozenConcatLinear(graph);
  return frozen;
}

}  // namespace

torch::jit::Module frozen_and_folded(torch::jit::Module& m, bool on_host, bool fold_half, bool& frozen_on_host) {
  m.eval();
  frozen_on_host = false;
  const auto census = on_host ? tensor_census(m) : TensorCensus{};
  if (on_host && census.device && !census.device->is_cpu() && host_copy_pays(census)) {
    try {
      auto frozen = frozen_on_a_host_copy(m, *census.device, fold_half);
      frozen_on_host = true;
      return frozen;
    } catch (const std::exception&) {
      // Frozen where it lives, below: the host path is only ever faster, never needed.
    }
  }
  return frozen_in_place(m, fold_half);
}

}  // namespace nimble
