"""Concatenations written in place (option ``concat_in_place``): each input of a concatenation
computed by its own kernel straight into its slice of the output, where Inductor on a GPU
would compute the whole concatenation in one pointwise kernel that loads from every input.

An Inception block ends in such a concatenation: each branch's last convolution, its
BatchNorm and ReLU, the four branches joined along the channels. Inductor fuses the four
BatchNorm-ReLUs and the join into one kernel, which starts only once every branch has
finished, and whose masked loads from four inputs run it at about 1.1 TB/s where the same
BatchNorm-ReLU alone runs at 2.4-4 TB/s (the committed fused-kernel graphs of Inception-v4,
Inception-v3 and GoogLeNet at batch 16, H100). Written in place, each branch's part starts when
its branch ends, on the branch's stream. Inductor's own lowering for a concatenation it does not
compute pointwise does this (``ConcatKernel``); the option takes it wherever Inductor would
compute a concatenation pointwise only to join its inputs, not to fuse it into pointwise ops
that read it (those, such as a rotary embedding's halves, keep Inductor's choice). Inductor's
compile is the same otherwise; its FX graph cache is off for a compile the option can change
(``joins_for_users``), since the graph does not show the change."""

import contextlib
from typing import Dict, Iterator

import torch

aten = torch.ops.aten


# The smallest join written in place. Each part is its own kernel, about 2 us more per part in
# a CUDA graph, which only a large join's faster writes repay. Measured on an H100 (float32,
# same process): the joins of GoogLeNet, Inception-v3 and Inception-v4 at batch 16 (3.2-21 MB)
# took the models from 0.79x/0.83x/0.84x to 0.73x/0.79x/0.75x of reduce-overhead's latency; at
# batch 1 (0.2-1.9 MB) GoogLeNet's took 0.433 ms to 0.493 ms and Inception-v3's 0.940 to 0.950.
MIN_BYTES = 2_500_000


def _joined_by(op) -> bool:
    # What Inductor's cat lowering also counts as a pointwise use of a concatenation.
    return op in (aten.cat.default, aten.constant_pad_nd.default)


def _bytes(node) -> int:
    """The size of ``node``'s value (a concatenation's output) in bytes; its size hint where
    symbolic, 0 where unknown."""
    val = node.meta.get("val") if node is not None else None
    if not isinstance(val, torch.Tensor):
        return 0
    numel = val.numel()
    if not isinstance(numel, int):
        # (Not int(numel): that would specialize a dynamic shape, a guard and a recompile.)
        # torch 2.11 has has_hint and hint_int; 2.15 has optimization_hint instead.
        from torch.fx.experimental import symbolic_shapes as shapes

        if hasattr(shapes, "has_hint"):
            numel = shapes.hint_int(numel) if shapes.has_hint(numel) else 0
        else:
            numel = shapes.optimization_hint(numel, fallback=0)
    return numel * val.element_size()


def _for_users(node, is_pointwise_use) -> bool:
    # Not every use of it pointwise: Inductor computes it pointwise only to join its inputs.
    return not (node.users and all(is_pointwise_use(u, _joined_by) for u in node.users))


@contextlib.contextmanager
def in_place(counts: Dict[str, int]) -> Iterator[None]:
    """Within: every concatenation Inductor lowers pointwise on a GPU is written in place
    instead, unless every use of it is pointwise or it is smaller than ``MIN_BYTES``; ``counts``
    gets ``in_place``, ``fused_into_users`` and ``small``."""
    from torch._inductor import ir, lowering
    from torch._inductor.utils import is_pointwise_use
    from torch._inductor.virtualized import V

    original = lowering.pointwise_cat

    def chosen(inputs, dim):
        node = V.current_node
        kept = "fused_into_users" if node is None or not _for_users(node, is_pointwise_use) else "small" if _bytes(node) < MIN_BYTES else None
        if kept is not None:
            counts[kept] = counts.get(kept, 0) + 1
            return original(inputs, dim)
        counts["in_place"] = counts.get("in_place", 0) + 1
        if getattr(V.graph, "layout_opt", False) and len(inputs[0].get_size()) == 4:
            return lowering.TensorBox(_channels_last_concat(ir, inputs, dim))
        return lowering.TensorBox(ir.ConcatKernel.create(inputs, dim))

    lowering.pointwise_cat = chosen
    try:
        with torch._inductor.config.patch(fx_graph_cache=False):
            yield
    finally:
        lowering.pointwise_cat = original


def _channels_last_concat(ir, inputs, dim):
    """``ConcatKernel.create`` with a channels-last output. Where Inductor lays convolutions out
    channels-last (its layout optimization), a pointwise concatenation is computed straight
    into the channels-last buffer its reading convolution wants; ``ConcatKernel`` would choose
    the layout of the graph's traced values (contiguous, from a contiguous input) and Inductor
    would then copy the whole output into channels-last for that convolution."""
    from torch._prims_common import make_channels_last_strides_for

    layout = ir.FlexibleLayout
    contiguous = layout.__dict__["contiguous_strides"]
    layout.contiguous_strides = staticmethod(lambda sizes: make_channels_last_strides_for(sizes) if len(sizes) == 4 else contiguous.__func__(sizes))
    try:
        return ir.ConcatKernel.create(inputs, dim)
    finally:
        layout.contiguous_strides = contiguous


def joins_for_users(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` has a concatenation of at least ``MIN_BYTES`` not every use of which is
    pointwise: the only kind the option changes. Without one, Inductor's compile (and its FX
    graph cache) is left as it is. (Any such concatenation where this torch lacks the test of
    its uses: ``available`` then says why.)"""
    try:
        from torch._inductor.utils import is_pointwise_use
    except ImportError:
        is_pointwise_use = None
    return any(node.op == "call_function" and node.target is aten.cat.default and _bytes(node) >= MIN_BYTES and (is_pointwise_use is None or _for_users(node, is_pointwise_use)) for node in gm.graph.nodes)


def available() -> bool:
    """Whether this torch's Inductor has the hooks the option uses."""
    try:
        from torch._inductor import ir, lowering
        from torch._inductor.utils import is_pointwise_use  # noqa: F401
    except ImportError:
        return False
    return callable(getattr(lowering, "pointwise_cat", None)) and hasattr(ir, "ConcatKernel") and hasattr(ir.ConcatKernel, "create")
