"""A convolution with its per-channel scale, bias and ReLU in the kernel's epilogue, through
cuDNN's graph API (NVIDIA's ``nvidia-cudnn-frontend`` package, optional:
``pip install nimble_rs[cudnn]``): option ``fuse_convolutions="epilogue"`` (``fold``).

Unlike the folded fusion (``torch.cudnn_convolution_relu`` over weights scaled by the
BatchNorm), the weights are the model's own: the convolution rounds them to TF32 as eager's does,
and the scale and bias are applied in float32 to its float32 result, so the output is eager's
convolution + BatchNorm + ReLU but for the order of float32 sums (measured about 1e-7 of the
output's largest magnitude, `experiments/python/probes/cudnn_graph_probe.py`). cuDNN offers several
plans (engines) per shape; the first is often slower than the convolution and Inductor's
BatchNorm-ReLU kernel, so every shape's plans are built and timed once (``tune``), the fastest
kept, and the shape is fused only where that plan is faster than the convolution and a
pointwise pass after it, and its output matches the unfused arithmetic within ``EXACT``.

The op ``nimble::conv_scale_bias_relu`` is defined when this module is imported (with the
backend), so that a program Inductor cached with it finds it; off CUDA, or for a shape never
tuned, it computes the same thing by ATen ops (every shape the backend fuses was tuned first).
"""

import atexit
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..common.timing import graph_us

# The largest difference a fused shape may show from the unfused arithmetic (ATen's convolution,
# then the scale, the bias and the ReLU), relative to the output's largest magnitude: float32
# sums in another order, not TF32 roundings of other numbers (about 3e-4 at these shapes).
EXACT = 1e-5
# The plans of cuDNN's ranked list built and timed per shape (on Inception-v4's and -v3's
# convolutions the fastest of the first eight was always among the first five; H200, 1.32.0).
PLANS = 5
# A plan within this factor of the convolution alone ends the search (``tune``).
ENOUGH = 1.02


@torch.library.custom_op("nimble::conv_scale_bias_relu", mutates_args=())
def conv_scale_bias_relu(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, stride: List[int], padding: List[int], dilation: List[int]) -> torch.Tensor:
    """relu(conv2d(x, weight) * scale + bias), ``scale`` and ``bias`` one value per output
    channel; the output channels-last. On CUDA the tuned cuDNN graph of the shape."""
    if not x.is_cuda:
        return reference(x, weight, scale, bias, stride, padding, dilation)
    fused = _TUNED.get(_key(x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, x.device, stride, padding, dilation))
    if fused is None:
        # Strides other than those tuned at compile time (Inductor's padding, say): tuned now,
        # at a warm-up call, before the program is captured.
        fused = tune(tuple(x.shape), tuple(x.stride()), tuple(weight.shape), tuple(weight.stride()), x.dtype, x.device, stride, padding, dilation, lambda run: graph_us(run, x.device))
    if fused.plan is None:
        return reference(x, weight, scale, bias, stride, padding, dilation)
    return fused.run(x, weight, scale, bias)


@conv_scale_bias_relu.register_fake
def _(x, weight, scale, bias, stride, padding, dilation):
    return channels_last_output(x, weight, stride, padding, dilation)


def channels_last_output(x, weight, stride, padding, dilation) -> torch.Tensor:
    """An empty channels-last tensor of the convolution's output shape (real or fake, as ``x``)."""
    n, _, h, w = x.shape
    o, _, kh, kw = weight.shape
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return torch.empty_strided((n, o, ho, wo), (ho * wo * o, 1, wo * o, o), dtype=x.dtype, device=x.device)


def reference(x, weight, scale, bias, stride, padding, dilation) -> torch.Tensor:
    """The unfused arithmetic by ATen ops, channels-last."""
    channels = weight.shape[0]
    y = F.conv2d(x, weight, None, stride, padding, dilation) * scale.view(1, channels, 1, 1) + bias.view(1, channels, 1, 1)
    return torch.relu(y).contiguous(memory_format=torch.channels_last)


def _key(x_shape, x_stride, w_shape, w_stride, dtype, device, stride, padding, dilation) -> tuple:
    """What a tuned graph is kept under. The stride of a dimension of size 1 addresses nothing,
    so it is left out: a 1x1 weight Inductor passes contiguous, (C, 1, 1, 1), is the channels-last
    one tuned at compile time, (C, 1, C, C) (seen tuned a second time at the first call)."""
    used = lambda shape, strides: tuple(st if n != 1 else None for n, st in zip(shape, strides))
    return (tuple(x_shape), used(x_shape, x_stride), tuple(w_shape), used(w_shape, w_stride), dtype, torch.device(device), tuple(stride), tuple(padding), tuple(dilation))


def available() -> Optional[str]:
    """None where cuDNN's graph API can be used here, else why not."""
    try:
        import cudnn  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any failure to load means: not available
        return f"the package nvidia-cudnn-frontend is not importable ({type(error).__name__}: {error}); pip install nimble_rs[cudnn]"
    return None


_HANDLES: Dict[int, Any] = {}


def _handle(device: torch.device):
    import cudnn

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _HANDLES:
        with torch.cuda.device(index):
            _HANDLES[index] = cudnn.create_handle()
    return _HANDLES[index]


@dataclass
class Fused:
    """One shape's cuDNN graph, the plans of its ranked list to try, those built (with their
    workspace bytes), and the plan kept (None: not fused, ``why``)."""

    graph: Any
    tensors: Tuple[Any, ...]
    handle: Any
    candidates: List[int]
    geometry: tuple = ()
    built: Dict[int, int] = field(default_factory=dict)
    plan: Optional[int] = None
    why: str = ""
    times: Dict[str, float] = field(default_factory=dict)

    def build(self, plan: int) -> None:
        self.graph.build_plan_at_index(plan)
        self.built[plan] = self.graph.get_workspace_size_plan_at_index(plan)

    def run(self, x, weight, scale, bias, plan: Optional[int] = None) -> torch.Tensor:
        import cudnn

        plan = self.plan if plan is None else plan
        channels = weight.shape[0]
        out = channels_last_output(x, weight, *self.geometry)
        workspace = torch.empty(max(self.built[plan], 1), dtype=torch.uint8, device=x.device)
        cudnn.set_stream(self.handle, torch.cuda.current_stream(x.device).cuda_stream)
        tx, tw, ts, tb, ty = self.tensors
        pack = {tx: x, tw: weight, ts: scale.contiguous().view(1, channels, 1, 1), tb: bias.contiguous().view(1, channels, 1, 1), ty: out}
        self.graph.execute_plan_at_index(pack, workspace, index=plan, handle=self.handle)
        return out


def _build(x, weight, scale, bias, stride, padding, dilation) -> Fused:
    """The graph relu(conv(x, weight) * scale + bias) for these tensors' shapes and strides, in
    float32 (TF32 where PyTorch allows it for cuDNN's convolutions, as eager's), the first
    ``PLANS`` plans of cuDNN's ranked list its candidates (built as they are tried)."""
    import cudnn

    handle = _handle(x.device)
    kind = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=kind, intermediate_data_type=kind, compute_data_type=kind, handle=handle, is_cuda_graph_replay_expected=True)
    tx, tw, ts, tb = (graph.tensor_like(t) for t in (x, weight, scale, bias))
    y = graph.conv_fprop(image=tx, weight=tw, padding=list(padding), stride=list(stride), dilation=list(dilation), compute_data_type=kind)
    y = graph.relu(input=graph.bias(input=graph.scale(input=y, scale=ts), bias=tb))
    y.set_output(True).set_data_type(kind)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    if not torch.backends.cudnn.allow_tf32:
        # Eager's convolutions are full float32 then: so are the fused ones.
        graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
    graph.check_support()
    candidates = list(range(min(graph.get_execution_plan_count(), PLANS)))
    return Fused(graph, (tx, tw, ts, tb, y), handle, candidates, (tuple(stride), tuple(padding), tuple(dilation)))


_TUNED: Dict[tuple, Fused] = {}


@atexit.register
def _release() -> None:
    """cuDNN's graphs and handles let go before the interpreter tears its modules down (held
    then, the package's bindings report them as leaks)."""
    _TUNED.clear()
    _HANDLES.clear()


def _difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest difference relative to the largest magnitude of ``expected``."""
    return ((got.double() - expected.double()).abs().max() / expected.double().abs().max().clamp_min(1e-30)).item()


def _choose(fused: Fused, times: Dict[int, float], unfused: float, difference) -> None:
    """Keeps the fastest of the timed plans (microseconds by plan) whose output is within
    ``EXACT`` of the unfused arithmetic (``difference(plan)``), if it beats ``unfused``; else
    says why not. ``times["difference"]`` is the kept plan's difference, or the fastest's."""
    for plan in sorted(times, key=times.get):
        found = difference(plan)
        fused.times.setdefault("difference", found)
        if found <= EXACT:
            fused.times["difference"] = found
            if times[plan] >= unfused:
                fused.why = f"slower: {times[plan]:.1f} us fused against {unfused:.1f} us unfused"
            else:
                fused.plan = plan
            return
    fused.why = f"cuDNN's output differs from the unfused arithmetic by {fused.times['difference']:.1e} of its largest value in every plan timed (at most {EXACT:.0e} allowed)"


def tune(x_shape, x_stride, w_shape, w_stride, dtype, device, stride, padding, dilation, timer) -> Fused:
    """The graph of a convolution of input and weight of these shapes and strides on ``device``
    (a CUDA device with its index), built once: its plans timed (``timer(run) -> microseconds``)
    on random tensors, the fastest kept where it beats the convolution followed by one pointwise
    pass over its output (Inductor's BatchNorm-ReLU kernel reads and writes as much) and matches
    the unfused arithmetic within ``EXACT``; else ``plan`` None and ``why``. Plans are built
    (cuDNN compiles some: most of the time this takes) and timed in cuDNN's order, until one
    takes at most ``ENOUGH`` times the convolution alone: none would gain more than that."""
    key = _key(x_shape, x_stride, w_shape, w_stride, dtype, device, stride, padding, dilation)
    if key in _TUNED:
        return _TUNED[key]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    started = time.perf_counter()
    channels = w_shape[0]
    with unset_fake_temporarily(), torch.no_grad():
        x = torch.empty_strided(tuple(x_shape), tuple(x_stride), dtype=dtype, device=device).normal_()
        weight = torch.empty_strided(tuple(w_shape), tuple(w_stride), dtype=dtype, device=device).normal_()
        scale = torch.rand(channels, dtype=dtype, device=device) + 0.5
        bias = torch.randn(channels, dtype=dtype, device=device)
        try:
            fused = _build(x, weight, scale.view(1, channels, 1, 1), bias.view(1, channels, 1, 1), stride, padding, dilation)
        except Exception as error:  # noqa: BLE001 - cuDNN has no graph for it: not fused
            fused = Fused(None, (), None, [], why=f"no cuDNN graph ({type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''})")
            _TUNED[key] = fused
            return fused
        geometry = (list(stride), list(padding), list(dilation))
        alone = timer(lambda: F.conv2d(x, weight, None, *geometry))
        unfused = timer(lambda: torch.clamp_min(F.conv2d(x, weight, None, *geometry), 0))
        times, failure = {}, ""
        for plan in fused.candidates:
            try:
                fused.build(plan)
                times[plan] = timer(lambda plan=plan: fused.run(x, weight, scale, bias, plan))
            except Exception as error:  # noqa: BLE001 - a plan that fails to build or run is no candidate
                failure = failure or f" (the first failure: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''})"
                continue
            if times[plan] <= ENOUGH * alone:
                break
        fused.times = {"alone_us": alone, "unfused_us": unfused, **{f"plan_{p}_us": t for p, t in times.items()}}
        if not times:
            fused.why = f"none of cuDNN's first {len(fused.candidates)} plans ran{failure}"
        else:
            _choose(fused, times, unfused, lambda plan: _difference(fused.run(x, weight, scale, bias, plan), reference(x, weight, scale, bias, *geometry)))
    fused.times["tune_seconds"] = time.perf_counter() - started
    _TUNED[key] = fused
    return fused
