// Nimble's fused custom ops and the TorchScript rewrites that use them (what inductor's
// pointwise fusion does for torch.compile, done here by pattern):
//
//   nimble::conv2d_fused(input, weight, bias?, stride, padding, dilation, groups, other?, act)
//       = act(conv2d(input, weight, bias, ...) + other)
//     CUDA: cuDNN's convolution without the bias, then one kernel for bias, residual and
//     activation (ATen: the convolution, then a kernel each for the bias, the add, the activation).
//   nimble::conv2d_relu(input, weight, bias?, stride, padding, dilation, groups, other?)
//       = relu(conv2d(input, weight, bias, ...) + other)
//     CUDA: one of two ways, timed the first time a case is seen outside a capture (as
//     nimble::linear chooses its GEMM): cuDNN's fused convolution(+add)+ReLU, or conv2d_fused's
//     way. Neither wins everywhere: on an H200 at batch 1, cuDNN's fused kernels made RegNetX-1.6GF
//     (grouped convolutions) 25% slower than conv2d_fused's way, while GoogLeNet ran 13% faster
//     with them (paper-figs/results/rewrite-variants-a18cba9/). The rewrite hands it grouped
//     convolutions only (time_cudnn_conv_relu).
//   nimble::squeeze_excite(x, w1, b1?, w2, b2?, act)
//       = x * sigmoid(conv1x1(act(conv1x1(adaptive_avg_pool2d(x, 1), w1, b1)), w2, b2))
//     CUDA: three kernels (partial plane means; the first 1×1 convolution and its activation;
//     the second with the gate fused into the scaling of x) instead of eight or more; four for
//     channels-last x (the gates, then the scaling).
//
// Both have a CPU kernel made of the ATen ops they replace (so the rewrites are tested without a
// GPU), and the CUDA kernels take that same path for inputs they do not handle (not float32, not
// contiguous NCHW/NHWC, shapes that need broadcasting). Inference only: no autograd formula.

#include "common.h"
#include "fused_ops.h"
#include "nimble_shim.h"
#include "fused_common.h"
#include "timed_choice.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/subgraph_matcher.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/library.h>

#include <atomic>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

using namespace nimble::fused;

namespace {

// What the rewritten subgraph computed, with ATen's ops.
at::Tensor conv2d_fused_aten(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                             const std::optional<at::Tensor>& other, c10::string_view act) {
  Act a = parse_act(act);
  at::Tensor y = at::conv2d(input, weight, bias, stride, padding, dilation, groups);
  if (present(other)) y = at::add(y, *other);
  return activate_(y, a);
}

at::Tensor conv2d_fused_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                             const std::optional<at::Tensor>& other, c10::string_view act) {
  Act a = parse_act(act);
  bool ours = input.scalar_type() == at::kFloat && input.dim() == 4 && weight.dim() == 4;
  if (ours && present(bias)) ours = plain(*bias, input.device(), {weight.size(0)});
  if (!ours) return conv2d_fused_aten(input, weight, bias, stride, padding, dilation, groups, other, act);
  at::Tensor y = at::conv2d(input, weight, {}, stride, padding, dilation, groups);
  int64_t inner = -1;
  if (y.scalar_type() == at::kFloat && y.dim() == 4) {
    if (y.is_contiguous()) inner = y.size(2) * y.size(3);
    else if (y.is_contiguous(at::MemoryFormat::ChannelsLast)) inner = 1;
  }
  bool other_ok = !present(other) || (other->scalar_type() == at::kFloat && other->device() == y.device() &&
                                      other->sizes() == y.sizes() && other->strides() == y.strides());
  if (inner < 0 || !other_ok) {
    if (present(bias)) y.add_(bias->view({1, -1, 1, 1}));
    if (present(other)) y = at::add(y, *other);
    return activate_(y, a);
  }
  check_launch(nk_epilogue(y.mutable_data_ptr<float>(), data_or_null(bias), data_or_null(other), y.numel(), y.size(1),
                           inner, a, at::cuda::getCurrentCUDAStream().stream()),
               "conv2d_fused");
  return y;
}

at::Tensor conv2d_relu_aten(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            const std::optional<at::Tensor>& other) {
  return conv2d_fused_aten(input, weight, bias, stride, padding, dilation, groups, other, "relu");
}

at::Tensor conv2d_relu_cudnn(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                             const std::optional<at::Tensor>& other) {
  if (present(other)) return at::cudnn_convolution_add_relu(input, weight, *other, 1, bias, stride, padding, dilation, groups);
  return at::cudnn_convolution_relu(input, weight, bias, stride, padding, dilation, groups);
}

// ns_set_conv_relu's mode: 0 timed, 1 always cuDNN's fused kernels, 2 always conv2d_fused's way.
std::atomic<int> g_conv_relu{0};

void describe(std::ostringstream& key, const at::Tensor& t) {
  key << ' ' << c10::toString(t.scalar_type()) << t.sizes() << t.strides();
}

at::Tensor conv2d_relu_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            const std::optional<at::Tensor>& other) {
  auto ours = [&] { return conv2d_fused_cuda(input, weight, bias, stride, padding, dilation, groups, other, "relu"); };
  auto cudnn = [&] { return conv2d_relu_cudnn(input, weight, bias, stride, padding, dilation, groups, other); };
  int mode = g_conv_relu.load();
  if (mode != 0) return mode == 1 ? cudnn() : ours();
  // The case: device, the tensors' dtypes, shapes and layouts, the convolution's parameters and
  // the settings that change cuDNN's choice of algorithm.
  std::ostringstream key;
  key << "conv2d_relu " << input.device().index();
  describe(key, input);
  describe(key, weight);
  if (present(other)) describe(key, *other);
  key << ' ' << present(bias) << ' ' << stride << padding << dilation << groups << ' '
      << at::globalContext().allowTF32CuDNN() << at::globalContext().benchmarkCuDNN() << at::globalContext().deterministicCuDNN();
  return second_is_faster(key.str(), [&] { cudnn(); }, [&] { ours(); }) ? ours() : cudnn();
}

at::Tensor squeeze_excite_aten(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                               const at::Tensor& w2, const std::optional<at::Tensor>& b2, c10::string_view act) {
  Act a = parse_act(act);
  at::Tensor s = at::adaptive_avg_pool2d(x, {1, 1});
  s = activate_(at::conv2d(s, w1, b1), a);
  return at::mul(at::sigmoid(at::conv2d(s, w2, b2)), x);
}

at::Tensor squeeze_excite_cuda(const at::Tensor& x, const at::Tensor& w1, const std::optional<at::Tensor>& b1,
                               const at::Tensor& w2, const std::optional<at::Tensor>& b2, c10::string_view act) {
  Act a = parse_act(act);
  bool nchw = x.is_contiguous(), nhwc = !nchw && x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast);
  bool ours = x.scalar_type() == at::kFloat && x.dim() == 4 && (nchw || nhwc) && w1.dim() == 4 && w2.dim() == 4;
  int64_t batch = 0, channels = 0, squeeze = 0, hw = 0;
  // A 1×1 weight holds the same bytes in either layout, so contiguous() returns a channels-last
  // one as it is (no copy) and plain() below sees the NCHW strides.
  at::Tensor w1c = w1.contiguous(), w2c = w2.contiguous();
  if (ours) {
    batch = x.size(0), channels = x.size(1), squeeze = w1.size(0), hw = x.size(2) * x.size(3);
    const at::Device device = x.device();
    ours = hw > 0 && squeeze > 0 && plain(w1c, device, {squeeze, channels, 1, 1}) &&
           plain(w2c, device, {channels, squeeze, 1, 1}) && (!present(b1) || plain(*b1, device, {squeeze})) &&
           (!present(b2) || plain(*b2, device, {channels}));
  }
  if (!ours) return squeeze_excite_aten(x, w1, b1, w2, b2, act);
  at::Tensor y = at::empty_like(x);  // keeps x's layout
  at::Tensor partials = at::empty({batch * channels * nk_se_chunks(hw)}, x.options());
  at::Tensor hidden = at::empty({batch * squeeze}, x.options());
  at::Tensor gates = at::empty({nhwc ? batch * channels : 0}, x.options());
  check_launch(nk_squeeze_excite(x.const_data_ptr<float>(), w1c.const_data_ptr<float>(), data_or_null(b1),
                                 w2c.const_data_ptr<float>(), data_or_null(b2), y.mutable_data_ptr<float>(),
                                 partials.mutable_data_ptr<float>(), hidden.mutable_data_ptr<float>(),
                                 nhwc ? gates.mutable_data_ptr<float>() : nullptr, batch, channels, squeeze, hw, nhwc, a,
                                 at::cuda::getCurrentCUDAStream().stream()),
               "squeeze_excite");
  return y;
}

}  // namespace

TORCH_LIBRARY(nimble, m) {
  m.def("conv2d_fused(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, "
        "int groups, Tensor? other, str act) -> Tensor");
  m.def("conv2d_relu(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, "
        "int groups, Tensor? other) -> Tensor");
  m.def("squeeze_excite(Tensor x, Tensor w1, Tensor? b1, Tensor w2, Tensor? b2, str act) -> Tensor");
}

TORCH_LIBRARY_IMPL(nimble, CPU, m) {
  m.impl("conv2d_fused", conv2d_fused_aten);
  m.impl("conv2d_relu", conv2d_relu_aten);
  m.impl("squeeze_excite", squeeze_excite_aten);
}

TORCH_LIBRARY_IMPL(nimble, CUDA, m) {
  m.impl("conv2d_fused", conv2d_fused_cuda);
  m.impl("conv2d_relu", conv2d_relu_cuda);
  m.impl("squeeze_excite", squeeze_excite_cuda);
}

// ---------------------------------------------------------------------------------------------
// The rewrites
// ---------------------------------------------------------------------------------------------

constexpr const char* kConvArgs = "%w, %b, %stride, %padding, %dilation, %groups";

namespace nimble {

void fuse_squeeze_excite(std::shared_ptr<torch::jit::Graph>& graph) {
  for (const char* act : {"silu", "relu"}) {
    for (const char* product : {"aten::mul(%gate, %x)", "aten::mul(%x, %gate)"}) {
      std::string pattern = std::string(R"(
graph(%x, %size, %w1, %b1, %s1, %p1, %d1, %g1, %w2, %b2, %s2, %p2, %d2, %g2):
  %pooled = aten::adaptive_avg_pool2d(%x, %size)
  %reduced = aten::conv2d(%pooled, %w1, %b1, %s1, %p1, %d1, %g1)
  %hidden = aten::)") + act + R"((%reduced)
  %expanded = aten::conv2d(%hidden, %w2, %b2, %s2, %p2, %d2, %g2)
  %gate = aten::sigmoid(%expanded)
  %y = )" + product + R"(
  return (%y))";
      std::string replacement = std::string(R"(
graph(%x, %size, %w1, %b1, %s1, %p1, %d1, %g1, %w2, %b2, %s2, %p2, %d2, %g2):
  %act : str = prim::Constant[value=")") + act + R"("]()
  %y = nimble::squeeze_excite(%x, %w1, %b1, %w2, %b2, %act)
  return (%y))";
      rewrite(graph, pattern, replacement, [](const Match& m, const ValueMap& v) {
        for (const char* i : {"1", "2"}) {
          std::string n(i);
          if (!int_list_is(constant(m, v, "%s" + n), {1, 1}) || !int_list_is(constant(m, v, "%p" + n), {0, 0}) ||
              !int_list_is(constant(m, v, "%d" + n), {1, 1}) || !int_is(constant(m, v, "%g" + n), 1))
            return false;
        }
        return int_list_is(constant(m, v, "%size"), {1, 1}) &&
               used_only_inside(m, v, {"%pooled", "%reduced", "%hidden", "%expanded", "%gate"});
      });
    }
  }
}

void fuse_conv_tails(std::shared_ptr<torch::jit::Graph>& graph) {
  const std::string conv_args = kConvArgs;
  // A convolution and its activation.
  struct Activation {
    const char* name;
    const char* call;  // the pattern's node, on %y
    std::vector<std::string> extra_inputs;
  };
  const std::vector<Activation> activations = {
      {"silu", "aten::silu(%y)", {}},
      {"relu", "aten::relu(%y)", {}},
      {"relu6", "aten::hardtanh(%y, %low, %high)", {"%low", "%high"}},
      {"relu6", "aten::relu6(%y)", {}},
  };
  for (const auto& a : activations) {
    std::string inputs = "%x, " + conv_args;
    for (const auto& extra : a.extra_inputs) inputs += ", " + extra;
    std::string pattern = "graph(" + inputs + "):\n  %y = aten::conv2d(%x, " + conv_args + ")\n  %z = " + a.call +
                          "\n  return (%z)";
    std::string replacement = "graph(" + inputs + "):\n  %none : NoneType = prim::Constant()\n" +
                              "  %act : str = prim::Constant[value=\"" + a.name + "\"]()\n" +
                              "  %z = nimble::conv2d_fused(%x, " + conv_args + ", %none, %act)\n  return (%z)";
    bool clamp = !a.extra_inputs.empty();
    rewrite(graph, pattern, replacement, [clamp](const Match& m, const ValueMap& v) {
      if (clamp && !(number_is(constant(m, v, "%low"), 0) && number_is(constant(m, v, "%high"), 6))) return false;
      return int_padding(m, v, "%padding") && used_only_inside(m, v, {"%y"});
    });
  }
  // A convolution and a residual added to it, when the residual is something the convolution's
  // input is computed from (as in ResNet, MobileNetV2, EfficientNet blocks). A sum of two
  // parallel branches (NAS cells) stays: fused, the convolution would wait for the other branch,
  // and the plan would lose that concurrency (AmoebaNet ran 12% slower that way).
  for (const char* sum : {"aten::add(%y, %other, %alpha)", "aten::add(%other, %y, %alpha)"}) {
    std::string inputs = "%x, " + conv_args + ", %other, %alpha";
    std::string pattern = "graph(" + inputs + "):\n  %y = aten::conv2d(%x, " + conv_args + ")\n  %z = " + sum +
                          "\n  return (%z)";
    std::string replacement = "graph(" + inputs + "):\n  %act : str = prim::Constant[value=\"none\"]()\n" +
                              "  %z = nimble::conv2d_fused(%x, " + conv_args + ", %other, %act)\n  return (%z)";
    rewrite(graph, pattern, replacement, [](const Match& m, const ValueMap& v) {
      Value* other = matched(m, v, "%other");
      return number_is(constant(m, v, "%alpha"), 1) && other->type()->isSubtypeOf(*c10::TensorType::get()) &&
             int_padding(m, v, "%padding") && used_only_inside(m, v, {"%y"}) && computed_from(matched(m, v, "%x"), other);
    });
  }
}

void time_cudnn_conv_relu(std::shared_ptr<torch::jit::Graph>& graph) {
  const auto conv_relu = c10::Symbol::fromQualString("aten::cudnn_convolution_relu");
  const auto conv_add_relu = c10::Symbol::fromQualString("aten::cudnn_convolution_add_relu");
  const auto ours = c10::Symbol::fromQualString("nimble::conv2d_relu");
  std::vector<Node*> fused;
  for (auto* node : graph->nodes())
    if (node->kind() == conv_relu || node->kind() == conv_add_relu) fused.push_back(node);
  for (auto* node : fused) {
    // cudnn_convolution_relu(input, weight, bias, stride, padding, dilation, groups);
    // cudnn_convolution_add_relu(input, weight, z, alpha, bias, stride, padding, dilation, groups).
    bool add = node->kind() == conv_add_relu;
    auto weight = torch::jit::toIValue(node->input(1));
    if (!weight || !weight->isTensor() || weight->toTensor().dim() != 4) continue;  // conv3d stays cuDNN's
    // Only grouped convolutions are timed: that is where cuDNN's fused kernels lost (the RegNets),
    // and each timed case costs prepare a second cuDNN algorithm search (about 40 ms: timing
    // every convolution tripled ResNet-50's prepare, 0.8 to 2.5 s).
    auto groups = torch::jit::toIValue(node->inputs().back());
    if (!groups || !groups->isInt() || groups->toInt() == 1) continue;
    if (add) {
      auto alpha = torch::jit::toIValue(node->input(3));
      if (!alpha || !(alpha->isNone() || number_is(alpha, 1))) continue;
    }
    Value* none = nullptr;
    if (!add) {
      torch::jit::WithInsertPoint guard(node);
      none = graph->insertConstant(c10::IValue());
    }
    std::vector<Value*> inputs = {node->input(0), node->input(1), node->input(add ? 4 : 2)};
    for (size_t i = add ? 5 : 3; i < node->inputs().size(); i++) inputs.push_back(node->input(i));
    inputs.push_back(add ? node->input(2) : none);
    Node* replacement = graph->create(ours, inputs);
    replacement->insertBefore(node);
    replacement->output()->setType(node->output()->type());
    node->output()->replaceAllUsesWith(replacement->output());
    node->destroy();
  }
}

int fused_op_count(const torch::jit::Graph& graph) {
  int fused = 0;
  for (const auto* node : graph.nodes()) fused += std::string(node->kind().toQualString()).rfind("nimble::", 0) == 0 ? 1 : 0;
  return fused;
}

}  // namespace nimble

extern "C" int ns_set_conv_relu(int mode) {
  return nimble_shim::guarded([&] {
    TORCH_CHECK(mode >= 0 && mode <= 2, "conv+ReLU mode ", mode, ": expected 0 (timed), 1 (cuDNN) or 2 (epilogue)");
    g_conv_relu.store(mode);
  });
}
