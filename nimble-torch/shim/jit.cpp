// TorchScript: tracing a tch forward into a module, loading and saving modules, freezing them
// with the inference rewrites (BatchNorm folding, SiLU, cuDNN's and Nimble's fusions, the
// channels-last layout), and running their forward with the output's structure kept.

#include "common.h"
#include "freeze.h"
#include "fused_ops.h"
#include "nimble_shim.h"

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/passes/frozen_conv_add_relu_fusion.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/csrc/jit/passes/normalize_ops.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <unordered_set>

using namespace nimble_shim;

namespace {

// A JSON string literal of `s`.
std::string json_string(const std::string& s) {
  std::ostringstream o;
  o << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o << '\\' << c;
    } else if (c < 0x20) {
      o << "\\u" << std::hex << std::setw(4) << std::setfill('0') << static_cast<int>(c) << std::dec;
    } else {
      o << c;
    }
  }
  o << '"';
  return o.str();
}

// Writes the structure of a forward's output as JSON, appending its tensors to `flat`:
//   {"tensor": i} (index into flat), null (None, or an undefined tensor), true / false,
//   {"int": n}, {"float": x} (x a number, or "nan", "inf", "-inf"), {"str": "…"},
//   {"tuple": [...]}, {"list": [...]}, {"dict": [[key, value], ...]} (in insertion order).
void write_structure(const c10::IValue& v, std::vector<at::Tensor>& flat, std::ostringstream& o) {
  auto sequence = [&](const char* tag, auto&& elements) {
    o << "{\"" << tag << "\":[";
    bool first = true;
    for (const auto& e : elements) {
      if (!first) o << ',';
      first = false;
      write_structure(e, flat, o);
    }
    o << "]}";
  };
  if (v.isTensor() && v.toTensor().defined()) {
    o << "{\"tensor\":" << flat.size() << '}';
    flat.push_back(v.toTensor());
  } else if (v.isNone() || v.isTensor()) {
    o << "null";
  } else if (v.isBool()) {
    o << (v.toBool() ? "true" : "false");
  } else if (v.isInt()) {
    o << "{\"int\":" << v.toInt() << '}';
  } else if (v.isDouble()) {
    double d = v.toDouble();
    o << "{\"float\":";
    if (std::isnan(d)) {
      o << "\"nan\"";
    } else if (std::isinf(d)) {
      o << (d > 0 ? "\"inf\"" : "\"-inf\"");
    } else {
      o << std::setprecision(17) << d;
    }
    o << '}';
  } else if (v.isString()) {
    o << "{\"str\":" << json_string(v.toStringRef()) << '}';
  } else if (v.isTuple()) {
    sequence("tuple", v.toTupleRef().elements());
  } else if (v.isList()) {
    sequence("list", v.toListRef());
  } else if (v.isGenericDict()) {
    o << "{\"dict\":[";
    bool first = true;
    for (const auto& entry : v.toGenericDict()) {
      if (!first) o << ',';
      first = false;
      o << '[';
      write_structure(entry.key(), flat, o);
      o << ',';
      write_structure(entry.value(), flat, o);
      o << ']';
    }
    o << "]}";
  } else {
    throw std::runtime_error(std::string("the module's output holds a ") + v.tagKind() +
                             ", which Nimble cannot pass through (expected tensors, None, numbers, strings, and tuples, lists or dicts of them)");
  }
}


// A trace records each convolution as aten::_convolution with the tracing process's cuDNN flags
// (benchmark, deterministic, enabled, TF32) as constants, so a loaded module would ignore this
// process's settings: eager could not be checked in exact float32 (TF32 stayed on), nor timed
// with cuDNN's benchmark on. Rewritten as aten::conv2d (or aten::convolution, for what that
// pass leaves), which read the flags at run time as every other convolution does.
void convolutions_follow_process_flags(std::shared_ptr<torch::jit::Graph> graph) {
  torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
  std::vector<torch::jit::Node*> left;
  for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();)
    if (node->kind() == c10::Symbol::fromQualString("aten::_convolution") && node->inputs().size() >= 9) left.push_back(node);
  for (auto* node : left) {
    torch::jit::WithInsertPoint guard(node);
    auto inputs = node->inputs().slice(0, 9);
    auto* conv = graph->insertNode(graph->create(c10::Symbol::fromQualString("aten::convolution"), inputs, 1));
    conv->output()->setType(node->output()->type());
    node->output()->replaceAllUsesWith(conv->output());
    node->destroy();
  }
}
}  // namespace

extern "C" {

// Starts recording a TorchScript trace of whatever runs next on this thread, with `inputs` as
// the graph's inputs; ns_jit_trace_end turns it into a module with a `forward` method.
int ns_jit_trace_begin(void* const* inputs, int n, void** module) {
  return guarded([&] {
    if (torch::jit::tracer::isTracing()) throw std::runtime_error("a TorchScript trace is already running");
    auto m = std::make_unique<torch::jit::Module>("NimbleTraced");
    auto state = std::make_shared<torch::jit::tracer::TracingState>();
    torch::jit::tracer::setTracingState(state);
    try {
      state->graph->insertInput(0, "self")->setType(m->_ivalue()->type());
      for (int i = 0; i < n; i++) {
        auto* value = state->graph->addInput();
        value->setType(torch::jit::TensorType::get());
        state->setValue(*static_cast<const at::Tensor*>(inputs[i]), value);
      }
    } catch (...) {
      torch::jit::tracer::abandon();
      throw;
    }
    *module = m.release();
  });
}

int ns_jit_trace_end(void* module, void* const* outputs, int n) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    auto state = torch::jit::tracer::getTracingState();
    if (state == nullptr) throw std::runtime_error("no TorchScript trace is running");
    try {
      // A method has one result: several outputs become one tuple (ns_jit_forward flattens it).
      std::vector<torch::jit::Value*> values;
      for (int i = 0; i < n; i++) values.push_back(state->getOutput(*static_cast<const at::Tensor*>(outputs[i]), i));
      if (values.size() == 1) {
        state->graph->registerOutput(values[0]);
      } else {
        state->graph->registerOutput(state->graph->insertNode(state->graph->createTuple(values))->output());
      }
      torch::jit::FixupTraceScopeBlocks(state->graph, m);
      torch::jit::NormalizeOps(state->graph);
    } catch (...) {
      torch::jit::tracer::abandon();
      throw;
    }
    torch::jit::tracer::setTracingState(nullptr);
    auto fn = m->_ivalue()->compilation_unit()->create_function("forward", state->graph);
    m->type()->addMethod(fn);
  });
}

void ns_jit_trace_abandon() {
  try {
    if (torch::jit::tracer::isTracing()) torch::jit::tracer::abandon();
  } catch (...) {
  }
}

// Loads a module onto the CPU or CUDA device `device`, its convolutions made to follow this
// process's cuDNN flags (convolutions_follow_process_flags). On CUDA, the parameters, buffers and the
// graphs' tensor constants are moved there, except 0-dim CPU constants: those are the scalars a
// trace records for shape arithmetic (`x.size(1) // 2`), which must stay on the host as they were
// traced; moved (as `torch.jit.load(f, map_location="cuda")` moves them), the arithmetic runs on
// the GPU and its `aten::Int` becomes a device-to-host copy that no CUDA graph can capture.
int ns_jit_load(const char* path, int device, void** out) {
  return guarded([&] {
    auto m = torch::jit::load(std::string(path), c10::Device(c10::kCPU));
    if (device >= 0) {
      c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
      m.to(d);
      for (const auto& module : m.modules()) {
        for (const auto& method : module.get_methods()) {
          std::shared_ptr<torch::jit::Graph> graph = method.graph();
          for (torch::jit::DepthFirstGraphNodeIterator it(graph); auto* node = it.next();) {
            if (!nimble::is_tensor_constant(node)) continue;
            const at::Tensor& t = node->t(c10::attr::value);
            if (t.dim() > 0) node->t_(c10::attr::value, t.to(d));
          }
        }
      }
    }
    for (const auto& module : m.modules())
      for (const auto& method : module.get_methods()) convolutions_follow_process_flags(method.graph());
    m.eval();
    *out = new torch::jit::Module(std::move(m));
  });
}
void ns_jit_free(void* module) { delete static_cast<torch::jit::Module*>(module); }

// Saves the module as a TorchScript file (what torch.jit.save writes; torch.jit.load and tch's
// CModule read it).
int ns_jit_save(void* module, const char* path) {
  return guarded([&] { static_cast<torch::jit::Module*>(module)->save(std::string(path)); });
}

// An in-place activation the fusions take in its functional form. Not ReLU: made functional,
// NASNet-A large's 110 in-place ReLUs after convolutions were fused with them and the model ran
// 2.68 ms against 2.18 on the H200 (timm, same process, commits 8364cf5 and 8f54375).
static bool inplace_activation(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> kinds = {"aten::relu6_", "aten::silu_", "aten::hardtanh_", "aten::sigmoid_",
                                                        "aten::gelu_"};
  return kinds.count(node->kind().toQualString()) != 0;
}

// Freezes the module (parameters become constants; on a CPU copy with `on_host`, see freeze.cpp)
// and applies the inference rewrites: BatchNorm folded into the preceding convolution (and the
// other frozen foldings), dropout removed, when `fuse` is set (CUDA only), convolution(+add)+ReLU fused into cuDNN's fused
// kernels (with `kernels` too, the grouped ones handed to nimble::conv2d_relu, which times
// them against Nimble's epilogue kernel), and when `kernels` is set, squeeze-and-excitation blocks, convolutions and linear
// layers with their activation or residual add replaced by Nimble's fused ops, in-place
// activations (not ReLU) made functional first so that those match, and every attention mask
// passed through nimble::attention_mask (fused_ops.cpp, linear_ops.cpp; `fused` says how many of
// Nimble's ops the graph then has).
//
// `channels_last` (0 off, 1 on, 2 auto): 4-D constants (the frozen convolution weights) are
// stored channels-last, so that with a channels-last input cuDNN runs NHWC kernels without
// layout transforms (what inductor's layout optimization does for torch.compile). Auto turns it
// on unless the graph has grouped (e.g. depthwise) convolutions, which cuDNN often runs slower in
// NHWC (prepare then times both layouts: see nimble-torch's layout.rs). `applied`: bit 0, it was
// applied; bit 1, the graph has 2-D convolutions; bit 2, grouped ones; bit 3, the module was
// frozen on a CPU copy; bit 4, auto keeps NCHW for the numbers, untried (a half-precision model
// with a single convolution). (A convolution with a string padding, aten::_convolution_mode,
// counts: before, SigLIP's one went NHWC without a trial.)
int ns_jit_optimize(void* module, int on_host, int fold_half, int fuse, int kernels, int channels_last, void** out, int* applied, int* fused) {
  return guarded([&] {
    bool frozen_on_host = false;
    auto frozen = nimble::frozen_and_folded(*static_cast<torch::jit::Module*>(module), on_host != 0, fold_half != 0, frozen_on_host);
    auto graph = frozen.get_method("forward").graph();
    // In-place activations (torchvision's `nn.SiLU(inplace=True)`, `nn.ReLU6(inplace=True)`)
    // made functional where alias analysis proves nothing else sees the mutation, so that the
    // fusions below match them (EfficientNet-B5 kept 116 SiLU kernels and its 39
    // squeeze-and-excitation blocks unfused).
    if (kernels) torch::jit::RemoveTensorMutation(graph, [](torch::jit::Node* node) { return inplace_activation(node); });
    // x * sigmoid(x) (swish, as tch's EfficientNet writes it) is one SiLU kernel instead of two.
    torch::jit::SubgraphRewriter silu;
    for (const char* product : {"aten::mul(%x, %s)", "aten::mul(%s, %x)"}) {
      silu.RegisterRewritePattern(std::string("graph(%x):\n  %s = aten::sigmoid(%x)\n  %y = ") + product + "\n  return (%y)",
                                  "graph(%x):\n  %y = aten::silu(%x)\n  return (%y)");
    }
    silu.runOnGraph(graph);
    // Looked for before the fusions below, which turn convolutions into other ops.
    const bool half = nimble::computes_in_half_precision(*graph);
    bool grouped = false;
    int convs = 0;
    // 2-D convolutions: aten::conv2d, and aten::_convolution_mode (a string padding, "valid" in
    // SigLIP's patch embedding), which freezing leaves as it is.
    const auto conv2d = c10::Symbol::fromQualString("aten::conv2d"), by_mode = c10::Symbol::fromQualString("aten::_convolution_mode");
    for (auto* node : graph->nodes()) {
      if (node->kind() != conv2d && node->kind() != by_mode) continue;
      if (node->kind() == by_mode) {
        const auto weight = node->input(1)->type()->cast<c10::TensorType>();
        const auto dims = weight ? weight->dim() : std::nullopt;
        const auto* constant = node->input(1)->node();
        if (!(dims == 4 || (nimble::is_tensor_constant(constant) && constant->t(c10::attr::value).dim() == 4))) continue;
      }
      ++convs;
      auto groups = torch::jit::toIValue(node->inputs().back());
      grouped |= !groups || !groups->isInt() || groups->toInt() != 1;
    }
    // A half-precision model whose one convolution is its stem (a vision transformer's patch
    // embedding) stays NCHW, untried: NHWC ran that convolution through other cuDNN kernels, whose
    // rounding moved SigLIP's and DINOv2's outputs further from eager than the compiler's
    // (bfloat16 0.0175 against 0.0161; NCHW: eager's kernels, distance 0), for one layout
    // transform's worth of speed (paper-figs/results/half-precision/half-precision-53f9b5d-diagnosis-*.json).
    const bool stem_only = half && convs == 1;
    if (channels_last == 2) channels_last = grouped || stem_only ? 0 : 1;
    if (kernels) nimble::fuse_squeeze_excite(graph);
    if (fuse) torch::jit::FuseFrozenConvAddRelu(graph);
    if (fuse && kernels) nimble::time_cudnn_conv_relu(graph);
    if (kernels) {
      nimble::fuse_conv_tails(graph);
      nimble::fuse_linear_tails(graph);
      nimble::convert_attention_masks(graph);
    }
    *fused = nimble::fused_op_count(*graph);
    *applied = (channels_last ? 1 : 0) | (convs ? 2 : 0) | (grouped ? 4 : 0) | (frozen_on_host ? 8 : 0) | (stem_only ? 16 : 0);
    if (channels_last) {
      for (auto* node : graph->nodes()) {
        if (!nimble::is_tensor_constant(node)) continue;
        const at::Tensor& t = node->t(c10::attr::value);
        if (t.dim() == 4) node->t_(c10::attr::value, t.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
    *out = new torch::jit::Module(std::move(frozen));
  });
}

// Runs `forward`, with the graph executor's optimizations off so every run issues the same ops,
// the module in training mode when `train` is set, else in evaluation mode (what a scripted
// module's `self.training` reads; a trace has the mode it was traced in written into its ops).
// The output's tensors are returned flat, in order, as new tensors; when `structure` is given, it
// receives the output's shape as JSON (see write_structure), each tensor by its index in the flat
// list, so a caller can rebuild tuples, lists, dicts, None and constants around them.
int ns_jit_forward(void* module, void* const* inputs, int n, int train, void*** outputs, int* n_out, char** structure) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    if (m->is_training() != (train != 0)) m->train(train != 0);
    torch::jit::GraphOptimizerEnabledGuard no_optimizer(false);
    std::vector<c10::IValue> args;
    for (int i = 0; i < n; i++) args.emplace_back(*static_cast<const at::Tensor*>(inputs[i]));
    c10::IValue result = m->forward(args);
    std::vector<at::Tensor> flat;
    std::ostringstream o;
    write_structure(result, flat, o);
    if (structure != nullptr) *structure = owned_copy(o.str());
    *outputs = new_tensor_array(flat);
    *n_out = static_cast<int>(flat.size());
  });
}

// Makes the module's parameter or buffer `name` (dotted, as `named_parameters` writes it:
// "layer1.0.conv1.weight") the tensor `value` itself, so that the module reads and trains the
// caller's tensor instead of its own copy. `value` must have the slot's dtype, shape and device.
// With `check_only`, only checks that it could.
int ns_jit_bind(void* module, const char* name, void* value, int check_only) {
  return guarded([&] {
    torch::jit::Module m = *static_cast<torch::jit::Module*>(module);
    std::string path(name);
    size_t start = 0;
    for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
      std::string part = path.substr(start, dot - start);
      if (!m.hasattr(part) || !m.attr(part).isModule())
        throw std::runtime_error("the module has no submodule `" + path.substr(0, dot) + "` (binding `" + path + "`)");
      m = m.attr(part).toModule();
    }
    std::string leaf = path.substr(start);
    if (!m.hasattr(leaf) || !m.attr(leaf).isTensor())
      throw std::runtime_error("the module has no parameter or buffer `" + path + "`");
    const at::Tensor& tensor = *static_cast<const at::Tensor*>(value);
    at::Tensor slot = m.attr(leaf).toTensor();
    if (slot.defined() && (slot.scalar_type() != tensor.scalar_type() || slot.sizes() != tensor.sizes() || slot.device() != tensor.device())) {
      std::ostringstream o;
      o << "`" << path << "` is " << slot.scalar_type() << " " << slot.sizes() << " on " << slot.device() << " in the module, but the tensor given is "
        << tensor.scalar_type() << " " << tensor.sizes() << " on " << tensor.device();
      throw std::runtime_error(o.str());
    }
    if (!check_only) m.setattr(leaf, tensor);
  });
}

// Converts the module's floating-point parameters and buffers to `dtype` (a c10::ScalarType
// code), as `module.to(dtype)` does in Python. Dtypes written into the traced graph itself stay.
int ns_jit_to(void* module, int dtype) {
  return guarded([&] { static_cast<torch::jit::Module*>(module)->to(static_cast<c10::ScalarType>(dtype)); });
}

// The forward method's arguments after `self`, one line each: "<name>\t<type>\t<1 if it has a
// default, else 0>" (a traced module's are all `Tensor`, without defaults).
int ns_jit_arguments(void* module, char** out) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    const auto& arguments = m->get_method("forward").function().getSchema().arguments();
    std::ostringstream o;
    for (size_t i = 1; i < arguments.size(); i++)
      o << arguments[i].name() << '\t' << arguments[i].type()->annotation_str() << '\t' << (arguments[i].default_value() ? 1 : 0) << '\n';
    *out = owned_copy(o.str());
  });
}

// The module's forward graph, node kinds with their counts ("aten::conv2d=53\n…").
int ns_jit_node_kinds(void* module, char** out) {
  return guarded([&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    std::map<std::string, int> counts;
    for (auto* node : m->get_method("forward").graph()->nodes()) counts[node->kind().toQualString()]++;
    std::ostringstream o;
    for (const auto& kv : counts) o << kv.first << '=' << kv.second << '\n';
    *out = owned_copy(o.str());
  });
}

}  // extern "C"
