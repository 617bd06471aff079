"""Depthwise convolutions by a Triton kernel of ours where it is measured faster than cuDNN's
(option ``depthwise_kernels``).

Inductor calls cuDNN for every convolution. On a depthwise one (one filter per channel) cuDNN's
kernels run far from the GPU's memory bandwidth: NASNet-A large's 5x5 over [16, 168, 42, 42],
38 MB read and written, takes it 37 us on an H100, about a third of the bandwidth
(`experiments/python/probes/depthwise_probe.py`). Our kernel (``depthwise_kernel``) computes several
output rows per program, loading each input row once per column tap. It reads the weights tap by
tap, [kh * kw, C], each tap's weights one coalesced load: as the model holds them ([C, 1, kh,
kw]) each thread's load of a tap touches a cache line per channel, which measured the kernel a
third slower (H200, `b660ee6`). That copy is made in the graph from the parameter on every call
(a kernel on a weight alone, which the backend runs on its weight stream), so a weight changed
after compiling is the weight used, and it is part of what is measured against cuDNN.

Each shape is measured once on the GPU at compile time, cuDNN's convolution (channels-last, as
Inductor calls it) against the kernel in each tile shape of ``tiles``, each in a CUDA graph of
repeats (``timing``), and rewritten where the cheapest way to run it (``choose``, below) takes
at most ``MARGIN`` of cuDNN's time; its output must match cuDNN's within ``EXACT``. Each tile is
a Triton compile per kernel geometry: done one by one as the shapes were measured, they took
NASNet-A large's preparation to 2.43x reduce-overhead's (H200, `7fd1499`), so the variants a
graph needs are compiled first, side by side in worker processes (``depthwise_ahead``), while
cuDNN's convolutions and the writes are timed (``baseline``), and only two tiles per kernel size
are measured. The same
arithmetic in float32 summed tap by tap (as exact as cuDNN's: 2-3e-7 of float64 on NASNet-A
large's).

The kernel also reads a convolution's input through what comes before it (a ``Site``): a zero
padding (timm's "same" padding as a separate ``constant_pad_nd``), a ReLU, and per-channel
affine ops before that ReLU (an inference BatchNorm). Each of NASNet-A large's 220 depthwise
convolutions reads ``relu(x)`` or ``pad(relu(x))``, and the second of each separable pair
``relu(batchnorm(conv1x1(...)))``: read through, Inductor need not write those tensors, nor
(where nothing else reads it) the BatchNorm's. The factor and term are composed in the graph
from the BatchNorm's buffers on every call. The prologue's arithmetic at every tap costs the
kernel some instructions (ptxas for sm_90: 73 to 106 per output for a 5x5 with a BatchNorm), so
the kernel reading the input as given is measured too (``sites``), and the choice counts what
reading through spares: where nothing else reads the tensor the convolution reads, one write of
it (timed as a fill of its size), beside cuDNN's convolution and the kernel reading it as given.
(At `530f899`, which counted none of it and tried the plain kernel only where reading through
measured slower than cuDNN, NASNet-A large's 3x3 convolutions all stayed cuDNN's: 15.1 us on
[16, 168, 42, 42] against 17.7 for the kernel reading through a ReLU, whose output, 19 MB, it
spares.)

The op ``nimble::depthwise_conv2d`` is ``depthwise_kernel``, its Triton kernel
``depthwise_triton``, the compiles ahead ``depthwise_ahead``; this module decides where they run.
"""

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx

from ..common.announce import warn_once
from .depthwise_ahead import start as start_ahead
from .depthwise_kernel import op, pads, vector_width
# (The measurements' names, this pass's as before: tests and probes read them here.)
from .depthwise_measure import BASELINES, CONFIGS, EXACT, LARGE_CONFIGS, MEASURED, Timing, _affine_kinds, _cudnn, _key, baseline, tiles, timing  # noqa: F401
from .fold import AFFINE, AffineBuilder, per_channel
from .fxnodes import guarded, recompile_if, substitute
from .fxnodes import value as _val

aten = torch.ops.aten

# The kernel is used where its fastest tile takes at most this share of cuDNN's time.
MARGIN = 0.9
# The largest kernel: its taps are unrolled, k * k loads and accumulations per input row.
MAX_TAPS = 49
# How the kernel is written, by option value: "unrolled" (every tap), "columns" (its columns a
# loop), or, by default (True, "by-size"), a kernel of more than ``LOOP_ABOVE_TAPS`` taps with its
# columns a loop and a smaller one unrolled. Measured side by side in one process (H200,
# `fb141f8`, each site in both; paper-figs/results/same-process-backend/fb141f8/same-process-backend-fb141f8-*-columns.json):
# on NASNet-A large's 3x3s the unrolled kernel took 3.8-4.2 us at bfloat16 batch 1 against
# 4.3-5.0 looped, and as long at float32 batch 16; on its 5x5s and 7x7s the loop was within
# 0.3-2 us of it at batch 1 and up to 36% faster on the 7x7s at stride 2 at batch 16 (32.8
# against 51.1 us), where the unrolled kernel's registers run out. Unrolled, a 3x3 compiles in
# 0.3-0.7 s, a 5x5 or 7x7 in 0.8-3.3 (the loop: 0.2-0.6 s), and the 7x7s' compiles were most of
# the workers' 13 s there: with every kernel looped, 2.5 s, the preparation 1.11x
# reduce-overhead's against 1.38x.
FORMULATIONS = ("by-size", "unrolled", "columns")
LOOP_ABOVE_TAPS = 9


def loops_columns(taps: int, formulation: str) -> bool:
    """Whether a kernel of ``taps`` taps is written with its columns a loop in ``formulation``
    (one of ``FORMULATIONS``)."""
    if formulation not in FORMULATIONS:
        raise ValueError(f"depthwise formulation {formulation!r}: expected one of {FORMULATIONS}")
    return formulation == "columns" or (formulation == "by-size" and taps > LOOP_ABOVE_TAPS)


def _taps(at: "Site") -> int:
    kh, kw = _val(at.weight).shape[2:]
    return kh * kw


def supported(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], transposed: bool, output_padding, groups: int) -> bool:
    """A 2-D depthwise convolution our kernel computes: one output channel per input channel (any
    number: its loads are as wide as the count allows), a kernel of at most ``MAX_TAPS`` taps,
    concrete sizes, float32, float16 or bfloat16 shared with the weight (and the bias), an image
    (and its output) of fewer than 2**31 elements (32-bit offsets within one)."""
    if transposed or any(output_padding) or x.dim() != 4 or weight.dim() != 4 or x.dtype not in EXACT or weight.dtype != x.dtype:
        return False
    if not all(isinstance(s, int) for s in (*x.shape, *weight.shape)):
        return False
    n, channels, height, width = x.shape
    if not (groups == channels > 1 and tuple(weight.shape[:2]) == (channels, 1) and weight.shape[2] * weight.shape[3] <= MAX_TAPS):
        return False
    if bias is not None and (tuple(bias.shape) != (channels,) or bias.dtype != x.dtype):
        return False
    return max(height * width, 1) * channels < 2**31


def candidate(node: torch.fx.Node) -> bool:
    """``aten.convolution`` of a ``supported`` depthwise convolution with integer geometry."""
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) != 9 or node.kwargs:
        return False
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    xv, wv = _val(x), _val(weight)
    bv = _val(bias) if bias is not None else None
    if xv is None or wv is None or (bias is not None and bv is None) or _val(node) is None:
        return False
    if not all(isinstance(v, int) for v in (*stride, *padding, *dilation, groups)) or not (len(stride) == len(padding) == len(dilation) == 2):
        return False
    return supported(xv, wv, bv, transposed, output_padding, groups)


@dataclass(frozen=True)
class Site:
    """What a candidate convolution computes, as our kernel takes it: the tensor it reads before
    per-channel affine ops (an inference BatchNorm), a ReLU and a zero padding, which the kernel
    applies as it loads (timm's separable convolutions: ``conv(pad(relu(x)))``, the second of a
    pair ``conv(relu(batchnorm(x)))``), those affine ops in order (each node and its other
    operand), the padding in all ([top, bottom, left, right]), and the rest of the convolution's
    geometry."""

    source: torch.fx.Node
    weight: torch.fx.Node
    bias: Optional[torch.fx.Node]
    stride: Tuple[int, int]
    padding: Tuple[int, int, int, int]
    dilation: Tuple[int, int]
    relu_input: bool
    affine: Tuple[Tuple[torch.fx.Node, torch.fx.Node], ...] = ()


def site(node: torch.fx.Node) -> Site:
    """A ``candidate``'s ``Site``: its input read through a zero ``constant_pad_nd`` of the last
    two dimensions, a ReLU and per-channel affine ops before it, where there are (they are then
    computed in our kernel; their nodes stay for any other users). An affine op is taken where it
    has no other user and its other operand is a tensor of one value per channel."""
    x, weight, bias, stride, padding, dilation, _, _, _ = node.args
    top, bottom, left, right = padding[0], padding[0], padding[1], padding[1]
    if _call(x, aten.constant_pad_nd.default) and len(x.args) >= 2 and (len(x.args) < 3 or x.args[2] == 0) and _val(x.args[0]) is not None:
        extra = x.args[1]
        if len(extra) == 4 and all(isinstance(p, int) and p >= 0 for p in extra) and _val(x.args[0]).dim() == 4:
            # (constant_pad_nd lists the last dimension first: left, right, top, bottom)
            x, left, right, top, bottom = x.args[0], left + extra[0], right + extra[1], top + extra[2], bottom + extra[3]
    relu = _call(x, aten.relu.default) and _val(x.args[0]) is not None and _val(x.args[0]).dtype == _val(x).dtype
    if relu:
        x = x.args[0]
    affine = []
    channels, dtype = _val(weight).shape[0], _val(x).dtype
    while isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target in AFFINE and len(x.args) == 2 and not x.kwargs and len(x.users) == 1:
        op, (a, b) = x, x.args
        # the chain's tensor first and a per-channel tensor second, or first where the op commutes
        if _image(a, channels, dtype) and _per_channel_tensor(b, channels, dtype):
            x, other = a, b
        elif op.target in (aten.add.Tensor, aten.mul.Tensor) and _image(b, channels, dtype) and _per_channel_tensor(a, channels, dtype):
            x, other = b, a
        else:
            break
        if affine and tuple(_val(other).shape) != tuple(_val(affine[0][1]).shape):
            break  # (operands of two shapes would broadcast to more than one value per channel)
        affine.insert(0, (op, other))
    return Site(x, weight, bias, tuple(stride), (top, bottom, left, right), tuple(dilation), relu, tuple(affine))


def sites(node: torch.fx.Node) -> List[Site]:
    """The ways our kernel can compute a ``candidate``, each measured: through what comes before
    its input (``site``), then, where that differs, the convolution as it is (its input as
    given, its own padding; the plain site, last): the prologue's extra arithmetic at every tap
    may cost more than it spares at some shapes."""
    through = site(node)
    x, weight, bias, stride, padding, dilation, _, _, _ = node.args
    plain = Site(x, weight, bias, tuple(stride), pads(padding), tuple(dilation), False)
    return [through] if through == plain else [through, plain]


def _call(node, target) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


def _image(node, channels: int, dtype) -> bool:
    """A node computing an [N, channels, H, W] tensor of ``dtype``."""
    value = _val(node)
    return value is not None and value.dim() == 4 and value.shape[1] == channels and value.dtype == dtype


def _per_channel_tensor(node, channels: int, dtype) -> bool:
    """A node computing one value of ``dtype`` per channel, broadcast over an image."""
    return isinstance(node, torch.fx.Node) and per_channel(node, channels, dtype)


def replace_depthwise(gm: torch.fx.GraphModule, measure, chooser=None) -> Dict[str, int]:
    """Every ``candidate`` convolution of ``gm`` for which ``chooser`` (``choose``), given each of its
    ``sites`` and ``measure``'s ``Timing`` of it (False where it could not be measured), picks a
    site and tile, replaced in place by ``nimble::depthwise_conv2d`` in that tile, reading that
    site's source, over the weight laid out tap by tap in the graph; counts of those replaced
    (and of those that read through a padding, a ReLU or a BatchNorm), those cuDNN's convolution
    was kept for, measured faster (``slower``), and those it could not measure (a site gave
    False, and no choice)."""
    from torch._guards import detect_fake_mode

    graph = gm.graph
    counts = {"replaced": 0, "slower": 0}
    for node in [n for n in graph.nodes if candidate(n)]:
        timed = [(at, measure(at)) for at in sites(node)]
        picked = (chooser or choose)(node, timed)
        if picked is None:
            outcome = "unmeasured" if any(t is False for _, t in timed) else "slower"
            counts[outcome] = counts.get(outcome, 0) + 1
            continue
        at, tile = picked
        fake_mode = detect_fake_mode([_val(at.source), _val(at.weight)])
        if fake_mode is None:
            continue
        build = AffineBuilder(graph, node, fake_mode)
        channels, _, kh, kw = _val(at.weight).shape
        taps = build.add(aten.clone.default, build.add(aten.permute.default, build.add(aten.view.default, at.weight, [channels, kh * kw]), [1, 0]), memory_format=torch.contiguous_format)
        scale, shift = _affine_terms(build, at.affine, channels)
        substitute(graph, node, build.add(op(), at.source, taps, at.bias, scale, shift, [kh, kw], list(at.stride), list(at.padding), list(at.dilation), at.relu_input, list(tile)))
        counts["replaced"] += 1
        if at.relu_input or at.affine or at.padding != pads(node.args[4]):
            counts["prologue"] = counts.get("prologue", 0) + 1
        if at.affine:
            counts["affine_prologue"] = counts.get("affine_prologue", 0) + 1
    if counts["replaced"]:
        # the paddings and ReLUs only the replaced convolutions read
        graph.eliminate_dead_code()
    recompile_if(gm, counts["replaced"])
    return counts


def choose(node: torch.fx.Node, timed: List[Tuple["Site", Any]]) -> Optional[Tuple["Site", Tuple[int, ...]]]:
    """The site and tile our kernel computes ``node`` in, from each of its ``sites`` and its
    ``Timing`` (False where it failed), or None to keep cuDNN's convolution: the cheapest,
    where it takes at most ``MARGIN`` of what cuDNN's does. Reading through what comes before
    the convolution spares the tensor the convolution reads where nothing else reads it (its
    input node has no other user): that tensor's write then counts beside cuDNN's convolution
    and the kernel reading it as given (the plain site, last), so that a kernel reading
    through, slower than cuDNN's convolution alone, is still taken where it is faster than the
    convolution and the write it spares together."""
    measured = [(at, t) for at, t in timed if t]
    if not measured:
        return None
    plain_at, plain = timed[-1]
    spared = plain.write_us if len(timed) > 1 and plain and len(node.args[0].users) == 1 else 0.0
    cudnn = (plain or measured[0][1]).cudnn_us + spared
    options = [(t.kernel_us + (spared if at is plain_at else 0.0), at, t.tile) for at, t in measured if t.tile is not None]
    if not options:
        return None
    cost, at, tile = min(options, key=lambda option: option[0])
    return (at, tile) if cost <= MARGIN * cudnn else None


def _affine_terms(build: AffineBuilder, affine, channels: int):
    """The per-channel factor and term ([C] vectors, or None for 1 and 0) of ``affine`` (a
    site's ops, each node and its per-channel operand), composed op by op in the graph from the
    operands as they are on every call."""
    scale, shift = build.compose(affine)
    flat = lambda term: None if term is None else build.add(aten.view.default, term, [channels])
    return flat(scale), flat(shift)


def rewrite(gm: torch.fx.GraphModule, formulation: str = "by-size") -> Dict[str, Any]:
    """Option ``depthwise_kernels`` on ``gm`` (the kernel written as ``formulation`` gives, one
    of ``FORMULATIONS``), each shape measured on the GPU (one whose
    measurement fails stays cuDNN's, announced once per shape): its counts and, under
    ``shapes``, each distinct site's measurement (input, kernel, stride, padding, what it reads
    through, cuDNN's microseconds, the fastest tile's, each tile's in ``tiles``' order, the
    write's, that tile or None, and how many convolutions took it), the seconds its variants
    took to compile ahead (cuDNN's convolutions and the writes timed meanwhile, in ``baselines``
    seconds) and the measurements and rewrite after them, or, where the pass fails, the reason,
    announced once (the convolutions it had not reached stay cuDNN's)."""
    shapes: Dict[tuple, Dict[str, Any]] = {}

    def measured(at: Site):
        x, weight = _val(at.source), _val(at.weight)
        try:
            found = timing(at, column_loop=loops_columns(_taps(at), formulation))
        except Exception as error:  # noqa: BLE001 - that convolution stays cuDNN's
            warn_once(("depthwise", _key(at)), f"nimble backend: our depthwise kernel could not be measured on the convolution of input {list(x.shape)}, weight {list(weight.shape)} ({type(error).__name__}: {error}); it runs as Inductor compiles it")
            return False
        shapes.setdefault(_key(at), {"input": list(x.shape), "kernel": list(weight.shape[2:]), "stride": list(at.stride), "padding": list(at.padding), "affine_input": bool(at.affine), "relu_input": at.relu_input, "cudnn_us": round(found.cudnn_us, 2), "fastest_us": round(found.kernel_us, 2), "tile_us": [round(us, 2) for us in found.tile_us], "write_us": round(found.write_us, 2), "tile": None if found.tile is None else list(found.tile), "taken": 0})
        return found

    def taking(node, timed):
        picked = choose(node, timed)
        if picked is not None:
            shapes[_key(picked[0])]["taken"] += 1
        return picked

    def replaced() -> Dict[str, Any]:
        started = time.perf_counter()
        wanted = variants(gm, formulation)
        pending = start_ahead(wanted) if wanted else None
        try:
            # (while the variants compile: what needs none of them)
            for at in (at for node in gm.graph.nodes if candidate(node) for at in sites(node)):
                try:
                    baseline(at)
                except Exception:  # noqa: BLE001 - measured (and announced) with the rest below
                    pass
            based = time.perf_counter()
        finally:
            ahead = pending.finish() if pending is not None else {}
        compiled = time.perf_counter()
        counts = replace_depthwise(gm, measured, taking)
        seconds = {"compile_ahead": round(compiled - started, 2), "baselines": round(based - started, 2), "measure_and_rewrite": round(time.perf_counter() - compiled, 2)}
        return {**counts, **ahead, "seconds": seconds}

    counts = guarded(gm, "depthwise_kernels", "depthwise convolutions", replaced)
    return {**counts, "shapes": list(shapes.values())} if shapes else counts


def variants(gm: torch.fx.GraphModule, formulation: str = "by-size") -> List[tuple]:
    """The kernel's compile-time variants the measurements of ``gm``'s candidates may run (each
    of their ``sites``, the kernel written as ``formulation`` gives):
    (device, dtype, bias or not, (factor or not, term or not), kernel size, stride, padding
    above and to the left, dilation, ReLU or not, tile, vector width), each once, for every tile
    measured."""
    found = []
    for at in (at for node in gm.graph.nodes if candidate(node) for at in sites(node)):
        x = _val(at.source)
        kh, kw = _val(at.weight).shape[2:]
        for tile in tiles(_taps(at), loops_columns(_taps(at), formulation)):
            spec = (x.device, x.dtype, at.bias is not None, _affine_kinds(at.affine), (kh, kw), at.stride, (at.padding[0], at.padding[2]), at.dilation, at.relu_input, tuple(tile), vector_width(x.shape[1]))
            if spec not in found:
                found.append(spec)
    return found
