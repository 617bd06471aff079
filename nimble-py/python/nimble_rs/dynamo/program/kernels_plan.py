"""Inductor's compiled program for a whole graph, planned kernel by kernel (granularity
``"kernels"``, the default): Inductor compiles the graph once, as it would for
``torch.compile``; its kernels (``wrapper.WrapperProgram``) become the task graph the Rust
registry plans; the plan's regions (maximal one-stream runs with no sync inside) give every
kernel its stream.

Two programs come of one compile, with ``run(args)`` (on the current stream, or the CPU) and
``launch(args, streams)`` (inside a capture) as ``runner.Program`` has them:
``InductorProgram``, Inductor's own ``call``, and ``PlannedProgram``, its statements emitted again
in the plan's order, each kernel on its stream (on the CPU, in plan order on one stream).
"""

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from ... import scheduling
from . import hoist
from ..common.phases import in_phase
from .emit import Schedule
from .wrapper import WrapperProgram


@dataclass
class PlanSummary:
    """What ``CapturedGraph`` and the report need of a plan."""

    algorithm: str
    streams: int
    syncs: int
    regions: int
    kernels: int


def inductor_module(compiled) -> Any:
    """The Python module Inductor generated for ``compiled`` (a ``CompiledFxGraph``)."""
    from torch._inductor.codecache import PyCodeCache

    key = getattr(compiled, "cache_key", None)
    if key:
        for module in reversed(PyCodeCache.modules):
            if module.__name__.endswith(key):
                return module
    runner = getattr(getattr(compiled, "current_callable", None), "__self__", None)
    if runner is not None:
        return sys.modules[type(runner).__module__]
    raise LookupError("Inductor's module for a compiled graph was not found")


def _aligned(function, compiled):
    """``function`` behind Inductor's own check that inputs it assumed aligned are (a copy of
    the misaligned ones otherwise), as Inductor wraps its ``call``."""
    check = list(getattr(compiled, "inputs_to_check", None) or ())
    if not check:
        return function
    from torch._inductor.utils import align_inputs_from_check_idxs
    from torch.utils._ordered_set import OrderedSet

    return align_inputs_from_check_idxs(function, check, OrderedSet(getattr(compiled, "mutated_input_idxs", None) or ()))


class InductorProgram:
    """Inductor's program as it compiled it: every kernel on the current stream."""

    def __init__(self, compiled, kernels: int):
        self.call = compiled.current_callable
        self.partition = PlanSummary(algorithm="single", streams=1, syncs=0, regions=1, kernels=kernels)

    def run(self, args: Sequence[Any]):
        return self.call(list(args))

    def launch(self, args: Sequence[Any], streams: List[Any]):
        return self.call(list(args))


class PlannedProgram:
    """Inductor's kernels on the plan's streams."""

    @in_phase("program")
    def __init__(self, compiled, wrapper: WrapperProgram, plan: dict, cut: dict, priority: bool = False, prologue: Optional[hoist.Prologue] = None):
        # Whether its capture puts the plan's stream 0 at the device's highest priority.
        self.priority = priority
        # The kernels on weights alone, run before the program (``prepare``) where hoisted
        # (option hoist_weight_kernels; one prologue, and its kept values, per compiled graph).
        self.prologue = prologue
        self.prepare = self.prologue.prepare if self.prologue is not None else None
        self.partition = PlanSummary(
            algorithm=plan["algorithm"], streams=plan["streams"], syncs=plan["syncs"], regions=len(cut["regions"]), kernels=len(wrapper.tasks)
        )
        self.wrapper = wrapper
        self.schedule = Schedule(wrapper, cut["regions"], cut["syncs"])
        # Proven before it runs: every kernel after every kernel it depends on.
        self.schedule.check()
        cache = self.prologue.cache if self.prologue is not None else None
        self._in_order = _aligned(self.schedule.function(False, cache), compiled)
        self._on_streams = self.schedule.function(True, cache)
        self._compiled = compiled
        self.shared_buffers = self.schedule.shared
        self.kept_to_end = self.schedule.kept_to_end
        self.allocated_ahead = self.schedule.allocated_ahead
        self.allocated_first = self.schedule.allocated_first

    # The report's keys ``memory_report`` may write.
    MEMORY_KEYS = ("shared_buffers", "shared_kept_to_end", "allocated_ahead", "allocated_before_fork")

    def memory_report(self) -> Dict[str, int]:
        """The report's keys on the plan's memory: storages shared by streams, those kept to
        the end, and (where any) allocations made ahead of the kernels writing their disjoint
        parts on several streams, and of those, the ones made before the fork."""
        found = {"shared_buffers": self.shared_buffers, "shared_kept_to_end": self.kept_to_end}
        if self.allocated_ahead:
            found["allocated_ahead"] = self.allocated_ahead
        if self.allocated_first:
            found["allocated_before_fork"] = self.allocated_first
        return found

    def run(self, args: Sequence[Any]):
        if self.prepare is not None:
            self.prepare(args)
        return self._in_order(list(args))

    def launch(self, args: Sequence[Any], streams: List[Any]):
        """Inside a capture: the hoisted kernels, if any, ran before it (``prepare``)."""
        raw = [s.cuda_stream for s in streams]
        return _aligned(lambda values: self._on_streams(values, streams, raw), self._compiled)(list(args))


def same_plan(a: dict, b: dict) -> bool:
    """Whether two plans of one task graph put the same tasks together on streams, in the same
    order, with the same syncs (stream numbers aside)."""

    def streams(p: dict):
        members: Dict[int, List[str]] = {}
        for task in p["order"]:
            members.setdefault(p["stream_of"][str(task)], []).append(task)
        return sorted(members.values())

    return streams(a) == streams(b) and sorted(map(tuple, a["sync_edges"])) == sorted(map(tuple, b["sync_edges"]))


@in_phase("plan")
def plan(wrapper: WrapperProgram, algorithm: str):
    """``algorithm``'s plan for the kernels and its regions, from the Rust registry, with the
    kernels set aside (``WrapperProgram.set_aside``) on a stream of their own (``side_stream``)."""
    answer = scheduling.regions(wrapper.task_graph(), algorithm)
    return side_stream(wrapper, answer["plan"], answer["regions"])


def side_stream(wrapper: WrapperProgram, plan: dict, cut: dict):
    """``plan`` and its regions with the kernels set aside on one more stream, a region each,
    issued first in Inductor's order. A region of the plan is cut before each of its tasks that
    reads one of them later than any its stream waited for so far, and that part waits for the
    last one it reads: a kernel waits for its weight, not its region's last weight (with one
    stream, the whole program is one region)."""
    side = {index: n for n, index in enumerate(wrapper.side)}
    if not side:
        return plan, cut
    stream = plan["streams"]
    regions = [{"stream": stream, "nodes": [wrapper.task_of[index]]} for index in wrapper.side]
    needs = wrapper.kernel_needs()
    waited: Dict[int, int] = {}
    syncs: List[List[int]] = []
    first: Dict[int, int] = {}
    last: Dict[int, int] = {}
    for r, region in enumerate(cut["regions"]):
        part = None
        for task in region["nodes"]:
            latest = max((side[j] for i in wrapper.tasks[task].statements for j in needs[i] if j in side), default=-1)
            fresh = latest > waited.get(region["stream"], -1)
            if part is None or fresh:
                part = len(regions)
                regions.append(dict(region, nodes=[]))
                first.setdefault(r, part)
                if fresh:
                    waited[region["stream"]] = latest
                    syncs.append([latest, part])
            regions[part]["nodes"].append(task)
        last[r] = part
    added = len(syncs)
    syncs += [[last[a], first[b]] for a, b in cut["syncs"]]
    return dict(plan, streams=stream + 1, syncs=plan["syncs"] + added, side_stream=stream), dict(cut, streams=stream + 1, regions=regions, syncs=syncs)
