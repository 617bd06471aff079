// Nimble's ops for transformer blocks and the TorchScript rewrites that put them into a frozen
// graph (what inductor does for torch.compile with its GEMM lowering and pointwise fusion):
//
//   nimble::linear(input, weight, bias?, other?, act) = act(linear(input, weight, bias) + other)
//     CUDA: one of two ways, timed the first time a shape is seen outside a capture (as cuDNN's
//     benchmark mode does): ATen's linear (cuBLASLt with its bias epilogue) followed by a kernel
//     each for the residual and the activation, or the product alone through cuBLAS's plain GEMM
//     followed by one kernel for bias, residual and activation. On the H200 in float32, BERT-base's
//     128×768 by 768×768 layer took 31 µs through F.linear's bias epilogue (split-K, four
//     kernels) and 17 µs as a plain torch.mm (paper-figs/results/probes/bert-kernels-diagnosis-b7bb8b3.json).
//   nimble::attention_mask(mask, query) = the mask as scaled_dot_product_attention's fused
//     kernels take it: a boolean mask as the additive one attention makes of it before them (0
//     where true, -inf where false, in the query's dtype), in two kernels where attention takes
//     three; a mask not contiguous in its last dimension copied (in half precision only one
//     expanded along it); any other, itself. A mask expanded along its last dimension
//     (transformers' padding mask under tracing) makes the fused kernels refuse it and attention
//     run as its math path (13 kernels in BERT-base). A permuted one (T5's position bias) does
//     so in eager too: copied in half precision, T5 in float16 moved 0.0016 from eager, its
//     outputs rounded by other kernels. A mask several attentions share is converted once.
//
// Both have CPU kernels made of the ATen ops they replace. Inference only: no autograd formula.

#include "common.h"
#include "fused_common.h"
#include "fused_ops.h"
#include "nimble_shim.h"
#include "timed_choice.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <string>
#include <unordered_map>

using namespace nimble::fused;

namespace {

at::Tensor linear_aten(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       const std::optional<at::Tensor>& other, Act act) {
  at::Tensor y = at::linear(input, weight, bias);
  if (present(other)) y = at::add(y, *other);
  return activate_(y, act);
}

at::Tensor linear_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      const std::optional<at::Tensor>& other, c10::string_view act) {
  return linear_aten(input, weight, bias, other, parse_act(act));
}

// Whether the product can be taken without the bias as one GEMM on the input's rows.
bool takes_product(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return weight.dim() == 2 && input.dim() >= 1 && input.size(-1) == weight.size(1) && input.numel() > 0 &&
         input.is_contiguous() && at::isFloatingType(input.scalar_type()) &&
         input.scalar_type() == weight.scalar_type() && input.device() == weight.device() &&
         (!present(bias) || (bias->scalar_type() == input.scalar_type() && bias->dim() == 1));
}

// The product through a plain GEMM, then bias, residual and activation: in one kernel for
// float32 with a contiguous residual of the output's shape, else with ATen's ops.
at::Tensor linear_product(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& other, Act act) {
  const int64_t features = weight.size(0);
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = features;
  at::Tensor y = at::mm(input.reshape({-1, weight.size(1)}), weight.t()).view(sizes);
  bool ours = y.scalar_type() == at::kFloat && (!present(bias) || plain(*bias, y.device(), {features})) &&
              (!present(other) || plain(*other, y.device(), y.sizes()));
  if (!ours) {
    if (present(bias)) y.add_(*bias);
    if (present(other)) y = at::add(y, *other);
    return activate_(y, act);
  }
  check_launch(nk_epilogue(y.mutable_data_ptr<float>(), data_or_null(bias), data_or_null(other), y.numel(), features,
                           1, act, at::cuda::getCurrentCUDAStream().stream()),
               "linear");
  return y;
}

enum class LinearPath { Aten, Product };

// ns_set_linear_gemm's mode: 0 timed, 1 always ATen's way, 2 always the plain product.
std::atomic<int> g_linear_gemm{0};

LinearPath choose(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  const std::optional<at::Tensor>& other, Act act) {
  if (!takes_product(input, weight, bias)) return LinearPath::Aten;
  int mode = g_linear_gemm.load();
  if (mode != 0) return mode == 1 ? LinearPath::Aten : LinearPath::Product;
  // The case: device, dtype, rows, features, inputs, epilogue, TF32 setting.
  std::ostringstream key;
  key << input.device().index() << ' ' << c10::toString(input.scalar_type()) << ' ' << input.numel() / input.size(-1)
      << ' ' << weight.size(0) << ' ' << weight.size(1) << ' ' << present(bias) << present(other) << ' '
      << static_cast<int>(act) << ' ' << at::globalContext().allowTF32CuBLAS();
  bool product = second_is_faster(
      "linear " + key.str(), [&] { linear_aten(input, weight, bias, other, act); },
      [&] { linear_product(input, weight, bias, other, act); });
  return product ? LinearPath::Product : LinearPath::Aten;
}

at::Tensor linear_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       const std::optional<at::Tensor>& other, c10::string_view act) {
  Act a = parse_act(act);
  if (choose(input, weight, bias, other, a) == LinearPath::Product) return linear_product(input, weight, bias, other, a);
  return linear_aten(input, weight, bias, other, a);
}

// Returns `mask` itself when attention's fused kernels take it as it is.
at::Tensor attention_mask(const at::Tensor& mask, const at::Tensor& query) {
  if (mask.scalar_type() == at::kBool) {
    // What attention does with a boolean mask before its fused kernels, in two kernels where it
    // takes three. (at::where with scalar tensors would copy them to the device: no capture.)
    return at::full(mask.sizes(), -std::numeric_limits<double>::infinity(), mask.options().dtype(query.scalar_type()))
        .masked_fill_(mask, 0);
  }
  if (mask.dim() > 0 && mask.stride(-1) != 1) {
    // Expanded along its last dimension (a padding mask as the tracer records it), the copy is
    // what eager's unexpanded mask was to the fused kernels. Permuted (T5's position bias), it
    // is eager's own mask, which keeps attention off the fused kernels; in half precision it is
    // passed as eager passes it, so that attention rounds as eager's does.
    const bool half = query.scalar_type() == at::kHalf || query.scalar_type() == at::kBFloat16;
    if (mask.stride(-1) == 0 || !half) return mask.contiguous();
  }
  return mask;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(nimble, m) {
  m.def("linear(Tensor input, Tensor weight, Tensor? bias, Tensor? other, str act) -> Tensor");
  m.def("attention_mask(Tensor(a) mask, Tensor query) -> Tensor(a)");
}

TORCH_LIBRARY_IMPL(nimble, CPU, m) {
  m.impl("linear", linear_cpu);
  m.impl("attention_mask", attention_mask);
}

TORCH_LIBRARY_IMPL(nimble, CUDA, m) {
  m.impl("linear", linear_cuda);
  m.impl("attention_mask", attention_mask);
}

// ---------------------------------------------------------------------------------------------
// The rewrites
// ---------------------------------------------------------------------------------------------

namespace nimble {

void fuse_linear_tails(std::shared_ptr<torch::jit::Graph>& graph) {
  const std::string replacement_head = "  %none : NoneType = prim::Constant()\n";
  // A product and its activation (GELU exact or tanh, ReLU, SiLU).
  struct Activation {
    const char* name;
    const char* call;
    const char* approximate;  // GELU's `approximate` argument, or null
  };
  const std::vector<Activation> activations = {
      {"gelu", "aten::gelu(%y, %approximate)", "none"},
      {"gelu_tanh", "aten::gelu(%y, %approximate)", "tanh"},
      {"relu", "aten::relu(%y)", nullptr},
      {"silu", "aten::silu(%y)", nullptr},
  };
  for (const auto& a : activations) {
    std::string inputs = std::string("%x, %w, %b") + (a.approximate ? ", %approximate" : "");
    std::string pattern = "graph(" + inputs + "):\n  %y = aten::linear(%x, %w, %b)\n  %z = " + a.call + "\n  return (%z)";
    std::string replacement = "graph(" + inputs + "):\n" + replacement_head + "  %act : str = prim::Constant[value=\"" +
                              a.name + "\"]()\n  %z = nimble::linear(%x, %w, %b, %none, %act)\n  return (%z)";
    const char* approximate = a.approximate;
    rewrite(graph, pattern, replacement, [approximate](const Match& m, const ValueMap& v) {
      if (approximate != nullptr && !string_is(constant(m, v, "%approximate"), approximate)) return false;
      return used_only_inside(m, v, {"%y"});
    });
  }
  // A product and a residual added to it, when the product's input is computed from the residual
  // (a transformer block's attention and feed-forward outputs): as for convolutions, a sum of
  // parallel branches stays, so that the plan keeps their concurrency.
  for (const char* sum : {"aten::add(%y, %other, %alpha)", "aten::add(%other, %y, %alpha)"}) {
    std::string pattern = std::string("graph(%x, %w, %b, %other, %alpha):\n  %y = aten::linear(%x, %w, %b)\n  %z = ") +
                          sum + "\n  return (%z)";
    std::string replacement = "graph(%x, %w, %b, %other, %alpha):\n  %act : str = prim::Constant[value=\"none\"]()\n"
                              "  %z = nimble::linear(%x, %w, %b, %other, %act)\n  return (%z)";
    rewrite(graph, pattern, replacement, [](const Match& m, const ValueMap& v) {
      Value* other = matched(m, v, "%other");
      return number_is(constant(m, v, "%alpha"), 1) && other->type()->isSubtypeOf(*c10::TensorType::get()) &&
             used_only_inside(m, v, {"%y"}) && computed_from(matched(m, v, "%x"), other);
    });
  }
  // transformers' Conv1D (GPT-2): addmm(bias, x, w) with unit factors is linear(x, wᵀ, bias), and
  // ATen's way computes it as that very addmm.
  rewrite(graph, "graph(%b, %x, %w, %beta, %alpha):\n  %y = aten::addmm(%b, %x, %w, %beta, %alpha)\n  return (%y)",
          "graph(%b, %x, %w, %beta, %alpha):\n" + replacement_head +
              "  %act : str = prim::Constant[value=\"none\"]()\n  %wt = aten::t(%w)\n"
              "  %y = nimble::linear(%x, %wt, %b, %none, %act)\n  return (%y)",
          [](const Match& m, const ValueMap& v) {
            return number_is(constant(m, v, "%beta"), 1) && number_is(constant(m, v, "%alpha"), 1);
          });
  // Any other product, for the choice of its GEMM.
  rewrite(graph, "graph(%x, %w, %b):\n  %y = aten::linear(%x, %w, %b)\n  return (%y)",
          "graph(%x, %w, %b):\n" + replacement_head +
              "  %act : str = prim::Constant[value=\"none\"]()\n  %y = nimble::linear(%x, %w, %b, %none, %act)\n  return (%y)",
          [](const Match&, const ValueMap&) { return true; });
}

void convert_attention_masks(std::shared_ptr<torch::jit::Graph>& graph) {
  const auto attention = c10::Symbol::fromQualString("aten::scaled_dot_product_attention");
  const auto convert = c10::Symbol::fromQualString("nimble::attention_mask");
  const auto to = c10::Symbol::fromQualString("aten::to");
  // A mask every layer shares (transformers make the padding mask once) is converted once, for
  // the first attention that reads it; the others take that conversion through
  // `to(converted, query)`, which returns it as it is (no kernel) when their query has the same
  // dtype and converts it when not, as the conversion would have.
  std::unordered_map<Value*, Value*> converted;
  for (Node* node : graph->nodes()) {
    if (node->kind() != attention || node->inputs().size() < 4) continue;
    Value* mask = node->input(3);
    if (!mask->type()->isSubtypeOf(*c10::TensorType::get())) continue;  // None, or an Optional
    torch::jit::WithInsertPoint point(node);
    auto earlier = converted.find(mask);
    Node* conversion = nullptr;
    if (earlier == converted.end()) {
      conversion = graph->insertNode(graph->create(convert, {mask, node->input(0)}));
      converted.emplace(mask, conversion->output());
    } else {
      Value* no = graph->insertConstant(false);
      Value* none = graph->insertConstant(c10::IValue());
      conversion = graph->insertNode(graph->create(to, {earlier->second, node->input(0), no, no, none}));
    }
    conversion->output()->setType(c10::TensorType::get());
    node->replaceInput(3, conversion->output());
  }
}

}  // namespace nimble

extern "C" int ns_set_linear_gemm(int mode) {
  return nimble_shim::guarded([&] {
    TORCH_CHECK(mode >= 0 && mode <= 2, "linear GEMM mode ", mode, ": expected 0 (timed), 1 (ATen) or 2 (plain product)");
    g_linear_gemm.store(mode);
  });
}
