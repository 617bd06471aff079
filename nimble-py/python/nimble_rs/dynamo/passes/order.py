"""The backend's graph rewrites in the one order they run, before Inductor compiles the graph.

Each pass is turned on by the option of its name (``nimble_rs.dynamo.options.Options``), runs on
the graph kinds it names, and leaves its counts in the graph's report under its ``report`` key
(a failed pass: ``{"failed": reason}``, announced once, the graph left to Inductor as it is).
To add a pass: a module here with a ``rewrite``-style function, an option, and one entry in
``PASSES`` where it belongs in the order. Option ``concat_in_place`` is not a graph rewrite (it
changes how Inductor lowers a concatenation while it compiles), so the entry runs it there.

The order matters: merging sibling convolutions first lets the later passes see the merged
convolution once; folding BatchNorm and ReLU into a convolution comes before the depthwise
kernels, which take the convolutions left; the products' transposition needs no convolution
and goes last."""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple

import torch
import torch.fx

from ..common.announce import warn_once
from . import depthwise, fold, merge, products
from .fxnodes import guarded


@dataclass(frozen=True)
class Pass:
    """One rewrite: the option that turns it on, the report key of its counts, whether it needs
    a GPU graph (it measures or compiles kernels there), and the rewrite, given the graph and the
    option's value."""

    option: str
    report: str
    needs_cuda: bool
    rewrite: Callable[[torch.fx.GraphModule, Any], Any]


def _fused(gm: torch.fx.GraphModule, value) -> Dict[str, Any]:
    """Option ``fuse_convolutions`` (``fold``, "folded" or "epilogue"): its counts, or where the
    pass fails or cannot run, the reason, announced once (the chains it had not reached stay
    Inductor's)."""
    mode = "epilogue" if value == "epilogue" else "folded"
    if mode == "epilogue":
        from . import epilogue  # needs cuDNN's graph API: imported only when asked for

        missing = epilogue.available()
        if missing is not None:
            warn_once(("epilogue",), f"nimble backend: option fuse_convolutions=\"epilogue\" needs cuDNN's graph API: {missing}; the convolutions run as Inductor compiles them")
            return {"failed": missing}
    pays = fold.pays_in_epilogue if mode == "epilogue" else fold.pays_on_gpu
    return guarded(gm, "fuse_convolutions", "convolutions", lambda: fold.fuse_convolutions(gm, pays, mode=mode))


PASSES: Tuple[Pass, ...] = (
    Pass("merge_convolutions", "merged_convolutions", False, lambda gm, _: merge.merge_sibling_convolutions(gm)),
    Pass("fuse_convolutions", "fused_convolutions", True, _fused),
    Pass("depthwise_kernels", "depthwise_kernels", True, lambda gm, value: depthwise.rewrite(gm, "by-size" if value is True else value)),
    Pass("transpose_products", "transposed_products", True, lambda gm, _: products.rewrite(gm)),
)


def rewrite(gm: torch.fx.GraphModule, options, kind: str, on_cuda: bool) -> Dict[str, Any]:
    """Every pass of ``PASSES`` its option turns on, in order, over an inference graph ``gm``
    (``kind``; the forward and backward of training are left as they are): the report entries
    of those that ran."""
    report: Dict[str, Any] = {}
    if kind != "inference":
        return report
    for step in PASSES:
        value = getattr(options, step.option)
        if value and (on_cuda or not step.needs_cuda):
            report[step.report] = step.rewrite(gm, value)
    return report
