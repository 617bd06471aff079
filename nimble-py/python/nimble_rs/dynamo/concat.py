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


def _joined_by(op) -> bool:
    # What Inductor's cat lowering also counts as a pointwise use of a concatenation.
    return op in (aten.cat.default, aten.constant_pad_nd.default)


@contextlib.contextmanager
def in_place(counts: Dict[str, int]) -> Iterator[None]:
    """Within: every concatenation Inductor lowers pointwise on a GPU is written in place
    instead, unless every use of it is pointwise; ``counts`` gets ``in_place`` and
    ``fused_into_users``."""
    from torch._inductor import ir, lowering
    from torch._inductor.utils import is_pointwise_use
    from torch._inductor.virtualized import V

    original = lowering.pointwise_cat

    def chosen(inputs, dim):
        node = V.current_node
        users = list(node.users) if node is not None else []
        if users and all(is_pointwise_use(u, _joined_by) for u in users):
            counts["fused_into_users"] = counts.get("fused_into_users", 0) + 1
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
    """Whether ``gm`` has a concatenation not every use of which is pointwise: the only kind
    the option changes. Without one, Inductor's compile (and its FX graph cache) is left as it
    is. (Any concatenation where this torch lacks the test: ``available`` then says why.)"""
    try:
        from torch._inductor.utils import is_pointwise_use
    except ImportError:
        return any(node.op == "call_function" and node.target is aten.cat.default for node in gm.graph.nodes)
    return any(node.op == "call_function" and node.target is aten.cat.default and not (node.users and all(is_pointwise_use(u, _joined_by) for u in node.users)) for node in gm.graph.nodes)


def available() -> bool:
    """Whether this torch's Inductor has the hooks the option uses."""
    try:
        from torch._inductor import ir, lowering
        from torch._inductor.utils import is_pointwise_use  # noqa: F401
    except ImportError:
        return False
    return callable(getattr(lowering, "pointwise_cat", None)) and hasattr(ir, "ConcatKernel") and hasattr(ir.ConcatKernel, "create")
