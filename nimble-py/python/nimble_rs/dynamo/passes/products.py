"""A matrix product of few rows by a wide weight, transposed where that is measured faster
(option ``transpose_products``): ``addmm(bias, x, w.t())`` (how a Linear layer reaches
Inductor, which calls cuBLAS with it) computed as ``(w @ x.t()).t() + bias``, the sum and the
layout back to row-major in one pointwise kernel Inductor fuses.

A classifier at batch 16 in float32 is such a product: cuBLAS takes 61-88 us for Inception-v4's,
Inception-v3's and NASNet-A large's (16 rows by 1536-4032 columns into 1000) and 13-23 us for
the same product transposed (`experiments/python/probes/conv_layout_probe.py`), at the end of the call
where nothing runs beside it. The same arithmetic in the same precision, summed in another order
(about 3e-7 of the largest output apart). Each shape is measured once on the GPU, both ways in a
CUDA graph of repeats, and rewritten where the transposed one takes at most ``MARGIN`` of the
other's time."""

from typing import Any, Callable, Dict, Optional

import torch
import torch.fx

from ..common.announce import warn_once
from .fxnodes import Builder, cuda_device, guarded, recompile_if, substitute
from .fxnodes import value as _val
from ..common.timing import graph_us

aten = torch.ops.aten

# The transposed product is used where it takes at most this share of the product as called.
MARGIN = 0.8
# Products of more rows are left as they are, unmeasured (cuBLAS's kernels fill the GPU there).
MAX_ROWS = 256


def candidate(node: torch.fx.Node) -> bool:
    """``addmm(bias, x, w)`` with a 1-D bias, or ``mm(x, w)``, of 2-D floating tensors of
    concrete sizes, fewer rows than columns and at most ``MAX_ROWS`` rows, no other arguments."""
    if node.op != "call_function" or node.kwargs:
        return False
    if node.target is aten.addmm.default and len(node.args) == 3:
        bias, x, w = node.args
        bv = _val(bias)
        if bv is None or bv.dim() != 1:
            return False
    elif node.target is aten.mm.default and len(node.args) == 2:
        x, w = node.args
        bv = None
    else:
        return False
    xv, wv, out = _val(x), _val(w), _val(node)
    if xv is None or wv is None or out is None or xv.dim() != 2 or wv.dim() != 2 or not xv.is_floating_point():
        return False
    if not all(isinstance(s, int) for s in (*xv.shape, *wv.shape, *xv.stride(), *wv.stride())):
        return False
    if any(stride == 0 and size > 1 for t in (xv, wv) for size, stride in zip(t.shape, t.stride())):
        return False  # a broadcast operand: not measured (random values cannot fill it)
    if bv is not None and (bv.shape[0] != wv.shape[1] or bv.dtype != xv.dtype):
        return False
    rows, columns = xv.shape[0], wv.shape[1]
    return wv.dtype == xv.dtype and rows <= MAX_ROWS and rows < columns and out.is_contiguous()


def transpose_products(gm: torch.fx.GraphModule, pays: Callable[..., bool]) -> Dict[str, int]:
    """Every ``candidate`` product of ``gm`` that ``pays`` (given x, w and the bias or None,
    their fake values) rewritten in place as the transposed product; counts of those rewritten,
    those measured slower and (``unmeasured``, where any) those ``pays`` could not measure
    (it returned None)."""
    from torch._guards import detect_fake_mode

    graph = gm.graph
    counts = {"transposed": 0, "slower_transposed": 0}
    for node in [n for n in graph.nodes if candidate(n)]:
        bias, x, w = node.args if node.target is aten.addmm.default else (None, *node.args)
        fake_mode = detect_fake_mode([_val(x), _val(w)])
        if fake_mode is None:
            continue
        verdict = pays(_val(x), _val(w), _val(bias) if bias is not None else None)
        if verdict is None:
            counts["unmeasured"] = counts.get("unmeasured", 0) + 1
            continue
        if not verdict:
            counts["slower_transposed"] += 1
            continue
        build = Builder(graph, node, fake_mode)
        product = build.add(aten.mm.default, build.add(aten.permute.default, w, [1, 0]), build.add(aten.permute.default, x, [1, 0]))
        result = build.add(aten.permute.default, product, [1, 0])
        if bias is not None:
            result = build.add(aten.add.Tensor, result, bias)
        substitute(graph, node, build.add(aten.clone.default, result, memory_format=torch.contiguous_format))
        counts["transposed"] += 1
    recompile_if(gm, counts["transposed"])
    return counts


def rewrite(gm: torch.fx.GraphModule) -> Dict[str, Any]:
    """Option ``transpose_products`` on ``gm``, each product measured on the GPU (one whose
    measurement fails is left as it is, announced once per shape): its counts, or, where the
    pass fails, the reason, announced once (the products it had not reached stay as they
    were)."""

    def measured(x, w, bias) -> Optional[bool]:
        try:
            return pays_on_gpu(x, w, bias)
        except Exception as error:  # noqa: BLE001 - that product stays cuBLAS's as called
            warn_once(("products", tuple(x.shape), tuple(w.shape)), f"nimble backend: the product of {list(x.shape)} by {list(w.shape)} could not be measured transposed ({type(error).__name__}: {error}); it runs as Inductor compiles it")
            return None

    return guarded(gm, "transpose_products", "products", lambda: transpose_products(gm, measured))


_MEASURED: Dict[tuple, bool] = {}


def pays_on_gpu(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    """Whether the transposed product takes at most ``MARGIN`` of the product as Inductor calls
    it (``addmm`` or ``mm`` on tensors of these sizes and strides), measured once per shape on
    random tensors, each way in a CUDA graph of repeats."""
    key = (tuple(x.shape), tuple(x.stride()), tuple(w.shape), tuple(w.stride()), bias is not None, x.dtype, x.device)
    if key in _MEASURED:
        return _MEASURED[key]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        device = cuda_device(x)
        xr = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=device).normal_()
        wr = torch.empty_strided(tuple(w.shape), tuple(w.stride()), dtype=w.dtype, device=device).normal_()
        br = torch.randn(w.shape[1], dtype=x.dtype, device=device) if bias is not None else None
        out = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=device)
        if br is not None:
            called = graph_us(lambda: torch.addmm(br, xr, wr), device)
            transposed = graph_us(lambda: torch.add(torch.mm(wr.t(), xr.t()).t(), br, out=out), device)
        else:
            called = graph_us(lambda: torch.mm(xr, wr), device)
            transposed = graph_us(lambda: out.copy_(torch.mm(wr.t(), xr.t()).t()), device)
        del xr, wr, br, out
    _MEASURED[key] = transposed <= MARGIN * called
    return _MEASURED[key]
