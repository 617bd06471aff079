"""What the backend returns for one graph: its programs (the plan's streams, and the compiler's
own program as one stream), the choice between them measured on the first capture, and one CUDA
graph per input shape, replayed; training forwards and backwards replayed without overwriting
values autograd still holds."""

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from .accuracy import ACCURACY_INPUTS, HOST_REFERENCES_BYTES, check_inputs, distance, float_outputs, heuristic_convolutions, median, within_accuracy
from ..common.announce import warn_once
from ..common import phases
from ..common.phases import in_phase
from .runner import CapturedGraph, Program, forward_outputs, shape_key
from ..common.timing import quartiles, seconds_since, time_samples_ms
from ..options import Options

# When the first timings do not tell the programs apart but the streams' median is the lower,
# both are timed this many times more, in turns, before one region is kept for want of proof.
RETIMINGS = 3
# The input shapes seen so far per subgraph given to the backend without Dynamo (by its kind
# and op sequence); under Dynamo they are kept with the code Dynamo compiled (``code_state``).
_SHAPES: Dict[tuple, dict] = {}


def code_state(code) -> Dict[str, Any]:
    """The backend's state kept with a code object Dynamo compiled, in Dynamo's own per-code
    context, which ``torch._dynamo.reset()`` clears along with Dynamo's counts of its
    recompiles (and its frame numbers, which it then gives out from 0 again)."""
    from torch._dynamo.code_context import code_context

    return code_context.get_context(code).setdefault("nimble_rs", {"graphs": {}, "shapes": {}})


@dataclass
class NimbleCompiled:
    """What the backend returns for one ATen graph: the compiled programs and their captures."""

    streams_program: Optional[Program]
    single_program: Optional[Program]
    options: Options
    static: List[bool]
    mutated: List[int]
    gm: torch.fx.GraphModule
    kind: str
    signature: tuple
    report: dict
    uncapturable: Optional[str]
    # Inputs the program writes though the graph does not (Inductor reusing a backward's saved
    # values, "donated buffers", as scratch): put back around warm-ups and the choice, as the
    # mutated ones are, never copied back to the caller.
    clobbered: List[int] = field(default_factory=list)
    captures: Dict[tuple, Optional[CapturedGraph]] = field(default_factory=dict)
    last: Optional[CapturedGraph] = None
    chosen: Optional[str] = None
    # A backward's second graph per input shape, whose gradients autograd copies: it runs the
    # calls that find the lending graph's gradients still held (kept across backward calls).
    copying: Dict[tuple, CapturedGraph] = field(default_factory=dict)
    # A second plan timed at the choice beside ``streams_program`` (option time_critical_path):
    # the heaviest path first, at high priority. Kept in its place if it is the faster.
    critical_program: Optional[Program] = None
    # The leading outputs the accuracy check compares (None: all of them). A training forward's
    # are the inputs it updates and the user's outputs; the values it saves for its backward,
    # which follow, are its bulk (the encoder's: five sets of them at 10 GB held by the check).
    checked_outputs: Optional[int] = None

    def _program(self) -> Program:
        if self.chosen == "single" or self.streams_program is None:
            assert self.single_program is not None
            return self.single_program
        return self.streams_program

    def __call__(self, *args):
        if phases.CALL_WATCHERS:
            phases.called(self, args)
        # The common case first, with as little Python as possible: the last graph replayed.
        last = self.last
        if last is not None and last.checks_after_launch and last.accepts_user_inputs(args):
            outputs = last.replay_checked(args)
            if outputs is not None:
                return outputs
        elif last is not None and last.accepts(args):
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
            # Same shapes, but a parameter or buffer is another tensor now, or its memory moved
            # (`p.data = other`): the old graph reads the old memory. Capture again in its place.
            warn_once(("moved", self.signature), "nimble backend: a parameter or buffer of a captured graph was replaced by another tensor or moved to other memory; capturing again")
        elif not admit_shape(self.signature, key, self.options.max_shapes):
            return self._uncaptured(args)
        self.last = self.captures[key] = None  # the old graph's memory goes before the new capture
        self.copying.pop(key, None)
        graph = self.captures[key] = self.last = self._capture(args)
        self.report["captured_shapes"] = len(self.captures)
        return graph(args) if self.kind == "inference" else self._training_replay(graph, args)

    def _training_replay(self, graph: CapturedGraph, args):
        """A training forward's or backward's replay. A forward whose last outputs its backward
        has not read yet (a second forward before one backward, as in gradient accumulation)
        runs uncaptured, so that the graph does not overwrite them."""
        if self.kind == "forward":
            if graph.pending and not graph.outputs_released():
                warn_once(("pending", self.signature), "nimble backend: a forward ran again before the backward of its last call; it runs uncaptured until that backward has run")
                return self._uncaptured(args)
            outputs = graph(args)
            graph.pending = True
            return outputs
        if not graph.outputs_released() and graph.lends_outputs:
            # The gradients it lent last time are still held (kept from one backward call to the
            # next: zero_grad(set_to_none=False), accumulation over micro-batches), so its
            # memory is theirs: this call runs on a second graph of the shape, captured once,
            # whose gradients autograd copies. Once they are dropped, the lending graph is back.
            key = shape_key(args)
            graph = self.copying.get(key)
            if graph is None:
                warn_once(("kept", self.signature), "nimble backend: the gradients a captured backward lent were still held at its next call (kept across backward calls); such calls run on a second graph, whose gradients autograd copies")
                graph = self.copying[key] = self._capture(args, lend=False)
            self.report["copied_calls"] = self.report.get("copied_calls", 0) + 1
        if not graph.outputs_released():
            # Autograd still holds the last call's gradients (it sums several backward calls'
            # before accumulating them): this call's must be new tensors.
            warn_once(("held", self.signature), "nimble backend: a backward ran while autograd still held the gradients of its last call; it runs uncaptured")
            return self._uncaptured(args)
        outputs = graph(args)
        for forward in graph.consumes:
            forward.pending = False
        return outputs

    def _uncaptured(self, args):
        self.report["uncaptured_calls"] = self.report.get("uncaptured_calls", 0) + 1
        return self._program().run(args)

    @in_phase("capture", lambda self, *args, **kwargs: self.kind)
    def _capture(self, args, lend: bool = True) -> CapturedGraph:
        """A new CUDA graph for ``args``' shapes (choosing the program first, on the first
        capture); a backward's lends its gradients unless ``lend`` is False."""
        started = time.perf_counter()
        # Warm-ups, the choice's timings and its accuracy check all run the graph: the inputs it
        # writes in place (a buffer's running statistics, a counter) are put back afterwards, so
        # that the user's call writes them once, as eager would.
        saved = [(args[i], args[i].clone()) for i in sorted(set(self.mutated) | set(self.clobbered)) if isinstance(args[i], torch.Tensor)]
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
                prologue = getattr(self.streams_program, "prologue", None)
                if self.chosen == "single" and prologue is not None:
                    # The hoisted kernels' values, kept for the plans timed, are not read.
                    prologue.release()
            if graph is None:
                graph = self._captured(self._program(), args, static, lend)
        finally:
            _restore(saved)
        graph.consumes = tuple(consumes)
        if self.kind != "inference":
            graph.track_outputs(forward=self.kind == "forward")
        elif self.options.check_after_launch and not self.clobbered and graph.check_after_launch():
            # (A backward's inputs read in place are new tensors on every call, and its storages
            # are counted by outputs_released: training graphs check before the launch.)
            self.report["addresses_checked"] = "after the launch"
        if self.kind == "backward" and lend:
            graph.lends_outputs = True
            self.report["gradients"] = "lent"
        # A backward's second graph (gradients copied, see _training_replay) apart from its first.
        if getattr(graph, "hoisted", None) is not None:
            # Kept outside the graph's pool (option hoist_weight_kernels).
            self.report["hoisted_bytes"] = graph.hoisted.bytes
        peaks = "peak_bytes" if lend else "copying_peak_bytes"
        self.report.setdefault(peaks, {})[str(shape_key_summary([args[i] for i in graph.copied]))] = graph.peak_bytes
        self.report["capture_seconds"] = self.report.get("capture_seconds", 0.0) + seconds_since(started)
        return graph

    @in_phase("captured", lambda self, *args, **kwargs: self.kind)
    def _captured(self, program, args, static, lend: bool = True) -> CapturedGraph:
        """``program`` captured for ``args`` into ``_pool(lend)``, its stream 0 at high priority
        if the program asks (the critical-path plan) or option ``priority`` does."""
        priority = getattr(program, "priority", self.options.priority)
        return CapturedGraph(program, args, static, self.options.warmups, self.mutated, self._pool(lend), priority)

    def _pool(self, lend: bool = True):
        """The memory pool of a new capture: the shared one (None), or for a backward that lends
        its gradients one of its own (see ``runner.shared_pool``)."""
        return torch.cuda.graph_pool_handle() if self.kind == "backward" and lend else None

    @in_phase("choice", lambda self, *args, **kwargs: self.kind)
    def _choose(self, args, saved, static):
        """The program to keep (``streams`` or ``single``), why, and its captured graph when the
        choice captured it last (else None: captured again, so that only one graph's memory is
        held at a time; both are held only while timed again, ``RETIMINGS``)."""
        if self.streams_program is None:
            return "single", self.report.get("reason", "one stream: the whole graph is one region"), None
        if self.single_program is None:
            return "streams", "option choose=\"streams\"", None
        # The accuracy check's inputs: the capture's own and shuffles of its values (the same
        # distribution: token ids stay token ids), user inputs only; each made again where it
        # is used (seeded: the same each time), so that one is on the device at a time.
        def checks(index: int) -> List[Any]:
            return list(args) if index == 0 else self._shuffled(args, static, index - 1)

        try:
            expected = self._references(saved, checks)
        except torch.OutOfMemoryError:
            # The ATen graph run op by op holds more than the compiler's fused kernels.
            return self._out_of_memory("eager's references for the accuracy check", ["references"])
        candidates = [("single", self.single_program), ("streams", self.streams_program)]
        if self.critical_program is not None:
            candidates.append(("critical", self.critical_program))
        samples: Dict[str, List[float]] = {}
        errors: Dict[str, float] = {}
        # The fastest streams' graph so far, (name, graph): if they win, it is kept as it is. At
        # most two graphs' memory is held at a time.
        fastest: Optional[tuple] = None
        for name, program in candidates:
            try:
                graph, samples[name], errors[name] = self._measured(name, program, args, static, saved, checks, expected)
            except torch.OutOfMemoryError:
                # A plan on streams holds more memory than one region (buffers kept across
                # streams): where the device has no room for it, the compiler's own program runs.
                if name == "single":
                    return self._out_of_memory("capturing one region beside eager's references", ["single"])
                self.report.setdefault("out_of_memory", []).append(name)
                continue
            if name != "single" and (fastest is None or quartiles(samples[name])[1] < quartiles(samples[fastest[0]])[1]):
                fastest = (name, graph)
            del graph
        plans = [name for name, _ in candidates[1:] if name in samples]
        if "out_of_memory" in self.report:
            short = ", ".join(self.report["out_of_memory"])
            if not plans:
                return self._out_of_memory(f"capturing the plan on streams ({short})", [])
            warn_once(("memory", self.signature), f"nimble backend: capturing the plan on streams ({short}) ran out of device memory at the choice; the other plans were compared")

        # No further from eager than the compiler's own program, within its noise, unless
        # accuracy="any".
        def accurate(name: str) -> bool:
            return self.options.accuracy == "any" or within_accuracy(errors[name], errors["single"], self.report["measured_spread"])

        # The streams to hold against one region: the fastest accurate plan, by median (if none
        # is accurate, the fastest, which the check below then turns down).
        best = min([n for n in plans if accurate(n)] or plans, key=lambda n: quartiles(samples[n])[1])
        program = dict(candidates)[best]
        graph = fastest[1] if fastest is not None and fastest[0] == best else None
        fastest = None
        streams_q, single_q = quartiles(samples[best]), quartiles(samples["single"])
        if streams_q[2] >= single_q[0] and streams_q[1] < single_q[1]:
            # Not apart, though the streams' median is lower: a noisy moment (one such choice
            # kept one region 17% slower, by median, than the streams). One region is captured
            # again and both are timed in turns (both graphs held meanwhile), all samples pooled.
            try:
                if graph is None:
                    graph = self._captured(program, args, static)
                single = self._captured(self.single_program, args, static)
                for _ in range(RETIMINGS):
                    samples["single"] += time_samples_ms(lambda: single(args))
                    samples[best] += time_samples_ms(lambda: graph(args))
                del single
            except torch.OutOfMemoryError:
                return self._out_of_memory(f"timing one region ({single_q[1]:.3f} ms) and the plan on streams ({streams_q[1]:.3f} ms, not apart) again, both captured,", ["timed again"])
            streams_q, single_q = quartiles(samples[best]), quartiles(samples["single"])
            self.report["timed_again"] = RETIMINGS
        again = f", {RETIMINGS} more timings each" if "timed_again" in self.report else ""
        self.report["measured_ms"] = {name: quartiles(values)[1] for name, values in samples.items()}
        # Root-mean-square error over root-mean-square value of the outputs against the ATen
        # graph run eagerly, the median over the check's inputs.
        self.report["measured_error"] = errors
        streams = program.partition.streams
        first = " (the heaviest path first, at high priority)" if best == "critical" else ""
        # Streams only where they win beyond the timings' noise: their upper quartile below one
        # region's lower quartile. Otherwise the compiler's own program, which is never slower
        # than itself.
        if streams_q[2] >= single_q[0]:
            return "single", f"measured {single_q[1]:.3f} ms as one region against {streams_q[1]:.3f} ms on {streams} streams{first} (streams not faster beyond noise{again})", None
        # And only where they are accurate (above).
        if not accurate(best):
            return "single", (
                f"streams measured {streams_q[1]:.3f} ms against {single_q[1]:.3f} ms as one region but further from eager "
                f"({errors[best]:.2e} against {errors['single']:.2e}, which runs {self.report['measured_spread']:.2e} from itself; "
                f"option accuracy=\"any\" keeps them)"
            ), None
        if best == "critical":
            self._adopt(program)
        return "streams", f"measured {streams_q[1]:.3f} ms on {streams} streams{first} against {single_q[1]:.3f} ms as one region (quartiles apart{again})", graph

    def _references(self, saved, checks) -> List[List[torch.Tensor]]:
        """Eager's outputs (the ATen graph run op by op) on the check's inputs, as float32."""
        expected, where, kept = [], None, ACCURACY_INPUTS
        for index in range(ACCURACY_INPUTS):
            if index == kept:
                break
            _restore(saved)
            with torch.no_grad(), heuristic_convolutions():
                outputs = float_outputs(self._checked(self.gm(*checks(index))), copy=False)
            if where is None:
                # Eager's outputs on every input are held while the programs are timed: a
                # backward's every gradient, five times over, could exhaust the device. As many
                # inputs as a quarter of its free memory holds (at least one), the count in the
                # report where fewer; large ones in host memory (``HOST_REFERENCES_BYTES``).
                size = sum(x.numel() * 4 for x in outputs)
                kept = check_inputs(size, torch.cuda.mem_get_info()[0])
                if kept < ACCURACY_INPUTS:
                    self.report["accuracy_inputs"] = kept
                where = "cpu" if size > HOST_REFERENCES_BYTES else None
                if where is not None:
                    self.report["references"] = "host"
            expected.append([x.to(where or x.device, torch.float32, copy=True) for x in outputs])
            del outputs
        return expected

    def _out_of_memory(self, what: str, names: List[str]):
        """The choice's answer where ``what`` ran out of device memory: one region, captured once
        the choice's memory is let go (as reduce-overhead's would be), with one warning;
        ``names`` (what ran short) added to the report's ``out_of_memory``."""
        self.report.setdefault("out_of_memory", []).extend(names)
        warn_once(("memory", self.signature), f"nimble backend: {what} ran out of device memory at the choice; Inductor's own program runs, captured alone")
        return "single", f"{what} ran out of device memory at the choice; one region, captured alone", None

    def _measured(self, name: str, program, args, static, saved, checks, expected):
        """``program`` captured for ``args`` (``name`` the candidate's), its timings and its median
        distance from eager's outputs ``expected`` on the inputs ``checks(index)`` makes; for one
        region, also its spread."""
        graph = self._captured(program, args, static)
        samples = time_samples_ms(lambda: graph(args))
        distances, spread = [], []
        for index, reference in enumerate(expected):
            _restore(saved)
            inputs = checks(index)
            # The compiler's own program's outputs are copied: each input runs once more, for
            # how far that program is from itself (its spread).
            got = float_outputs(self._checked(graph(inputs)), copy=name == "single")
            distances.append(distance(got, reference))
            if name == "single":
                _restore(saved)
                spread.append(distance(float_outputs(self._checked(graph(inputs)), copy=False), got))
            del got
        if name == "single":
            self.report["measured_spread"] = median(spread)
        self.report.setdefault("measured_peak_bytes", {})[name] = graph.peak_bytes
        return graph, samples, median(distances)

    def _checked(self, outputs) -> List[Any]:
        """The outputs the accuracy check compares (``checked_outputs``)."""
        leaves = torch.utils._pytree.tree_leaves(outputs)
        return leaves if self.checked_outputs is None else leaves[: self.checked_outputs]

    def _adopt(self, program) -> None:
        """The critical-path plan in the primary plan's place, and in the report."""
        self.streams_program = program
        partition = program.partition
        self.report.update(algorithm=partition.algorithm, priority=True, streams=partition.streams, syncs=partition.syncs, regions=partition.regions)
        for key in program.MEMORY_KEYS:  # the primary plan's, where the critical path has none
            self.report.pop(key, None)
        self.report.update(program.memory_report())

    def _shuffled(self, args, static: List[bool], seed: int) -> List[Any]:
        """``args`` with each user input's values permuted (a fixed permutation per seed), the
        permutation drawn where the input is (on the host, a batch of images took 0.15-0.2 s
        each), from a generator of its own: the process's random state is left as it is."""
        generators: Dict[torch.device, torch.Generator] = {}
        shuffled = list(args)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and not static[i] and a.numel() > 1 and i not in self.mutated and i not in self.clobbered:
                if a.device not in generators:
                    generators[a.device] = torch.Generator(device=a.device).manual_seed(seed)
                order = torch.randperm(a.numel(), generator=generators[a.device], device=a.device)
                shuffled[i] = a.flatten()[order].view(a.shape)
        return shuffled


def _restore(saved) -> None:
    """Puts back the values ``saved`` held, through ``.data``: a tensor's version (autograd's
    check that a value it saved was not changed since) stays what the user's program made it."""
    for tensor, value in saved:
        tensor.data.copy_(value)


def admit_shape(signature: tuple, key: tuple, bound: int) -> bool:
    """Counts ``key`` among the shapes of the subgraph ``signature`` (``graphs.signature``:
    its kind, ATen ops and, under Dynamo, the code it came from, by which it is counted then);
    False (with one warning) when it would be one more than ``bound``."""
    kind, ops, code = signature
    shapes, graph = (_SHAPES, ops) if code is None else (code_state(code[0])["shapes"], code[1])
    counted = shapes.setdefault((kind, graph), {"seen": set(), "warned": False})
    if key in counted["seen"]:
        return True
    if len(counted["seen"]) >= bound:
        if not counted["warned"]:
            counted["warned"] = True
            warnings.warn(
                f"nimble backend: a graph of {len(ops)} ATen ops has met {bound} input shapes (option max_shapes); "
                "further shapes run without Nimble's plan (uncaptured on a GPU; on the CPU as compiled, or as Dynamo traced them with granularity \"regions\")",
                RuntimeWarning,
                stacklevel=3,
            )
        return False
    counted["seen"].add(key)
    return True




def shape_key_summary(args) -> List:
    return [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
