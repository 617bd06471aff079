"""What ``torch.jit.trace`` records for a count read from a shape, set right while tracing.

The tracer hands a shape read inside the forward (``n, _ = w.shape``) on as a 0-dim CPU tensor,
so ``torch.repeat_interleave(x, n, dim)`` reaches the overload that takes a tensor of repeats,
with those on the CPU: for ``x`` on a GPU it fails (``index_select``: "index is on cpu"), and on
a GPU the overload reads the repeats' sum back on the host, a synchronization no CUDA graph can
hold. torchvision's MViT-v1-B builds its positional encoding so. While tracing, such a count is
passed as the number it holds, but only when the tracer's record shows it computed from shapes
alone (sizes, constants and arithmetic on them), which a trace fixes anyway; a count computed
from the data keeps its tensor, so the trace still follows the data.

Used by ``nimble_rs.Nimble`` (tracing a plain module) and by the TorchScript exporter
(``experiments/python/export_torchscript.py``), which loads this file by its path: it imports
nothing of ``nimble_rs``.
"""

import contextlib
import warnings
from typing import Any, Iterator

import torch

# Ops whose result is a tensor's metadata, not its data.
_SHAPE_READS = frozenset({"aten::size", "aten::dim", "aten::numel", "aten::len"})
# Ops whose result follows from their inputs alone: shape-only when every input is.
_ARITHMETIC = frozenset({
    "prim::NumToTensor", "aten::Int", "aten::ScalarImplicit", "prim::ListConstruct", "prim::TupleConstruct",
    "prim::TupleIndex", "prim::ListUnpack", "prim::TupleUnpack", "aten::__getitem__",
    "aten::add", "aten::sub", "aten::mul", "aten::div", "aten::floordiv", "aten::floor_divide",
    "aten::remainder", "aten::neg", "aten::to",
})


def from_shapes(value: Any) -> bool:
    """Whether the traced value ``value`` (a ``torch._C.Value``) is computed from tensor shapes
    and constants only."""
    pending, seen = [value], set()
    while pending:
        node = pending.pop().node()
        if node in seen:
            continue
        seen.add(node)
        kind = node.kind()
        if kind in _SHAPE_READS or kind == "prim::Constant":
            continue
        if kind not in _ARITHMETIC:
            return False
        pending.extend(node.inputs())
    return True


def count_from_shapes(count: Any) -> bool:
    """Whether ``count`` is a 0-dim integer tensor the running trace computed from shapes."""
    if not (isinstance(count, torch.Tensor) and count.dim() == 0 and not count.is_floating_point() and torch.jit.is_tracing()):
        return False
    try:
        return from_shapes(torch._C._get_value_trace(count))
    except RuntimeError:  # a tensor the trace did not make (a constant from outside)
        return False


def _with_counts(original):
    def repeat_interleave(input, repeats=None, *args, **kwargs):
        if count_from_shapes(repeats):
            # The tracer warns that the number becomes a constant: for a count from shapes, it is.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                repeats = int(repeats)
        return original(input, *args, **kwargs) if repeats is None else original(input, repeats, *args, **kwargs)

    repeat_interleave.__wrapped__ = original
    return repeat_interleave


@contextlib.contextmanager
def counts_from_shapes() -> Iterator[None]:
    """While it is open, ``torch.repeat_interleave`` and ``Tensor.repeat_interleave`` given a
    count the trace computed from shapes receive it as a number (see the module's text)."""
    function, method = torch.repeat_interleave, torch.Tensor.repeat_interleave
    torch.repeat_interleave, torch.Tensor.repeat_interleave = _with_counts(function), _with_counts(method)
    try:
        yield
    finally:
        torch.repeat_interleave, torch.Tensor.repeat_interleave = function, method
