"""``torch.compile(model, backend="nimble")``: Inductor's fused kernels on Nimble's streams.

For each graph Dynamo hands over, AOTAutograd gives the ATen-level graph (a forward and a
backward when training); its ops become a task graph, the Rust registry plans it with the
chosen algorithm, the plan is cut into regions (maximal one-stream runs with no sync inside),
and Inductor compiles each region through its public entry, ``torch._inductor.compile``. On a
GPU the regions are captured on their streams into one CUDA graph per input shape (see
``runner``); on the CPU they run in plan order.

Never slower than the compiler: where the plan has more than one stream, the whole graph is
also compiled as one region (Inductor's own program) and both captures are timed; the faster is
kept, and the report says which and why.
"""

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx

from .. import scheduling
from ..errors import NimbleInputError
from . import regions as regions_module
from .runner import CapturedGraph, Program, forward_outputs, seconds_since, shape_key, time_quartiles_ms
from .taskgraph import Tasks, mutated_inputs, op_name, tasks_of

DEFAULTS: Dict[str, Any] = {
    # Any registered algorithm, with its argument (`nimble_rs.algorithms()`).
    "algorithm": "nimble",
    # "auto": measure the regions on streams against the whole graph as one region and keep
    # the faster (on a GPU; on the CPU regions run in plan order); "streams": always the plan's
    # regions; "single": the whole graph as one region (Inductor's program, captured).
    "choose": "auto",
    # Input shapes per subgraph (a CUDA graph each on a GPU); beyond it, a new shape runs without
    # Nimble: uncaptured on a GPU, Dynamo's graph as it is on the CPU (one warning).
    "max_shapes": 8,
    # Runs before each capture (autotuning, library handles and workspaces per stream).
    "warmups": 3,
    # "compiler": streams are kept only if their outputs are no further from eager than the
    # compiler's own program (the whole graph as one region); "any": speed alone decides.
    "accuracy": "compiler",
    # Training graphs (AOTAutograd's forward and backward) captured as CUDA graphs; off, they
    # run as compiled regions on one stream, announced once.
    "capture_training": True,
}
# The inputs the choice's accuracy check runs (the capture's and shuffles of it), and how much
# further from eager streams may be than one region: float32's reassociation noise.
ACCURACY_INPUTS = 5
ACCURACY_SLACK = 0.02

# Ops that make the host wait for the device: a CUDA graph cannot contain them.
HOST_SYNC_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::item", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::repeat_interleave", "aten::_assert_async"}

_REPORTS: List[dict] = []
# The input shapes seen so far per subgraph (its op sequence), across Dynamo's recompilations.
_SHAPES: Dict[tuple, set] = {}
_WARNED: set = set()


def reports() -> List[dict]:
    """One report per graph the backend compiled, oldest first: algorithm, streams, syncs,
    regions, the choice made and why, compile seconds, captured shapes and their memory."""
    return _REPORTS


def _warn_once(key: Any, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _options(options: Optional[dict]) -> Dict[str, Any]:
    chosen = dict(DEFAULTS)
    for key, value in (options or {}).items():
        if key not in DEFAULTS:
            raise NimbleInputError(f"unknown option `{key}` for backend=\"nimble\"; known options: {', '.join(DEFAULTS)}")
        chosen[key] = value
    if chosen["choose"] not in ("auto", "streams", "single"):
        raise NimbleInputError(f"option choose={chosen['choose']!r}: expected \"auto\", \"streams\" or \"single\"")
    if not isinstance(chosen["max_shapes"], int) or chosen["max_shapes"] < 1:
        raise NimbleInputError(f"option max_shapes={chosen['max_shapes']!r}: expected a positive integer")
    if not isinstance(chosen["capture_training"], bool):
        raise NimbleInputError(f"option capture_training={chosen['capture_training']!r}: expected True or False")
    if chosen["accuracy"] not in ("compiler", "any"):
        raise NimbleInputError(f"option accuracy={chosen['accuracy']!r}: expected \"compiler\" or \"any\"")
    if not isinstance(chosen["warmups"], int) or chosen["warmups"] < 1:
        raise NimbleInputError(f"option warmups={chosen['warmups']!r}: expected a positive integer")
    name = chosen["algorithm"]
    if not isinstance(name, str) or name.split(":")[0] not in {n for n, _, _ in scheduling.algorithms()}:
        known = ", ".join(usage for _, usage, _ in scheduling.algorithms())
        raise NimbleInputError(f"option algorithm={name!r}: expected a registered algorithm ({known})")
    return chosen


def _static_indices() -> set:
    """The graph inputs that are parameters and buffers (their addresses are fixed): read in
    place, never copied."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(metadata, "static_input_indices", None)
    return set(indices) if indices is not None else set()


def _why_uncapturable(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Optional[str]:
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
    """Why the graph cannot be captured (``_why_uncapturable``), warned once per graph (it is
    compiled once): such a graph still runs, as its compiled regions without a CUDA graph."""
    reason = _why_uncapturable(gm, example_inputs)
    if reason is not None:
        warnings.warn(f"nimble backend: a graph runs as compiled regions without a CUDA graph: {reason}", RuntimeWarning, stacklevel=3)
    return reason


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


@dataclass
class NimbleCompiled:
    """What the backend returns for one ATen graph: the compiled programs and their captures."""

    streams_program: Optional[Program]
    single_program: Optional[Program]
    options: Dict[str, Any]
    static: List[bool]
    mutated: List[int]
    gm: torch.fx.GraphModule
    kind: str
    signature: tuple
    report: dict
    uncapturable: Optional[str]
    captures: Dict[tuple, Optional[CapturedGraph]] = field(default_factory=dict)
    last: Optional[CapturedGraph] = None
    chosen: Optional[str] = None

    def _program(self) -> Program:
        if self.chosen == "single" or self.streams_program is None:
            assert self.single_program is not None
            return self.single_program
        return self.streams_program

    def __call__(self, *args):
        # The common case first, with as little Python as possible: the last graph replayed.
        last = self.last
        if last is not None and last.accepts(args):
            return last(args) if self.kind == "inference" else self._training_replay(last, args)
        cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        if not cuda or self.uncapturable is not None:
            if self.chosen is None:
                self.chosen = "streams" if self.streams_program is not None else "single"
                self.report["choice"] = self.chosen
            return self._program().run(args)
        key = shape_key(args)
        graph = self.captures.get(key)
        if graph is not None and graph.accepts(args):
            self.last = graph
            return graph(args) if self.kind == "inference" else self._training_replay(graph, args)
        if graph is not None and self.kind == "backward":
            # The values saved by a forward that ran uncaptured (see _training_replay): not the
            # captured forward's outputs this graph reads in place.
            return self._uncaptured(args)
        if graph is not None:
            # Same shapes, but a parameter or buffer is another tensor now: the old graph reads
            # the old one. Capture again in its place.
            _warn_once(("moved", self.signature), "nimble backend: a parameter or buffer of a captured graph was replaced by another tensor; capturing again")
        elif not _admit_shape(self.signature, key, self.options["max_shapes"]):
            return self._uncaptured(args)
        self.last = self.captures[key] = None  # the old graph's memory goes before the new capture
        graph = self.captures[key] = self.last = self._capture(args)
        self.report["captured_shapes"] = len(self.captures)
        return graph(args) if self.kind == "inference" else self._training_replay(graph, args)

    def _training_replay(self, graph: CapturedGraph, args):
        """A training forward's or backward's replay. A forward whose last outputs its backward
        has not read yet (a second forward before one backward, as in gradient accumulation)
        runs uncaptured, so that the graph does not overwrite them."""
        if self.kind == "forward":
            if graph.pending and not graph.outputs_released():
                _warn_once(("pending", self.signature), "nimble backend: a forward ran again before the backward of its last call; it runs uncaptured until that backward has run")
                return self._uncaptured(args)
            outputs = graph(args)
            graph.pending = True
            return outputs
        if not graph.outputs_released():
            # Autograd still holds the last call's gradients (it sums several backward calls'
            # before accumulating them): this call's must be new tensors.
            _warn_once(("held", self.signature), "nimble backend: a backward ran while autograd still held the gradients of its last call; it runs uncaptured")
            return self._uncaptured(args)
        outputs = graph(args)
        for forward in graph.consumes:
            forward.pending = False
        return outputs

    def _uncaptured(self, args):
        self.report["uncaptured_calls"] = self.report.get("uncaptured_calls", 0) + 1
        return self._program().run(args)

    def _capture(self, args) -> CapturedGraph:
        started = time.perf_counter()
        # Warm-ups, the choice's timings and its accuracy check all run the graph: the inputs it
        # writes in place (a buffer's running statistics, a counter) are put back afterwards, so
        # that the user's call writes them once, as eager would.
        saved = [(args[i], args[i].clone()) for i in self.mutated if isinstance(args[i], torch.Tensor)]
        static, consumes = list(self.static), []
        if self.kind == "backward":
            # The values the forward saved are its captured graph's outputs: read in place.
            from_forward, consumes = forward_outputs(args)
            static = [a or b for a, b in zip(static, from_forward)]
        try:
            graph = None
            if self.chosen is None:
                self.chosen, self.report["reason"], graph = self._choose(args, saved, static)
                self.report["choice"] = self.chosen
            if graph is None:
                graph = CapturedGraph(self._program(), args, static, self.options["warmups"], self.mutated)
        finally:
            _restore(saved)
        graph.consumes = tuple(consumes)
        if self.kind != "inference":
            graph.track_outputs(forward=self.kind == "forward")
        self.report.setdefault("peak_bytes", {})[str(shape_key_summary(args))] = graph.peak_bytes
        self.report["capture_seconds"] = self.report.get("capture_seconds", 0.0) + seconds_since(started)
        return graph

    def _choose(self, args, saved, static):
        """The program to keep (``streams`` or ``single``), why, and its captured graph when the
        choice captured it last (else None: captured again, so that only one graph's memory is
        held at a time)."""
        if self.streams_program is None:
            return "single", self.report.get("reason", "one stream: the whole graph is one region"), None
        if self.single_program is None:
            return "streams", "option choose=\"streams\"", None
        # The accuracy check's inputs: the capture's own and shuffles of its values (the same
        # distribution: token ids stay token ids), user inputs only.
        checks = [list(args)] + [self._shuffled(args, static, seed) for seed in range(ACCURACY_INPUTS - 1)]
        expected = []
        for inputs in checks:
            _restore(saved)
            with torch.no_grad():
                expected.append(_float_outputs(self.gm(*inputs)))
        quartiles, errors, graph = {}, {}, None
        # One region first: if the streams, timed second, win, their graph is kept as it is.
        for name, program in (("single", self.single_program), ("streams", self.streams_program)):
            graph = CapturedGraph(program, args, static, self.options["warmups"], self.mutated)
            quartiles[name] = time_quartiles_ms(lambda graph=graph: graph(args))
            distances = []
            for inputs, reference in zip(checks, expected):
                _restore(saved)
                distances.append(_distance(_float_outputs(graph(inputs)), reference))
            errors[name] = sorted(distances)[len(distances) // 2]
            self.report.setdefault("measured_peak_bytes", {})[name] = graph.peak_bytes
            if name == "single":
                del graph
                graph = None
        streams_q, single_q = quartiles["streams"], quartiles["single"]
        self.report["measured_ms"] = {"streams": streams_q[1], "single": single_q[1]}
        # Root-mean-square error over root-mean-square value of the outputs against the ATen
        # graph run eagerly, the median over the check's inputs.
        self.report["measured_error"] = errors
        streams = self.report["streams"]
        # Streams only where they win beyond the timings' noise: their upper quartile below one
        # region's lower quartile. Otherwise the compiler's own program, which is never slower
        # than itself.
        if streams_q[2] >= single_q[0]:
            return "single", f"measured {single_q[1]:.3f} ms as one region against {streams_q[1]:.3f} ms on {streams} streams (streams not faster beyond noise)", None
        # And, unless accuracy="any", only where they are no further from eager than the
        # compiler's own program (within 2%: float32's reassociation noise).
        if self.options["accuracy"] == "compiler" and errors["streams"] > errors["single"] * (1 + ACCURACY_SLACK):
            return "single", (
                f"streams measured {streams_q[1]:.3f} ms against {single_q[1]:.3f} ms as one region but further from eager "
                f"({errors['streams']:.2e} against {errors['single']:.2e}; option accuracy=\"any\" keeps them)"
            ), None
        return "streams", f"measured {streams_q[1]:.3f} ms on {streams} streams against {single_q[1]:.3f} ms as one region (quartiles apart)", graph

    def _shuffled(self, args, static: List[bool], seed: int) -> List[Any]:
        """``args`` with each user input's values permuted (a fixed permutation per seed)."""
        generator = torch.Generator().manual_seed(seed)
        shuffled = list(args)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and not static[i] and a.numel() > 1 and i not in self.mutated:
                order = torch.randperm(a.numel(), generator=generator).to(a.device)
                shuffled[i] = a.flatten()[order].view(a.shape)
        return shuffled


def _restore(saved) -> None:
    for tensor, value in saved:
        tensor.copy_(value)


def _float_outputs(outputs) -> List[torch.Tensor]:
    return [x.detach().float().clone() for x in torch.utils._pytree.tree_leaves(outputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _distance(got: List[torch.Tensor], expected: List[torch.Tensor]) -> float:
    """The outputs' root-mean-square difference over their root-mean-square value (0 with no
    float output). Over every element, so that two programs a rounding apart compare by their
    drift, not by the one element the largest difference happens to land on."""
    if not expected:
        return 0.0
    squared = sum(float(((a - b) ** 2).sum()) for a, b in zip(got, expected))
    scale = sum(float((b**2).sum()) for b in expected)
    return (squared / max(scale, 1e-60)) ** 0.5


def _admit_shape(signature: tuple, key: tuple, bound: int) -> bool:
    """Counts ``key`` among the shapes of the subgraph ``signature``; False (with one warning)
    when it would be one more than ``bound``."""
    seen = _SHAPES.setdefault(signature, set())
    if key in seen:
        return True
    if len(seen) >= bound:
        _warn_once(
            ("shapes", signature),
            f"nimble backend: a graph of {len(signature[1])} ops has met {bound} input shapes (option max_shapes); "
            "further shapes run without Nimble (uncaptured on a GPU, as Dynamo traced them on the CPU)",
        )
        return False
    seen.add(key)
    return True


def _static_shape_key(example_inputs: Sequence[Any]) -> Optional[tuple]:
    """The shape key of example inputs whose sizes are all concrete (None with dynamic sizes:
    such a graph counts its shapes as it captures them)."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and not all(isinstance(d, int) for d in (*x.shape, *x.stride()))):
            return None
    return shape_key(example_inputs)


def shape_key_summary(args) -> List:
    return [list(a.shape) for a in args if isinstance(a, torch.Tensor)]


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Dict[str, Any], kind: str) -> NimbleCompiled:
    """Plans, partitions and compiles one ATen graph (``kind``: forward, backward or inference)."""
    started = time.perf_counter()
    # AOTAutograd's static inputs are the forward's (parameters and buffers); a backward's
    # inputs are the forward's saved values and the gradients, found when it is captured.
    static_indices = _static_indices() if kind != "backward" else set()
    tasks = tasks_of(gm, sorted(static_indices))
    signature = (kind, tuple(op_name(n) for n in tasks.nodes))
    on_cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
    key = _static_shape_key(example_inputs)
    if not on_cuda and key is not None and not _admit_shape(signature, key, options["max_shapes"]):
        return gm.forward
    report: Dict[str, Any] = {"graph": kind, "ops": len(tasks.nodes), "algorithm": options["algorithm"]}
    uncapturable = announce_uncapturable(gm, example_inputs)
    if uncapturable is not None:
        report["uncapturable"] = uncapturable

    if kind != "inference" and on_cuda and uncapturable is None and not options["capture_training"]:
        uncapturable = "training graphs are captured only with option capture_training=True; they run as compiled regions on one stream"
        _warn_once(("training",), f"nimble backend: {uncapturable}")
        report["uncapturable"] = uncapturable

    streams_program = single_program = None
    if options["choose"] != "single" and tasks.nodes:
        streams_program = _compile_regions(gm, tasks, options["algorithm"])
        partition = streams_program.partition
        report.update(streams=partition.streams, syncs=partition.syncs, regions=len(partition.regions))
        if partition.streams == 1:
            # Already the whole graph as one region.
            single_program, streams_program = streams_program, None
            report["reason"] = f"{options['algorithm']} plans one stream: the whole graph is one region"
    need_single = single_program is None and (options["choose"] == "single" or (options["choose"] == "auto" and on_cuda and uncapturable is None))
    if need_single or (streams_program is None and single_program is None):
        single_program = _compile_regions(gm, tasks, "single")
        report.setdefault("streams", 1)
    report["compile_seconds"] = seconds_since(started)
    compiled = NimbleCompiled(
        streams_program=streams_program,
        single_program=single_program,
        options=options,
        static=[i in static_indices for i in range(len(example_inputs))],
        mutated=mutated_inputs(gm),
        gm=gm,
        kind=kind,
        signature=signature,
        report=report,
        uncapturable=uncapturable,
    )
    if options["choose"] == "single":
        compiled.chosen = "single"
        report["choice"], report["reason"] = "single", "option choose=\"single\""
    _REPORTS.append(report)
    return compiled


def nimble_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], options: Optional[dict] = None, **extra):
    """The Dynamo backend: ``torch.compile(model, backend="nimble", options={...})``, or
    ``backend=nimble_rs.backend``. Options: ``DEFAULTS``."""
    if extra:
        raise NimbleInputError(f"unexpected arguments for backend=\"nimble\": {', '.join(extra)}; pass options={{...}}")
    chosen = _options(options)
    from torch._dynamo.backends.common import aot_autograd

    from torch._functorch.aot_autograd import make_boxed_func

    # AOTAutograd's calling convention: one list of the graph's inputs.
    def inference(graph, inputs):
        return make_boxed_func(compile_graph(graph, inputs, chosen, "inference"))

    def forward(graph, inputs):
        return make_boxed_func(compile_graph(graph, inputs, chosen, "forward"))

    def backward(graph, inputs):
        return make_boxed_func(compile_graph(graph, inputs, chosen, "backward"))

    return aot_autograd(fw_compiler=forward, bw_compiler=backward, inference_compiler=inference)(gm, example_inputs)
