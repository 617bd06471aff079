// Host values folded into device constants: a forward that computes a tensor on the CPU from
// constants and its inputs' shapes alone, then copies it to the GPU (timm's EdgeNeXt builds its
// positional encoding's mask as `torch.zeros(shape).to(device)`), synchronizes with the host on
// every run, and a CUDA graph cannot capture that copy. Such a value is the same on every run
// of a graph captured for those shapes, so it is computed once at prepare and becomes a constant.
// The same rewrite runs on a CPU module (a copy to the CPU is still a copy, and an index made on
// the host is still recomputed every run): what CI can test of it. So does the one of
// repeat_interleave by a fixed count (repeats_by_fixed_counts), whose output size the GPU's
// overload reads on the host.

#include "common.h"
#include "nimble_shim.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

using namespace nimble_shim;

namespace {

using torch::jit::Node;
using torch::jit::Value;

// Ops that read only their input's shape, device or dtype, fixed for a graph captured for fixed
// input shapes (a scripted forward asks `self.conv.weight.device`).
bool reads_only_metadata(const Node* node) {
  static const std::unordered_set<std::string> kinds = {"aten::size", "aten::sym_size", "aten::dim",  "aten::numel",
                                                        "prim::shape", "prim::device",   "prim::dtype", "prim::is_cuda"};
  return kinds.count(node->kind().toQualString()) != 0;
}

// A submodule of the module (`self.blocks`): which object it is does not change between runs.
// What it holds can (a parameter read from it is not fixed).
bool gets_a_submodule(const Node* node) {
  if (node->kind() != c10::prim::GetAttr) return false;
  const auto cls = node->output()->type()->cast<c10::ClassType>();
  return cls != nullptr && cls->is_module();
}

// A copy to a device: `.cuda()`, or `.to` naming a device or a tensor whose device to take (a
// cast to another dtype alone copies nothing between devices).
bool copies_to_a_device(const Node* node) {
  const std::string kind = node->kind().toQualString();
  if (kind != "aten::to" && kind != "aten::_to_copy" && kind != "aten::cuda") return false;
  if (node->inputs().empty() || node->inputs()[0]->type()->cast<c10::TensorType>() == nullptr) return false;
  if (kind == "aten::cuda") return true;
  for (size_t i = 1; i < node->inputs().size(); i++) {
    const auto* input = node->inputs()[i];
    const auto type = input->type();
    if (type->kind() == c10::TypeKind::DeviceObjType || type->cast<c10::TensorType>() != nullptr) return true;
    if (const auto optional = type->cast<c10::OptionalType>(); optional && optional->getElementType()->kind() == c10::TypeKind::DeviceObjType) {
      const auto value = torch::jit::toIValue(input);
      if (!value || !value->isNone()) return true;
    }
  }
  return false;
}

// The values of the graph that constants and the inputs' shapes determine: outputs of
// constants, of metadata queries, and of deterministic ops without side effects or blocks whose
// inputs are all such values. An in-place op on such values counts too (transformers' WavLM
// builds its relative-position buckets with `buckets += ...` on the host): which values it
// writes, and whether the writes a folded copy depends on are all folded with it, is checked
// per copy (`writes_outside`).
std::unordered_set<const Value*> fixed_values(const std::shared_ptr<torch::jit::Graph>& graph, torch::jit::AliasDb& aliases) {
  std::unordered_set<const Value*> fixed;
  // The graph's constant tensors are shared by every run: a write to one (a frozen buffer
  // updated in place) changes what the next run computes, so it is never folded.
  torch::jit::ValueSet constants;
  for (auto* node : graph->nodes())
    if (node->kind() == c10::prim::Constant && node->output()->type()->cast<c10::TensorType>() != nullptr) constants.insert(node->output());
  for (auto* node : graph->nodes()) {
    bool is_fixed = node->kind() == c10::prim::Constant || reads_only_metadata(node) || gets_a_submodule(node);
    if (!is_fixed) {
      is_fixed = node->blocks().empty() && !node->isNondeterministic() && !node->hasSideEffects() && node->kind() != c10::prim::GetAttr &&
                 !aliases.writesToAlias(node, constants);
      for (const auto* input : node->inputs()) is_fixed = is_fixed && fixed.count(input) != 0;
    }
    if (is_fixed)
      for (const auto* output : node->outputs()) fixed.insert(output);
  }
  return fixed;
}

// The nodes computing `wanted`: each one's inputs' producers, transitively. Without
// `through_metadata`, not past a metadata query: its answer does not depend on the values of
// the tensor it asks about (the device activations upstream of an `x.shape`), only what it
// asks does, so a write to those values cannot change it.
std::unordered_set<const Node*> producers(const std::vector<const Value*>& wanted, bool through_metadata = true) {
  std::unordered_set<const Node*> needed;
  std::vector<const Value*> pending(wanted.begin(), wanted.end());
  while (!pending.empty()) {
    const Node* node = pending.back()->node();
    pending.pop_back();
    if (node->kind() == c10::prim::Param || !needed.insert(node).second) continue;
    if (!through_metadata && reads_only_metadata(node)) continue;
    for (const auto* input : node->inputs()) pending.push_back(input);
  }
  return needed;
}

// Whether a node before `copy` that is not among `needed` (the nodes computing what it copies,
// up to the metadata queries) writes memory one of their values may alias: computing `needed`
// alone would then miss that write, and the folded value would differ from the copy's.
bool writes_outside(const std::shared_ptr<torch::jit::Graph>& graph, torch::jit::AliasDb& aliases, const Node* copy,
                    const std::unordered_set<const Node*>& needed) {
  torch::jit::ValueSet values;
  for (const auto* node : needed)
    for (const auto* output : node->outputs()) values.insert(output);
  for (auto* node : graph->nodes()) {
    if (node == copy) return false;
    if (!needed.count(node) && aliases.writesToAlias(node, values)) return true;
  }
  return false;
}

// A graph of `graph`'s inputs that computes only the `wanted` values (each node they need,
// cloned in order), returned as one tuple.
std::shared_ptr<torch::jit::Graph> slice_computing(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<Value*>& wanted) {
  const auto needed = producers(std::vector<const Value*>(wanted.begin(), wanted.end()));
  auto slice = std::make_shared<torch::jit::Graph>();
  std::unordered_map<const Value*, Value*> copies;
  for (auto* input : graph->inputs()) copies[input] = slice->addInput()->copyMetadata(input);
  for (auto* node : graph->nodes()) {
    if (!needed.count(node)) continue;
    auto* copy = slice->appendNode(slice->createClone(node, [&](Value* v) { return copies.at(v); }));
    for (size_t i = 0; i < node->outputs().size(); i++) copies[node->outputs()[i]] = copy->outputs()[i];
  }
  std::vector<Value*> outputs;
  for (auto* v : wanted) outputs.push_back(copies.at(v));
  slice->registerOutput(slice->insertNode(slice->createTuple(outputs))->output());
  return slice;
}

// torch.repeat_interleave(x, n, dim) with a fixed count (torchvision's MViT-v1-B repeats its
// temporal position table by a count read from a shape) goes, on a GPU, through the overload that
// takes a tensor of repeats and reads its sum on the host for the output's size: a
// synchronization on every run. With `n` and `dim` constants it is the same copy as
// x.unsqueeze(dim + 1).expand(..., n, ...).flatten(dim, dim + 1), the sizes read from x when
// it runs (a loaded trace does not know its tensors' ranks). Returns how many it rewrote.
int repeats_by_fixed_counts(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> repeats;
  for (auto* node : graph->nodes())
    if (node->kind() == c10::Symbol::fromQualString("aten::repeat_interleave") && node->inputs().size() == 4 &&
        node->input(1)->type()->kind() == c10::TypeKind::IntType)
      repeats.push_back(node);
  int rewritten = 0;
  for (auto* node : repeats) {
    const auto count = torch::jit::constant_as<int64_t>(node->input(1));
    const auto dim = torch::jit::constant_as<int64_t>(node->input(2));
    if (!count || !dim) continue;
    // The new dimension right after `dim`, and the two to merge, counted from the end for a
    // negative `dim` (x of rank r, dim -k: the new one is -k of the r + 1, the pair -k-1, -k).
    const int64_t inserted = *dim < 0 ? *dim : *dim + 1;
    const int64_t first = *dim < 0 ? *dim - 1 : *dim;
    const auto op = [&](const char* name, std::vector<Value*> inputs, c10::TypePtr type) {
      auto* made = graph->insertNode(graph->create(c10::Symbol::fromQualString(name), inputs));
      made->output()->setType(std::move(type));
      return made->output();
    };
    torch::jit::WithInsertPoint here(node);
    auto* unsqueezed = op("aten::unsqueeze", {node->input(0), graph->insertConstant(inserted)}, c10::TensorType::get());
    auto* sizes = op("aten::size", {unsqueezed}, c10::ListType::ofInts());
    auto* expanded_sizes = op("aten::_set_item", {sizes, graph->insertConstant(inserted), graph->insertConstant(*count)}, c10::ListType::ofInts());
    auto* expanded = op("aten::expand", {unsqueezed, expanded_sizes, graph->insertConstant(false)}, c10::TensorType::get());
    auto* flat = op("aten::flatten", {expanded, graph->insertConstant(first), graph->insertConstant(first + 1)}, node->output()->type());
    node->output()->replaceAllUsesWith(flat);
    node->destroy();
    ++rewritten;
  }
  return rewritten;
}

// A host index of a device tensor's aten::index: the op, its list of indices, the position.
struct HostIndex {
  Node* op;
  Node* list;
  size_t position;
};

// Computes, on `inputs`, the host copies in `candidates` and the host indices in `indices` (one
// run of the slice of the forward that makes them) and puts each result in the graph as a
// constant on its device. Returns how many it folded.
int fold_into_constants(torch::jit::Module& copy, const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<Node*>& candidates,
                        const std::vector<HostIndex>& indices, void* const* inputs, int n) {
  int folded = 0;
  std::vector<Value*> wanted;
  for (auto* node : candidates) {
    wanted.push_back(node->inputs()[0]);
    wanted.push_back(node->output());
  }
  for (const auto& index : indices) wanted.push_back(index.list->inputs()[index.position]);
  torch::jit::Stack stack{copy._ivalue()};
  for (int i = 0; i < n; i++) stack.emplace_back(*static_cast<const at::Tensor*>(inputs[i]));
  if (stack.size() != graph->inputs().size())
    throw std::runtime_error("the forward takes " + std::to_string(graph->inputs().size() - 1) + " inputs, but " + std::to_string(n) + " were given");
  {
    torch::NoGradGuard no_grad;
    torch::jit::Code code(slice_computing(graph, wanted), "nimble_host_values");
    torch::jit::InterpreterState(code).run(stack);
  }
  const auto values = stack.back().toTupleRef().elements();
  torch::jit::WithInsertPoint at_start(graph->block()->nodes().front());
  for (size_t i = 0; i < candidates.size(); i++) {
    const auto& from = values[2 * i];
    const auto& to = values[2 * i + 1];
    if (!from.isTensor() || !to.isTensor() || !from.toTensor().device().is_cpu()) continue;
    candidates[i]->output()->replaceAllUsesWith(graph->insertConstant(to.toTensor().detach()));
    ++folded;
  }
  // The indexed tensor lives where a constant of the graph says, else where the module does
  // (its parameters', else the inputs').
  std::optional<c10::Device> module_device;
  for (const auto& p : copy.parameters()) {
    module_device = p.device();
    break;
  }
  if (!module_device && n > 0) module_device = static_cast<const at::Tensor*>(inputs[0])->device();
  for (size_t k = 0; k < indices.size(); k++) {
    const auto& index = values[2 * candidates.size() + k];
    const auto indexed = torch::jit::toIValue(indices[k].op->inputs()[0]);
    const auto device = indexed && indexed->isTensor() ? std::optional(indexed->toTensor().device()) : module_device;
    if (!device || !index.isTensor() || !index.toTensor().device().is_cpu()) continue;
    indices[k].list->replaceInput(indices[k].position, graph->insertConstant(index.toTensor().detach().to(*device)));
    ++folded;
  }
  return folded;
}

}  // namespace

extern "C" {

// Folds, in the forward of a copy of `module` (its methods inlined), each copy to a device of a
// fixed host value (fixed_values) into a constant holding the copy's result on `inputs`, and each
// fixed host index of a device tensor's aten::index into a constant on that tensor's device, and
// rewrites each repeat_interleave by a fixed count (repeats_by_fixed_counts). Writes the copy
// (sharing the module's parameters) to `out` and the number of folded copies and rewritten
// repeats to `folded`; when there are none, `out` is null.
int ns_jit_fold_host_values(void* module, void* const* inputs, int n, void** out, int* folded) {
  return guarded([&] {
    *out = nullptr;
    *folded = 0;
    auto copy = static_cast<torch::jit::Module*>(module)->clone(true);
    auto graph = copy.get_method("forward").graph();
    torch::jit::Inline(*graph);
    // A module not frozen passes values between its inlined methods in tuples (MViT's pooling
    // returns its output with the shapes its attention builds indices from): each value then
    // flows on its own, and a shape no longer depends on the activations it was packed with.
    torch::jit::LowerSimpleTuples(graph);
    const int by_counts = repeats_by_fixed_counts(graph);
    torch::jit::AliasDb aliases(graph);
    auto fixed = fixed_values(graph, aliases);
    std::vector<Node*> candidates;
    for (auto* node : graph->nodes())
      if (copies_to_a_device(node) && fixed.count(node->output()) != 0 && !writes_outside(graph, aliases, node, producers({node->inputs()[0]}, false)))
        candidates.push_back(node);
    // Indices built on the host and used to index a device tensor (torchvision's MViT indexes
    // its relative-position tables with `table[dist.long()]`, `dist` made from shapes by
    // `torch.arange`): aten::index copies each to the device on every run. An indexed tensor
    // computed from fixed values is the host's to index; a constant's device is its own (a
    // frozen module's tables are constants).
    std::vector<HostIndex> indices;
    for (auto* node : graph->nodes()) {
      if (node->kind() != c10::Symbol::fromQualString("aten::index") || node->inputs().size() < 2) continue;
      if (fixed.count(node->inputs()[0]) != 0 && node->inputs()[0]->node()->kind() != c10::prim::Constant) continue;
      auto* list = node->inputs()[1]->node();
      if (list->kind() != c10::prim::ListConstruct) continue;
      for (size_t i = 0; i < list->inputs().size(); i++) {
        const auto* index = list->inputs()[i];
        if (index->type()->cast<c10::TensorType>() != nullptr && fixed.count(index) != 0 && !writes_outside(graph, aliases, list, producers({index}, false)))
          indices.push_back({node, list, i});
      }
    }
    *folded = by_counts;
    if (!candidates.empty() || !indices.empty()) *folded += fold_into_constants(copy, graph, candidates, indices, inputs, n);
    if (*folded == 0) return;
    torch::jit::EliminateDeadCode(graph);
    *out = new torch::jit::Module(std::move(copy));
  });
}

}  // extern "C"
