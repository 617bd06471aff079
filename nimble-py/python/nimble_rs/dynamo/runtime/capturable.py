"""What decides whether a graph can be one CUDA graph, and in what order its kernels must run:
ops that make the host wait, mixed devices, Inductor's programmatic dependent launch, and the
inputs whose addresses are fixed (parameters and buffers)."""

import warnings
from typing import Any, Optional, Sequence

import torch
import torch.fx

from ..program.taskgraph import op_name

# Ops that make the host wait for the device: a CUDA graph cannot contain them.
HOST_SYNC_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::item", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::repeat_interleave", "aten::_assert_async"}


def static_indices() -> set:
    """The graph inputs that are parameters and buffers (their addresses are fixed): read in
    place, never copied."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(metadata, "static_input_indices", None)
    return set(indices) if indices is not None else set()


def why_uncapturable(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Optional[str]:
    """Why the graph cannot be one CUDA graph, if it cannot: an op that syncs with the host, a
    CPU tensor among CUDA ones, or no CUDA tensor at all."""
    devices = set()
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            devices.add(x.device.type)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            name = op_name(node)
            if name in HOST_SYNC_OPS:
                return f"{name} synchronizes with the host"
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor):
                devices.add(value.device.type)
    if "cuda" not in devices:
        return None
    if devices - {"cuda"}:
        return f"it mixes CUDA with {', '.join(sorted(devices - {'cuda'}))} tensors"
    return None


def announce_uncapturable(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Optional[str]:
    """Why the graph cannot be captured (``why_uncapturable``), warned once per graph (it is
    compiled once): such a graph still runs, as its compiled regions without a CUDA graph."""
    reason = why_uncapturable(gm, example_inputs)
    if reason is not None:
        warnings.warn(f"nimble backend: a graph runs as compiled regions without a CUDA graph: {reason}", RuntimeWarning, stacklevel=3)
    return reason


def programmatic_launch(on_cuda: bool) -> Optional[str]:
    """Why Inductor's kernels must run in Inductor's order, or None. With Inductor's
    programmatic dependent launch (``triton.enable_pdl``, on Hopper and later GPUs, as Inductor
    decides it) a kernel starts before the kernel launched before it on its stream ends, and it
    waits for that one before its first load only if it reads what the kernel before it in
    Inductor's order writes. On a stream of a plan (or with kernels set aside) the kernel before
    it may be another one, whose output it reads before it is written. (Granularity "regions"
    is not affected: a region's first kernel always waits.)"""
    from torch._inductor import config as inductor_config

    if not (on_cuda and inductor_config.triton.enable_pdl and torch.cuda.get_device_capability()[0] >= 9):
        return None
    return (
        "Inductor's programmatic dependent launch is on (triton.enable_pdl): its kernels may read before the kernel before them "
        "in its own order ends, which only that order makes safe, so Inductor's program runs as it is, on one stream"
    )
