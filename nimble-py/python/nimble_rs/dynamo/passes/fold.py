"""A convolution, the per-channel affine ops after it (an inference BatchNorm, as AOTAutograd
decomposes it) and its ReLU as one cuDNN kernel (option ``fuse_convolutions``): cuDNN's fused
convolution, bias and ReLU (``torch.cudnn_convolution_relu``) over the weights scaled by the
BatchNorm's per-channel factor and its shift as the bias.

Inductor runs such a chain as cuDNN's convolution and then a Triton kernel that reads the
convolution's output back to apply the BatchNorm and the ReLU; fused, the output is written once,
and cuDNN's fused kernel takes about the convolution's own time (`experiments/python/probes/fused_conv_probe.py`).
The scaled weights and the bias are computed in the graph on every call from the parameters and
buffers as they are then (kernels on weights alone, which the backend runs on its weight stream):
a weight changed after compiling is the weight used. Inference graphs, float32, 2-D
convolutions; a chain whose ReLU feeds a concatenation is left to Inductor (it writes the ReLU's
result into the concatenation's buffer, which the fused kernel could not), and so is any
convolution where the fused kernel is measured slower than the convolution alone, or fails
(``pays_on_gpu``)."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F

from . import epilogue  # (also defines nimble::conv_scale_bias_relu)
from ..common.announce import warn_once
from .fxnodes import Builder, cuda_device
from .fxnodes import value as _val
from ..common.timing import graph_us

aten = torch.ops.aten
AFFINE = {aten.sub.Tensor, aten.add.Tensor, aten.mul.Tensor, aten.div.Tensor}


@torch.library.custom_op("nimble::conv_bias_relu", mutates_args=())
def conv_bias_relu(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: List[int], padding: List[int], dilation: List[int], groups: int) -> torch.Tensor:
    """cuDNN's fused convolution, bias and ReLU on CUDA, the same arithmetic by ATen ops
    elsewhere; the output channels-last. Defined when this module is imported (with the
    backend), so that a program Inductor cached with it finds it in a new process."""
    weight = weight.contiguous(memory_format=torch.channels_last)
    if x.is_cuda:
        return torch.cudnn_convolution_relu(x, weight, bias, stride, padding, dilation, groups)
    return torch.relu(F.conv2d(x, weight, bias, stride, padding, dilation, groups)).contiguous(memory_format=torch.channels_last)


@conv_bias_relu.register_fake
def _(x, weight, bias, stride, padding, dilation, groups):
    return epilogue.channels_last_output(x, weight, stride, padding, dilation)


_LOWERED: set = set()


def fused_op(name: str = "conv_bias_relu"):
    """``nimble::conv_bias_relu`` (or ``nimble::NAME``: ``epilogue``'s op), with Inductor's
    fallback to it (registered once, when a graph is first fused) taking ``x`` and ``weight``
    channels-last."""
    op = getattr(torch.ops.nimble, name).default
    if name not in _LOWERED:
        from torch._inductor import ir, lowering

        def channels_last_inputs(_node, x, weight, *rest, **kwargs):
            return (ir.ExternKernel.require_channels_last(x), ir.ExternKernel.require_channels_last(weight), *rest), kwargs

        lowering.make_fallback(op, layout_constraint=channels_last_inputs, warn=False)
        _LOWERED.add(name)
    return op


def _static_ints(values) -> bool:
    return all(isinstance(v, int) for v in values)


def _convolution(node: torch.fx.Node, dtypes) -> bool:
    """A plain 2-D convolution of concrete sizes in one of ``dtypes``."""
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) != 9 or node.kwargs:
        return False
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    xv, wv, out = _val(x), _val(weight), _val(node)
    if transposed or any(output_padding) or xv is None or wv is None or out is None or xv.dim() != 4 or wv.dim() != 4:
        return False
    if xv.dtype not in dtypes or wv.dtype != xv.dtype or (bias is not None and _val(bias) is None):
        return False
    return _static_ints((*xv.shape, *wv.shape, *stride, *padding, *dilation, groups))


def per_channel(operand, channels: int, dtype) -> bool:
    """A Python number, or a tensor of ``channels`` values along dimension -3 of a 3-D or 4-D
    shape (one value per output channel, broadcast over the rest)."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return True
    value = _val(operand)
    if value is None or value.dtype != dtype or value.dim() not in (3, 4) or not _static_ints(value.shape):
        return False
    return value.shape[-3] == channels and value.numel() == channels


def chain(conv: torch.fx.Node) -> Optional[Tuple[List[Tuple[torch.fx.Node, Any]], torch.fx.Node]]:
    """The per-channel affine ops from ``conv`` to a ReLU (each op's node and its other operand),
    each the only user of the one before, and the ReLU; None where ``conv`` does not lead to one
    that way."""
    channels = _val(conv.args[1]).shape[0]
    dtype = _val(conv).dtype
    ops: List[Tuple[torch.fx.Node, Any]] = []
    node = conv
    while True:
        if len(node.users) != 1:
            return None
        (user,) = node.users
        if user.op != "call_function" or user.kwargs:
            return None
        if user.target is aten.relu.default:
            return ops, user
        if user.target not in AFFINE or len(user.args) != 2:
            return None
        a, b = user.args
        if a is node and b is not node:
            other = b
        elif b is node and a is not node and user.target in (aten.add.Tensor, aten.mul.Tensor):
            other = a
        else:
            return None
        if not per_channel(other, channels, dtype):
            return None
        ops.append((user, other))
        node = user


class AffineBuilder(Builder):
    """New nodes before the ReLU, and the affine terms composed from them."""

    def combine(self, target, a, b):
        """``target(a, b)`` where None is the identity (1 for a product, 0 for a sum) and either
        may be a Python number."""
        if b is None:
            return a
        if a is None:
            if target is aten.sub.Tensor:
                return -b if isinstance(b, (int, float)) else self.add(aten.neg.default, b)
            if target is aten.div.Tensor:
                return 1.0 / b if isinstance(b, (int, float)) else self.add(aten.reciprocal.default, b)
            return b
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return {aten.mul.Tensor: a * b, aten.add.Tensor: a + b, aten.sub.Tensor: a - b, aten.div.Tensor: a / b}[target]
        if isinstance(a, (int, float)):
            # A number first: a - t is -(t - a), a / t is reciprocal(t) * a, a + t and a * t commute.
            if target is aten.sub.Tensor:
                return self.add(aten.neg.default, self.add(aten.sub.Tensor, b, a))
            if target is aten.div.Tensor:
                return self.add(aten.mul.Tensor, self.add(aten.reciprocal.default, b), a)
            return self.add(target, b, a)
        return self.add(target, a, b)

    def compose(self, ops):
        """The factor and term (None for 1 and 0, or a Python number) of per-channel affine
        ``ops`` (each node and its other operand, in order): y = scale * x + shift, op by op."""
        scale = shift = None
        for node, operand in ops:
            if node.target in (aten.mul.Tensor, aten.div.Tensor):
                scale = self.combine(node.target, scale, operand)
                shift = self.combine(node.target, shift, operand) if shift is not None else None
            else:
                shift = self.combine(node.target, shift, operand)
        return scale, shift


def fold_chain(graph: torch.fx.Graph, conv: torch.fx.Node, ops, relu: torch.fx.Node, fake_mode, epilogue: bool = False) -> bool:
    """``conv``, ``ops`` and ``relu`` replaced by the fused op over the scaled weights and the
    bias (False, unchanged, where the shift is a number but the convolution has no bias). With
    ``epilogue``, by ``nimble::conv_scale_bias_relu`` over the weights as they are, the scale and
    the bias applied to the convolution's result (False where either is a number: a BatchNorm
    gives tensors)."""
    x, weight, bias, stride, padding, dilation, _, _, groups = conv.args
    channels = _val(weight).shape[0]
    build = AffineBuilder(graph, relu, fake_mode)
    scale, shift = build.compose(ops)
    if isinstance(shift, (int, float)) and shift != 0 and bias is None:
        build.undo()
        return False

    def vector(term, shape):
        return build.add(aten.view.default, term, shape) if isinstance(term, torch.fx.Node) else term

    if epilogue:
        if not (isinstance(scale, torch.fx.Node) and isinstance(shift, torch.fx.Node)):
            build.undo()
            return False
        total = vector(shift, [channels])
        if bias is not None:
            # s * (conv + b) + shift = s * conv + (s * b + shift)
            total = build.combine(aten.add.Tensor, build.combine(aten.mul.Tensor, bias, vector(scale, [channels])), total)
        fused = build.add(fused_op("conv_scale_bias_relu"), x, weight, vector(scale, [channels]), total, list(stride), list(padding), list(dilation))
        return _replace(graph, conv, ops, relu, fused)
    scaled = weight if scale is None else build.combine(aten.mul.Tensor, weight, vector(scale, [channels, 1, 1, 1]))
    new_bias = bias if bias is None or scale is None else build.combine(aten.mul.Tensor, bias, vector(scale, [channels]))
    if isinstance(shift, torch.fx.Node) or (shift is not None and shift != 0):
        new_bias = build.combine(aten.add.Tensor, new_bias, vector(shift, [channels]))
    fused = build.add(fused_op(), x, scaled, new_bias, list(stride), list(padding), list(dilation), groups)
    return _replace(graph, conv, ops, relu, fused)


def _replace(graph: torch.fx.Graph, conv: torch.fx.Node, ops, relu: torch.fx.Node, fused: torch.fx.Node) -> bool:
    relu.replace_all_uses_with(fused)
    for erased in [relu] + [node for node, _ in reversed(ops)] + [conv]:
        graph.erase_node(erased)
    return True


def fuse_convolutions(gm: torch.fx.GraphModule, pays: Callable[..., bool], dtypes=(torch.float32,), mode: str = "folded") -> Dict[str, int]:
    """Every chain of ``gm`` (a convolution, per-channel affine ops, a ReLU) fused where ``pays``
    says so, in place; counts of the chains fused, left to Inductor (their ReLU feeds a
    concatenation or is a graph output, or a number shifts them and the convolution has no bias;
    with ``mode`` "epilogue", also a number scaling or shifting them, or grouped convolutions)
    and measured slower fused (or, "epilogue", not matching the unfused arithmetic)."""
    from torch._guards import detect_fake_mode

    graph = gm.graph
    counts = {"fused": 0, "left_to_inductor": 0, "slower_fused": 0}
    for conv in [n for n in graph.nodes if _convolution(n, dtypes)]:
        found = chain(conv)
        if found is None:
            continue
        ops, relu = found
        if any(u.op == "output" or u.target is aten.cat.default for u in relu.users):
            counts["left_to_inductor"] += 1
            continue
        x, weight, _, stride, padding, dilation, _, _, groups = conv.args
        if mode == "epilogue" and groups != 1:
            counts["left_to_inductor"] += 1
            continue
        if not pays(_val(x), _val(weight), tuple(stride), tuple(padding), tuple(dilation), groups):
            counts["slower_fused"] += 1
            continue
        fake_mode = detect_fake_mode([_val(x), _val(weight)])
        if fake_mode is None:
            continue
        # (A shift by a number alone, with no bias to carry it: left.)
        counts["fused" if fold_chain(graph, conv, ops, relu, fake_mode, mode == "epilogue") else "left_to_inductor"] += 1
    if counts["fused"]:
        graph.lint()
        gm.recompile()
    return counts


_MEASURED: Dict[tuple, bool] = {}


def pays_in_epilogue(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation, groups) -> bool:
    """Whether cuDNN's graph of the convolution with its scale, bias and ReLU in the epilogue
    is faster than the convolution and a pointwise pass, and exact (``epilogue_plan``)."""
    return epilogue_plan(x, weight, stride, padding, dilation, groups).plan is not None


def epilogue_plan(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation, groups) -> "epilogue.Fused":
    """``epilogue.tune`` for the convolution (once per shape, channels-last as Inductor gives
    them to the op); where cuDNN has no graph or its output is not exact, announced once per
    shape."""
    device = cuda_device(x)
    layouts = (tuple(x.shape), _channels_last(x.shape), tuple(weight.shape), _channels_last(weight.shape))
    fused = epilogue.tune(*layouts, x.dtype, device, tuple(stride), tuple(padding), tuple(dilation), lambda run: graph_us(run, device))
    if fused.plan is None and not fused.why.startswith("slower"):
        warn_once(("epilogue", tuple(x.shape), tuple(weight.shape), stride, padding, dilation), f"nimble backend: the convolution of input {list(x.shape)}, weight {list(weight.shape)} is not fused in cuDNN's epilogue: {fused.why}; it runs as Inductor compiles it")
    return fused


def _channels_last(shape) -> Tuple[int, int, int, int]:
    """The strides of a contiguous channels-last tensor of ``shape`` (N, C, H, W)."""
    _, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def pays_on_gpu(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation, groups) -> bool:
    """Whether cuDNN's fused kernel takes at most 1.05 times the convolution alone at these
    shapes (so at most the convolution and a kernel after it), measured once per shape on
    channels-last random tensors, each in a CUDA graph of repeats."""
    key = (tuple(x.shape), tuple(weight.shape), stride, padding, dilation, groups, x.dtype, x.device)
    if key in _MEASURED:
        return _MEASURED[key]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        device = cuda_device(x)
        xr = torch.randn(tuple(x.shape), dtype=x.dtype, device=device).contiguous(memory_format=torch.channels_last)
        wr = torch.randn(tuple(weight.shape), dtype=x.dtype, device=device).contiguous(memory_format=torch.channels_last)
        br = torch.randn(weight.shape[0], dtype=x.dtype, device=device)
        op = fused_op()
        alone = graph_us(lambda: F.conv2d(xr, wr, None, stride, padding, dilation, groups), device)
        try:
            fused = graph_us(lambda: op(xr, wr, br, list(stride), list(padding), list(dilation), groups), device)
        except RuntimeError as error:
            # No fused engine for this shape (cuDNN's error, raised in the warm-up before the
            # capture): the convolution stays Inductor's.
            warn_once(("fold", key), f"nimble backend: cuDNN's fused convolution failed for input {list(x.shape)}, weight {list(weight.shape)} ({str(error).splitlines()[0][:200]}); that convolution runs as Inductor compiles it")
            fused = float("inf")
        del xr, wr, br
    _MEASURED[key] = fused <= 1.05 * alone
    return _MEASURED[key]
