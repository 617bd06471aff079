"""What the backend's two granularities share: the reports of the graphs it compiled, a graph's
signature (what its shapes are counted under), its report's start, and the ``NimbleCompiled``
assembled from its programs."""

from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx

from .common.announce import warn_once
from .common.timing import seconds_since
from .options import Options
from .program.taskgraph import op_name
from .runtime import capturable
from .runtime.compiled import NimbleCompiled, code_state
from .runtime.runner import shape_key

REPORTS: List[dict] = []


def reports() -> List[dict]:
    """One report per graph the backend compiled, oldest first: algorithm, streams, syncs,
    regions, the choice made and why, compile seconds, captured shapes and their memory."""
    return REPORTS


def signature(gm: torch.fx.GraphModule, kind: str) -> tuple:
    """What a graph's shapes are counted under (option max_shapes) and its warnings said once
    for: its kind, its ATen ops in order and, under Dynamo, the code it came from (the code
    object of the frame Dynamo compiled, and the graph's place among that compile's graphs of
    its kind), which Dynamo's recompiles of one piece of code for new shapes keep. Neither
    Inductor's kernel names nor the ATen ops alone are kept: with the kernels the shapes of one
    attention block were seen counted apart, and its ATen ops change with the shape too (on a
    GPU Inductor pads a matrix product's rows where its own timing at compile time finds that
    faster, `shape_padding`: an attention block's 2x13 rows were padded, 2x5 and 2x9 not), so
    the bound never warned.
    The counts are kept with the code (``code_state``): ``torch._dynamo.reset()`` starts them
    again, as it does Dynamo's own. Without Dynamo (a graph given to the backend by hand) the
    ops alone."""
    ops = tuple(op_name(n) for n in gm.graph.nodes if n.op == "call_function")
    tracing = torch._guards.TracingContext.try_get()
    traced = getattr(tracing, "traced_code", None)
    if not traced:
        return (kind, ops, None)
    # How many graphs of this kind this compile (of this code) has handed over before this one.
    graphs = code_state(traced[0])["graphs"]
    this_compile = (torch._guards.CompileContext.current_compile_id(), kind)
    index = graphs.get(this_compile, 0)
    graphs[this_compile] = index + 1
    return (kind, ops, (traced[0], index))


def static_shape_key(example_inputs: Sequence[Any]) -> Optional[tuple]:
    """The shape key of example inputs whose sizes are all concrete (None with dynamic sizes:
    such a graph counts its shapes as it captures them)."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and not all(isinstance(d, int) for d in (*x.shape, *x.stride()))):
            return None
    return shape_key(example_inputs)


def graph_report(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, kind: str, on_cuda: bool):
    """The report's start and why the graph cannot be captured, if it cannot (announced)."""
    report: Dict[str, Any] = {"graph": kind, "granularity": options.granularity, "algorithm": options.algorithm}
    uncapturable = capturable.announce_uncapturable(gm, example_inputs)
    if uncapturable is not None:
        report["uncapturable"] = uncapturable
    if kind != "inference" and on_cuda and uncapturable is None and not options.capture_training:
        uncapturable = "training graphs are captured only with option capture_training=True; they run as compiled without a CUDA graph"
        warn_once(("training",), f"nimble backend: {uncapturable}")
        report["uncapturable"] = uncapturable
    return report, uncapturable


def assemble(streams_program, single_program, gm, example_inputs, static_indices, mutated, kind, signature, report, uncapturable, options, started) -> NimbleCompiled:
    report["compile_seconds"] = seconds_since(started)
    compiled = NimbleCompiled(
        streams_program=streams_program,
        single_program=single_program,
        options=options,
        static=[i in static_indices for i in range(len(example_inputs))],
        mutated=mutated,
        gm=gm,
        kind=kind,
        signature=signature,
        report=report,
        uncapturable=uncapturable,
    )
    if options.choose == "single":
        compiled.chosen = "single"
        report["choice"], report["reason"] = "single", "option choose=\"single\""
    REPORTS.append(report)
    return compiled
