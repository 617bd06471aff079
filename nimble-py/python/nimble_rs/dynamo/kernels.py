"""Granularity ``"kernels"`` (the default): Inductor compiles each graph Dynamo hands over once,
as ``torch.compile`` would, and this is its inner compile step: the graph rewrites (``passes``),
Inductor's compile, its program read back (``program.wrapper``), planned by the Rust registry
and emitted again with every kernel on its stream (``program.kernels_plan``); the compiled graph
is returned with its call replaced by Nimble's (``NimbleCompiled``)."""

import collections
import contextlib
import json
import os
import time
import warnings
from typing import Any, Dict, Optional, Sequence

import torch
import torch.fx

from .._version import NEWEST_TESTED_TORCH, REQUIRED_TORCH
from ..errors import InductorDriftWarning
from .common.announce import warn_once
from .common.phases import in_phase, phase
from .common.timing import seconds_since
from . import graphs
from .graphs import assemble, graph_report, static_shape_key
from .options import Options
from .passes import concat, order
from .program import hoist, kernels_plan
from .program.taskgraph import mutated_inputs
from .program.wrapper import DriftError, WrapperError, WrapperProgram
from .runtime import capturable
from .runtime.compiled import admit_shape


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph over the same attributes (Inductor's passes rewrite the graph
    it is given in place; the accuracy check runs the graph as AOTAutograd gave it)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def _kind(inner_kwargs: Dict[str, Any]) -> str:
    """The graph's kind from Inductor's inner compile arguments."""
    return "backward" if inner_kwargs.get("is_backward") else "inference" if inner_kwargs.get("is_inference") else "forward"


@in_phase("compile", lambda gm, example_inputs, options, inner_kwargs: _kind(inner_kwargs))
def compile_kernels(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, inner_kwargs: Dict[str, Any]):
    """Granularity "kernels", Inductor's inner compile step: Inductor compiles the graph once;
    its kernels are planned; the compiled graph is returned with its call replaced by Nimble's
    (``NimbleCompiled``), which runs the plan's program or Inductor's own."""
    from torch._inductor.compile_fx import compile_fx_inner

    started = time.perf_counter()
    kind = _kind(inner_kwargs)
    on_cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
    # The forward's static inputs are its parameters and buffers; a backward's saved values are
    # found when it is captured (the captured forward's outputs).
    static_indices = set(inner_kwargs.get("static_input_idxs") or ()) if kind != "backward" else set()
    mutated = mutated_inputs(gm)
    reference = _copy(gm)
    signature = graphs.signature(gm, kind)  # before Inductor's passes rewrite gm
    report, uncapturable = graph_report(gm, example_inputs, options, kind, on_cuda)
    seen = _seen_outputs(gm, kind, report)  # as Inductor marked them, before its passes
    report.update(order.rewrite(gm, options, kind, on_cuda))
    joined: Dict[str, int] = {}
    inductor_started = time.perf_counter()
    with _concatenations(options, gm, joined, on_cuda, kind), phase("inductor", kind):
        compiled = compile_fx_inner(gm, example_inputs, **inner_kwargs)
    # (of compile_seconds: Inductor's own compile, its kernels' first compiles included)
    report["inductor_seconds"] = seconds_since(inductor_started)
    if joined:
        report["concat_in_place"] = joined
    mutated = sorted(set(mutated) | set(getattr(compiled, "mutated_input_idxs", None) or ()))
    try:
        with phase("read", kind):
            wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), sorted(static_indices), disjoint_slices=options.disjoint_slices)
        if options.separate_weight_buffers or (options.weight_stream and not options.hoist_weight_kernels):
            # (A stream of their own needs buffers of their own: a reused one's readers first.)
            wrapper = _separated(wrapper, mutated, report)
    except (WrapperError, LookupError, SyntaxError, OSError) as error:
        wrapper = _unplanned(report, kind, error)
    kernels = len(wrapper.tasks) if wrapper is not None else 0
    key = static_shape_key(example_inputs)
    if not on_cuda and key is not None and not admit_shape(signature, key, options.max_shapes):
        return compiled
    report["kernels"] = kernels
    if options.graphs is not None and wrapper is not None:
        report["graph_file"] = _write_graph(wrapper.task_graph(), options.graphs, kind)
    single_program = kernels_plan.InductorProgram(compiled, kernels)
    streams_program = prologue = None
    planned = options.choose != "single" and wrapper is not None and bool(wrapper.tasks)
    in_order_only = capturable.programmatic_launch(on_cuda) if planned else None
    if in_order_only is not None:
        warn_once(("pdl",), f"nimble backend: {in_order_only}")
        report["reason"] = in_order_only
    elif planned:
        try:
            # Before planning: what the hoisted kernels ordered among the others is gone.
            prologue = _prologue(wrapper, mutated, options, kind, report)
            _set_aside(wrapper, mutated, options, kind, report)
            plan, cut = kernels_plan.plan(wrapper, options.algorithm)
            report.update(streams=plan["streams"], syncs=plan["syncs"], regions=len(cut["regions"]))
            if plan["streams"] == 1 and prologue is None:
                report["reason"] = f"{options.algorithm} plans one stream: Inductor's program as it is"
            else:
                # (On one stream too where kernels are hoisted: that program is not Inductor's.)
                streams_program = kernels_plan.PlannedProgram(compiled, wrapper, plan, cut, options.priority, prologue)
                report.update(streams_program.memory_report())
        except Exception as error:  # noqa: BLE001 - Inductor's own program is always there to run
            # A plan the checker refuses, or code that does not compile: Inductor's program runs,
            # announced with the reason.
            _unplanned(report, kind, error)
    critical = None
    if streams_program is not None and options.choose == "auto" and options.time_critical_path and on_cuda and uncapturable is None:
        critical = _critical_path_program(compiled, wrapper, plan, report, prologue)
    report.setdefault("streams", 1)
    if streams_program is not None and options.choose == "streams":
        single_program = None
    nimble = assemble(streams_program, single_program, reference, example_inputs, static_indices, mutated, kind, signature, report, uncapturable, options, started)
    nimble.checked_outputs = seen
    nimble.critical_program = critical
    if wrapper is not None:
        nimble.clobbered = [i for i in wrapper.written_inputs() if i not in mutated]
        if nimble.clobbered:
            report["clobbered_inputs"] = len(nimble.clobbered)

    def call(args):
        values = list(args)
        args.clear()
        return nimble(*values)

    compiled.current_callable = call
    return compiled


CRITICAL_PATH = "nimble-critical"


@in_phase("critical path")
def _critical_path_program(compiled, wrapper, primary: dict, report: Dict[str, Any], prologue=None):
    """The plan with the heaviest path first (``CRITICAL_PATH``, its stream 0 captured at the
    highest priority), timed at the choice beside the primary plan (option
    ``time_critical_path``); None where it is the primary plan already (the same streams and
    syncs; its priority alone is option ``priority``) or cannot be planned (the report says
    why: the primary plan and Inductor's program are still there to choose from)."""
    try:
        plan, cut = kernels_plan.plan(wrapper, CRITICAL_PATH)
        if plan["streams"] == 1 or kernels_plan.same_plan(plan, primary):
            report["critical_path"] = "the same plan as the primary" if plan["streams"] > 1 else "one stream"
            return None
        program = kernels_plan.PlannedProgram(compiled, wrapper, plan, cut, priority=True, prologue=prologue)
    except Exception as error:  # noqa: BLE001 - the primary plan and Inductor's program remain
        report["critical_path"] = f"not planned: {error}"
        warnings.warn(f"nimble backend: the critical-path plan could not be made ({error}); the choice times the primary plan and Inductor's program only", RuntimeWarning, stacklevel=3)
        return None
    report["critical_path"] = {"streams": plan["streams"], "syncs": plan["syncs"], "regions": len(cut["regions"])}
    return program


def _concatenations(options: Options, gm, counts: Dict[str, int], on_cuda: bool, kind: str):
    """Option ``concat_in_place`` for one Inductor compile of ``gm`` (``concat``), where ``gm``
    has a concatenation it can change and Inductor would lower one pointwise (an inference graph
    on a GPU, the only kind measured, or where its ``force_pointwise_cat`` is set); announced once
    where this torch's Inductor lacks what it needs."""
    # (Read with a default: a later torch may drop the setting, and the backend is not tied to 2.11.)
    forced = (options.inductor_config or {}).get("force_pointwise_cat", getattr(torch._inductor.config, "force_pointwise_cat", False))
    pointwise = on_cuda or bool(forced)
    if not options.concat_in_place or kind != "inference" or not pointwise or not concat.joins_for_users(gm):
        return contextlib.nullcontext()
    if not concat.available():
        warn_once(("concat",), "nimble backend: option concat_in_place needs Inductor's cat lowering as in torch 2.11 (lowering.pointwise_cat, ir.ConcatKernel); concatenations are compiled as Inductor chooses")
        return contextlib.nullcontext()
    return concat.in_place(counts)


@in_phase("separate")
def _separated(wrapper, mutated, report: Dict[str, Any]):
    """``wrapper`` read again with each kernel on weights alone writing a buffer of its own
    (option ``separate_weight_buffers``, ``hoist.separate``); the report counts the buffers.
    Where that fails, ``wrapper`` as it is, announced: Inductor's shared buffers are exact too
    (option weight_stream then leaves the kernels writing them in the plan)."""
    try:
        rewrite = hoist.separate(wrapper, hoist.find(wrapper, mutated))
        if not rewrite:
            return wrapper
        separated = WrapperProgram(wrapper.module, sorted(wrapper.static_inputs), rewrite, wrapper.disjoint_slices)
    except Exception as error:  # noqa: BLE001 - the program as Inductor wrote it is still there
        report["separated_weight_buffers"] = f"not separated: {error}"
        warn_once(("separate", type(error).__name__, str(error)), f"nimble backend: the kernels on weights alone keep Inductor's shared buffers ({type(error).__name__}: {error})")
        return wrapper
    report["separated_weight_buffers"] = len(rewrite)
    return separated


def _prologue(wrapper, mutated, options: Options, kind: str, report: Dict[str, Any]):
    """The kernels on weights alone hoisted out of an inference graph's plan (option
    ``hoist_weight_kernels``), or None; the report counts them."""
    if not options.hoist_weight_kernels or kind != "inference":
        return None
    hoisting = hoist.find(wrapper, mutated)
    report["hoisted_kernels"] = len(hoisting.written)
    if hoisting.refused:
        # Why the others stay, counted by reason (the statements concerned follow ": ").
        report["not_hoisted"] = dict(collections.Counter(reason.split(": ")[0] for reason in hoisting.refused.values()))
    if not hoisting.written:
        return None
    wrapper.exclude(hoisting)
    return hoist.Prologue(wrapper, hoisting)


def _set_aside(wrapper, mutated, options: Options, kind: str, report: Dict[str, Any]) -> None:
    """The kernels on weights alone left in the program set aside for a stream of their own
    (option ``weight_stream``; a backward reads no parameters alone); the report counts them
    and those that follow another kernel (a reused buffer's readers) and stay in the plan."""
    if not options.weight_stream or kind == "backward":
        return
    kernels = [i for i in hoist.on_weights_alone(wrapper, mutated) if i not in wrapper.skipped]
    side = wrapper.set_aside(kernels)
    report["weight_stream_kernels"] = len(side)
    if len(side) < len(kernels):
        report["weight_stream_left"] = len(kernels) - len(side)


def _write_graph(graph: dict, directory, kind: str) -> str:
    """``graph`` as ``DIRECTORY/KIND-N.graph.json``, N the first number free."""
    from pathlib import Path

    os.makedirs(directory, exist_ok=True)
    n = 1
    while (Path(directory) / f"{kind}-{n}.graph.json").exists():
        n += 1
    path = Path(directory) / f"{kind}-{n}.graph.json"
    with open(path, "x") as f:
        f.write(json.dumps(graph, indent=1) + "\n")
    return str(path)


def _seen_outputs(gm: torch.fx.GraphModule, kind: str, report: Dict[str, Any]) -> Optional[int]:
    """How many leading outputs of a training forward its caller sees: the inputs it updates
    and the user's outputs, before the values saved for the backward (Inductor marks the user's
    as ``user_visible_output_idxs`` on the output node before its inner compile). None for the
    other graphs, or where the mark is missing: every output."""
    if kind != "forward":
        return None
    node = next((n for n in gm.graph.nodes if n.op == "output"), None)
    seen = node.meta.get("user_visible_output_idxs") if node is not None else None
    if not seen:
        return None
    report["accuracy_outputs"] = max(seen) + 1
    return max(seen) + 1


def _unplanned(report: Dict[str, Any], kind: str, error: Exception) -> None:
    """Announces that Inductor's program runs as it is, and why: a statement this torch's
    Inductor wrote that the reader does not know once per kind of statement
    (``InductorDriftWarning``), any other reason for every graph."""
    report["unplanned"] = str(error)
    if isinstance(error, DriftError):
        report["drift"] = error.form
        warn_once(
            ("drift", error.form),
            f"nimble backend: torch {torch.__version__}'s Inductor wrote {error}, which this nimble_rs does not read "
            f"(tested with torch {REQUIRED_TORCH} to {NEWEST_TESTED_TORCH}); graphs with it run as Inductor compiled them, on one stream",
            InductorDriftWarning,
        )
        return None
    warnings.warn(f"nimble backend: Inductor's program for a {kind} graph could not be planned ({error}); it runs on one stream as Inductor compiled it", RuntimeWarning, stacklevel=3)
    return None
