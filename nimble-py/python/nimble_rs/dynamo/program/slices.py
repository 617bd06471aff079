"""Parts of one buffer: which elements a strided view of an allocated tensor covers, as a box of
index ranges in the tensor's own index space, so that writes of disjoint parts (the slices an
Inductor join is written into, one kernel each: option ``concat_in_place``) need not follow
each other. Only what can be proved is a part: a view with the buffer's own strides whose
offset is a whole index in them, over a buffer whose layout maps indices to memory one to one;
anything else is the whole buffer (``None``), which overlaps everything."""

import ast
from typing import Optional, Sequence, Tuple

from .signatures import dotted

Box = Tuple[Tuple[int, int], ...]
# A part: the buffer's layout (sizes, strides) and the box of it.
Part = Tuple[Tuple[Tuple[int, ...], Tuple[int, ...]], Box]


def one_to_one(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no two indices of a tensor of these sizes and strides share memory: its
    dimensions longer than one, by increasing stride, each step past the previous one's
    extent."""
    dims = sorted((d for d in range(len(sizes)) if sizes[d] > 1), key=lambda d: strides[d])
    reach = 1
    for d in dims:
        if strides[d] < reach:
            return False
        reach = strides[d] * sizes[d]
    return True


def sub_box(sizes: Sequence[int], strides: Sequence[int], view_sizes: Sequence[int], view_strides: Sequence[int], offset: int) -> Optional[Box]:
    """The box of the buffer (``sizes``, ``strides``) that the view (``view_sizes``,
    ``view_strides``, ``offset`` in elements) covers, where that is a proper part of it; None
    where it is the whole buffer or cannot be proved a box."""
    n = len(sizes)
    if len(strides) != n or len(view_sizes) != n or len(view_strides) != n or offset < 0:
        return None
    if any(s <= 0 for s in view_sizes) or not one_to_one(sizes, strides):
        return None
    if any(view_sizes[d] > 1 and view_strides[d] != strides[d] for d in range(n)):
        return None
    start = [0] * n
    rest = offset
    for d in sorted((d for d in range(n) if sizes[d] > 1), key=lambda d: -strides[d]):
        start[d], rest = divmod(rest, strides[d])
    if rest:
        return None
    box = tuple((start[d], start[d] + view_sizes[d]) for d in range(n))
    if any(hi > sizes[d] for d, (_, hi) in enumerate(box)):
        return None
    if all(lo == 0 and hi == sizes[d] for d, (lo, hi) in enumerate(box)):
        return None
    return box


def part(sizes: Sequence[int], strides: Sequence[int], view_sizes: Sequence[int], view_strides: Sequence[int], offset: int) -> Optional[Part]:
    """``sub_box`` with the layout its indices are in: parts are compared only within one
    layout (a buffer Inductor reuses under another shape has two)."""
    box = sub_box(sizes, strides, view_sizes, view_strides, offset)
    return None if box is None else ((tuple(sizes), tuple(strides)), box)


def overlap(a: Optional[Part], b: Optional[Part]) -> bool:
    """Whether two parts (None: the whole buffer) may share an element."""
    if a is None or b is None or a[0] != b[0]:
        return True
    return all(max(a_lo, b_lo) < min(a_hi, b_hi) for (a_lo, a_hi), (b_lo, b_hi) in zip(a[1], b[1]))


def within(a: Optional[Part], b: Optional[Part]) -> bool:
    """Whether part ``a`` certainly lies in part ``b`` (None: the whole buffer)."""
    if b is None:
        return True
    if a is None or a[0] != b[0]:
        return False
    return all(b_lo <= a_lo and a_hi <= b_hi for (a_lo, a_hi), (b_lo, b_hi) in zip(a[1], b[1]))


def _ints(value) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, int) for v in value)


def literal_layout(call: ast.Call) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """(sizes, strides) of Inductor's ``empty_strided_*((sizes), (strides), dtype)`` where both
    are written as integers."""
    if not dotted(call.func).split(".")[-1].startswith("empty_strided") or len(call.args) < 2:
        return None
    try:
        sizes, strides = ast.literal_eval(call.args[0]), ast.literal_eval(call.args[1])
    except (ValueError, TypeError, SyntaxError):
        return None
    return (sizes, strides) if _ints(sizes) and _ints(strides) and len(sizes) == len(strides) else None


def literal_view(call: ast.Call) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...], int]]:
    """(sizes, strides, offset) of ``reinterpret_tensor(base, (sizes), (strides), offset)``
    where all are written as integers."""
    if len(call.args) != 4:
        return None
    try:
        sizes, strides, offset = (ast.literal_eval(a) for a in call.args[1:])
    except (ValueError, TypeError, SyntaxError):
        return None
    return (sizes, strides, offset) if _ints(sizes) and _ints(strides) and isinstance(offset, int) else None
