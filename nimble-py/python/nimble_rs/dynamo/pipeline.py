"""``torch.compile(model, backend="nimble")``: Inductor's fused kernels on Nimble's streams.

Granularity ``"kernels"`` (the default): Inductor compiles each graph Dynamo hands over once,
as ``torch.compile`` would (``compile_fx``, our step in place of its inner compile: AOTAutograd,
a forward and a backward when training, Inductor's passes, fusion, code generation); the kernels
of its program become the task graph, the Rust registry plans it with the chosen algorithm, and
the program's statements are emitted again with every kernel on its plan stream
(``kernels_plan``, ``wrapper``).

Granularity ``"regions"``: AOTAutograd's ATen graph is planned op by op, cut into regions
(maximal one-stream runs with no sync inside) and Inductor compiles each region on its own; the
whole graph is compiled a second time as one region to compare against.

On a GPU the chosen program is captured on its streams into one CUDA graph per input shape
(``runner``); on the CPU it runs in plan order. Never slower than the compiler: where the plan
has more than one stream, both programs are captured and timed; the faster is kept, and the
report says which and why.
"""

import collections
import contextlib
import json
import os
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx

from .._version import NEWEST_TESTED_TORCH, REQUIRED_TORCH, warn_if_newer
from ..errors import InductorDriftWarning, NimbleInputError
from .runtime import capturable
from .passes import concat, order
from .program import hoist, kernels_plan
from . import regions as regions_module
from .common.announce import warn_once
from .common.phases import in_phase, phase
from .runtime.compiled import NimbleCompiled, admit_shape, code_state
from .options import Options
from .options import checked as _options
from .options import inductor_settings as _inductor_settings
from .runtime.runner import Program, shape_key
from .common.timing import seconds_since
from .program.taskgraph import Tasks, mutated_inputs, op_name, tasks_of
from .program.wrapper import DriftError, WrapperError, WrapperProgram

_REPORTS: List[dict] = []


def reports() -> List[dict]:
    """One report per graph the backend compiled, oldest first: algorithm, streams, syncs,
    regions, the choice made and why, compile seconds, captured shapes and their memory."""
    return _REPORTS


def _compile_regions(gm: torch.fx.GraphModule, tasks: Tasks, algorithm: str) -> Program:
    import torch._inductor

    partition = regions_module.partition(gm, tasks, algorithm)
    compiled = []
    for region in partition.regions:
        examples = [v.meta.get("val") for v in region.inputs]
        # Outside the enclosing graph's tracing context: each region's compile would report its
        # own output strides there as the whole forward's, and AOTAutograd would restride the
        # backward's inputs by the last region's. (Inductor keeps every output's eager strides.)
        with torch._guards.tracing(None):
            compiled.append(torch._inductor.compile(region.module, examples))
    return Program(gm, partition, compiled)


def _signature(gm: torch.fx.GraphModule, kind: str) -> tuple:
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


def _static_shape_key(example_inputs: Sequence[Any]) -> Optional[tuple]:
    """The shape key of example inputs whose sizes are all concrete (None with dynamic sizes:
    such a graph counts its shapes as it captures them)."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and not all(isinstance(d, int) for d in (*x.shape, *x.stride()))):
            return None
    return shape_key(example_inputs)


def _graph_report(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, kind: str, on_cuda: bool):
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


def _assemble(streams_program, single_program, gm, example_inputs, static_indices, mutated, kind, signature, report, uncapturable, options, started) -> NimbleCompiled:
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
    _REPORTS.append(report)
    return compiled


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, kind: str) -> NimbleCompiled:
    """Granularity "regions": plans, partitions and compiles one ATen graph (``kind``: forward,
    backward or inference)."""
    started = time.perf_counter()
    # AOTAutograd's static inputs are the forward's (parameters and buffers); a backward's
    # inputs are the forward's saved values and the gradients, found when it is captured.
    static_indices = capturable.static_indices() if kind != "backward" else set()
    tasks = tasks_of(gm, sorted(static_indices))
    signature = _signature(gm, kind)
    on_cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
    key = _static_shape_key(example_inputs)
    if not on_cuda and key is not None and not admit_shape(signature, key, options.max_shapes):
        return gm.forward
    report, uncapturable = _graph_report(gm, example_inputs, options, kind, on_cuda)
    report["ops"] = len(tasks.nodes)

    streams_program = single_program = None
    if options.choose != "single" and tasks.nodes:
        streams_program = _compile_regions(gm, tasks, options.algorithm)
        partition = streams_program.partition
        report.update(streams=partition.streams, syncs=partition.syncs, regions=len(partition.regions))
        if partition.streams == 1:
            # Already the whole graph as one region.
            single_program, streams_program = streams_program, None
            report["reason"] = f"{options.algorithm} plans one stream: the whole graph is one region"
    need_single = single_program is None and (options.choose == "single" or (options.choose == "auto" and on_cuda and uncapturable is None))
    if need_single or (streams_program is None and single_program is None):
        single_program = _compile_regions(gm, tasks, "single")
        report.setdefault("streams", 1)
    return _assemble(streams_program, single_program, gm, example_inputs, static_indices, mutated_inputs(gm), kind, signature, report, uncapturable, options, started)


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
    signature = _signature(gm, kind)  # before Inductor's passes rewrite gm
    report, uncapturable = _graph_report(gm, example_inputs, options, kind, on_cuda)
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
    key = _static_shape_key(example_inputs)
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
    nimble = _assemble(streams_program, single_program, reference, example_inputs, static_indices, mutated, kind, signature, report, uncapturable, options, started)
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


def nimble_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], options: Optional[dict] = None, **extra):
    """The Dynamo backend: ``torch.compile(model, backend="nimble", options={...})``, or
    ``backend=nimble_rs.backend``. Options: ``options.DEFAULTS``."""
    if extra:
        raise NimbleInputError(f"unexpected arguments for backend=\"nimble\": {', '.join(extra)}; pass options={{...}}")
    chosen = _options(options)
    warn_if_newer(torch.__version__)
    if chosen.granularity == "kernels":
        import functools

        from torch._inductor.compile_fx import compile_fx

        # AOTAutograd's cache would hand back a graph compiled before without our step.
        with torch._functorch.config.patch(enable_autograd_cache=False), _inductor_settings(chosen):
            return compile_fx(gm, example_inputs, inner_compile=functools.partial(_inner, options=chosen))
    from torch._dynamo.backends.common import aot_autograd

    from torch._functorch.aot_autograd import make_boxed_func

    # AOTAutograd's calling convention: one list of the graph's inputs. Each under option
    # inductor_config (a backward is compiled at its first call).
    def compiler(kind: str):
        def compile_one(graph, inputs):
            with _inductor_settings(chosen):
                return make_boxed_func(compile_graph(graph, inputs, chosen, kind))

        return compile_one

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"), inference_compiler=compiler("inference"))(gm, example_inputs)


def _inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, **inner_kwargs):
    # (Again here: compile_fx compiles a backward at its first call, outside nimble_backend.)
    with _inductor_settings(options):
        return compile_kernels(gm, example_inputs, options, inner_kwargs)
