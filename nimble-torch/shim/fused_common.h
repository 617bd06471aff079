// What Nimble's fused ops share (fused_ops.cpp, linear_ops.cpp): activations by name, checks on
// the tensors a CUDA kernel takes, and the helpers of the TorchScript rewrites that put the ops
// into a frozen graph.
#pragma once

#include "nimble_kernels.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/subgraph_matcher.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace nimble::fused {

using Act = NkAct;

inline Act parse_act(c10::string_view name) {
  if (name == "none") return kNkNone;
  if (name == "relu") return kNkRelu;
  if (name == "silu") return kNkSilu;
  if (name == "relu6") return kNkRelu6;
  if (name == "gelu") return kNkGelu;
  if (name == "gelu_tanh") return kNkGeluTanh;
  TORCH_CHECK(false, "nimble fused op: unknown activation '", std::string(name),
              "' (expected none, relu, silu, relu6, gelu or gelu_tanh)");
}

// `t` (a tensor this op made) with the activation applied in place.
inline at::Tensor activate_(at::Tensor t, Act act) {
  switch (act) {
    case kNkRelu: return t.relu_();
    case kNkSilu: return at::silu_(t);
    case kNkRelu6: return at::hardtanh_(t, 0, 6);
    case kNkGelu: return at::gelu_(t, "none");
    case kNkGeluTanh: return at::gelu_(t, "tanh");
    default: return t;
  }
}

inline bool present(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

inline const float* data_or_null(const std::optional<at::Tensor>& t) { return present(t) ? t->const_data_ptr<float>() : nullptr; }

// A float32 CUDA tensor on `device`, contiguous, with `sizes`.
inline bool plain(const at::Tensor& t, const at::Device& device, at::IntArrayRef sizes) {
  return t.scalar_type() == at::kFloat && t.device() == device && t.is_contiguous() && t.sizes() == sizes;
}

inline void check_launch(int status, const char* what) {
  TORCH_CHECK(status == 0, "nimble fused op ", what, ": the CUDA launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// ---------------------------------------------------------------------------------------------
// The rewrites' helpers
// ---------------------------------------------------------------------------------------------

using torch::jit::Match;
using torch::jit::Node;
using torch::jit::Value;
using ValueMap = std::unordered_map<std::string, Value*>;

// The graph value a pattern value (named as in the pattern, "%x") matched.
inline Value* matched(const Match& match, const ValueMap& vmap, const std::string& name) {
  auto found = vmap.find(name.substr(name.rfind('%') + 1));
  TORCH_CHECK(found != vmap.end(), "nimble fused ops: the pattern has no value ", name);
  return match.values_map.at(found->second);
}

// The matched value's constant, if it is one.
inline std::optional<c10::IValue> constant(const Match& match, const ValueMap& vmap, const std::string& name) {
  return torch::jit::toIValue(matched(match, vmap, name));
}

inline bool int_list_is(const std::optional<c10::IValue>& v, const std::vector<int64_t>& expected) {
  if (!v || !v->isIntList()) return false;
  auto list = v->toIntVector();
  // conv2d takes one number for both dimensions too.
  if (list.size() == 1 && expected.size() == 2 && expected[0] == expected[1]) return list[0] == expected[0];
  return list == expected;
}

inline bool int_is(const std::optional<c10::IValue>& v, int64_t expected) { return v && v->isInt() && v->toInt() == expected; }

inline bool string_is(const std::optional<c10::IValue>& v, const char* expected) {
  return v && v->isString() && v->toStringRef() == expected;
}

inline bool number_is(const std::optional<c10::IValue>& v, double expected) {
  return v && ((v->isInt() && v->toInt() == expected) || (v->isDouble() && v->toDouble() == expected));
}

// The intermediate values of a pattern: each must have no use outside the match, or replacing
// the match would leave that use without its value.
inline bool used_only_inside(const Match& match, const ValueMap& vmap, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    Value* v = matched(match, vmap, name);
    for (const auto& use : v->uses()) {
      bool inside = false;
      for (const auto& kv : match.nodes_map) inside |= kv.second == use.user;
      if (!inside) return false;
    }
  }
  return true;
}

// conv2d's padding as a list of ints (the other overload takes a string such as "same").
inline bool int_padding(const Match& match, const ValueMap& vmap, const char* name) {
  auto v = constant(match, vmap, name);
  return v && v->isIntList();
}

// Whether `v` is computed from `ancestor` (or is it): then an op that takes both waits for
// nothing new. Graph inputs and constants count as ancestors of everything: they are ready first.
inline bool computed_from(Value* v, Value* ancestor) {
  Node* target = ancestor->node();
  if (target->kind() == c10::prim::Param || target->kind() == c10::prim::Constant) return true;
  std::vector<Node*> stack{v->node()};
  std::unordered_set<Node*> seen;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    // Nodes are in program order: one before the target cannot have it among its inputs.
    if (n->kind() == c10::prim::Param || n->isBefore(target) || !seen.insert(n).second) continue;
    for (Value* input : n->inputs()) stack.push_back(input->node());
  }
  return false;
}

inline void rewrite(std::shared_ptr<torch::jit::Graph>& graph, const std::string& pattern, const std::string& replacement,
             const torch::jit::MatchFilter& filter) {
  torch::jit::SubgraphRewriter rewriter;
  rewriter.RegisterRewritePattern(pattern, replacement);
  rewriter.runOnGraph(graph, filter);
}

}  // namespace nimble::fused
