"""A compiled model's task graph at the level of Inductor's kernels, for research without a GPU.

``kernel_graphs(model, *args)`` compiles ``model`` with Inductor (``torch.compile``'s default
backend) and returns one task graph per graph Dynamo produced, in the project's JSON schema
(docs/cli.md): one task per kernel Inductor generates, in its launch order — a fused Triton or
C++ kernel (named as Inductor names it, ``triton_poi_fused_add_mul_3``), a template kernel, or
an extern call (``extern_kernels.mm``, ``aten.convolution``) — with the ATen ops it computes
(attribute ``aten``), its kind and output shape. Dependencies come from the buffers each kernel
reads and writes (Inductor's own dependency analysis): a read waits for the last write, a write
for the reads and the write before it. Views and reinterpretations (no kernel) pass their
dependencies through.

On a CUDA device each task gets ``duration_us``, measured by the profiler over ``repeats``
calls: a Triton kernel's by its name, an extern call's as the device time of the ATen op it
launches, matched in order; and ``kernels`` and ``sm_share`` (``occupancy``: the share of the
GPU's block slots its kernels fill), so that the simulator shares the SMs among concurrent
kernels. Such a graph runs through ``nimble-bench schedulers --simulate
--graphs DIR`` and every registered algorithm (``write_kernel_graphs``).

Only what Inductor generates for this process's compile is read: the FX graph cache is off for
it, so that Inductor lowers and schedules the graph rather than loading cached code.
"""

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ...errors import NimbleInputError
from ..program import scheduler_graph
from ..program.taskgraph import target_name


@dataclass
class _Recorded:
    """What one Inductor compile scheduled (``scheduler_graph.SchedulerReading``: its nodes in
    codegen order once the compile is done) and, for each node inside a kernel Inductor
    defined, that kernel's name and definition (one definition is one launch: Inductor's C++
    backend puts several nodes in one kernel, and a Triton kernel whose source repeats is
    launched again under the same name)."""

    reading: scheduler_graph.SchedulerReading
    kernel_of: Dict[str, tuple] = field(default_factory=dict)
    definitions: int = 0


@contextmanager
def _recording(found: List[_Recorded]):
    """The scheduler of each graph compiled inside (through its post-fusion hook) and the names
    of the kernels its backends define (their ``define_kernel``)."""
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.triton import TritonScheduling

    readings: List[scheduler_graph.SchedulerReading] = []

    def current() -> Optional[_Recorded]:
        # A kernel is defined while its graph's scheduler generates code: the last one read.
        if readings and (not found or found[-1].reading is not readings[-1]):
            found.append(_Recorded(readings[-1]))
        return found[-1] if found else None

    def remember(original):
        def define_kernel(self, src_code, nodes, *rest, **kwargs):
            name = original(self, src_code, nodes, *rest, **kwargs)
            record = current()
            if record is not None:
                record.definitions += 1
                for node in nodes:
                    if hasattr(node, "get_name"):
                        record.kernel_of[node.get_name()] = (record.definitions, name)
            return name

        return define_kernel

    patched = []
    # Each backend's own definition (Triton's overrides SIMD's; C++ has its own).
    for owner in (SIMDScheduling, TritonScheduling, CppScheduling):
        if "define_kernel" in owner.__dict__:
            patched.append((owner, "define_kernel", owner.__dict__["define_kernel"]))
            owner.define_kernel = remember(owner.__dict__["define_kernel"])
    try:
        with scheduler_graph.reading(readings):
            yield
        # Graphs whose kernels were all extern calls defined none.
        for reading in readings:
            if not any(r.reading is reading for r in found):
                found.append(_Recorded(reading))
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)


def _extern_name(node) -> str:
    ir_node = node.node
    overload = getattr(ir_node, "op_overload", None)
    if overload is not None and hasattr(overload, "_schema"):
        return target_name(overload)
    name = getattr(ir_node, "python_kernel_name", None) or type(ir_node).__name__
    # Inductor's out-variant wrappers call the ATen op of the same name (extern_kernels.mm).
    if name.startswith("extern_kernels."):
        return "aten::" + name.split(".", 1)[1]
    return name


def _shape(node) -> Optional[List[Any]]:
    try:
        outputs = node.get_outputs()
        size = outputs[0].node.get_size() if outputs else None
    except Exception:  # some extern and multi-output nodes have no single layout
        return None
    if size is None:
        return None
    return [int(d) if getattr(d, "is_number", True) else str(d) for d in size]


def _graph_of(record: _Recorded) -> dict:
    """The task graph of one recorded compile: one task per kernel launch, views contracted."""
    nodes = record.reading.nodes
    kinds = [scheduler_graph.kind(n) for n in nodes]
    tasks: List[dict] = []
    task_of_key: Dict[Any, int] = {}
    task_of_node: List[Optional[int]] = []
    for i, (node, kind) in enumerate(zip(nodes, kinds)):
        if kind == "view":
            task_of_node.append(None)
            continue
        key, name = ("node", i), None
        if kind == "extern":
            name = _extern_name(node)
        else:
            defined = next((record.kernel_of[b.get_name()] for b in node.get_nodes() if b.get_name() in record.kernel_of), None)
            if defined is not None:
                key, name = ("kernel", defined[0]), defined[1]
            else:  # a kernel Inductor defined some other way (combo, foreach)
                from torch._inductor.utils import get_fused_kernel_name

                name = get_fused_kernel_name(node.get_nodes(), "original_aten")
        if key not in task_of_key:
            task_of_key[key] = len(tasks)
            tasks.append({"id": len(tasks), "op": name, "attrs": {"kind": kind, "aten": [], "inductor_nodes": []}})
            shape = _shape(node)
            if shape is not None:
                tasks[-1]["attrs"]["out_shape"] = shape
        task = task_of_key[key]
        attrs = tasks[task]["attrs"]
        attrs["aten"] = sorted(set(attrs["aten"]) | set(scheduler_graph.aten_ops(node)))
        attrs["inductor_nodes"].append(node.get_name())
        if kind == "reduction":
            attrs["kind"] = "reduction"
        task_of_node.append(task)

    edges = set()
    for i, before in enumerate(scheduler_graph.dependencies(record.reading, nodes, kinds)):
        task = task_of_node[i]
        if task is None:
            continue
        edges.update((task_of_node[p], task) for p in before if task_of_node[p] != task)
    return {"nodes": tasks, "edges": sorted([u, v] for u, v in edges)}


def _measure_durations(graph: dict, run, repeats: int) -> Optional[str]:
    """Sets ``duration_us`` on every task from a profile of ``repeats`` calls of ``run``, and
    ``kernels`` and ``sm_share`` from its trace (``occupancy``; the graph's ``occupancy_missing``
    says why not); returns why not, if some task's kernels could not be found."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from . import occupancy

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "trace.json"
        prof.export_chrome_trace(str(trace))
        trace_events = json.loads(trace.read_text()).get("traceEvents", [])
    limits = occupancy.SmLimits.of_device()
    attrs = graph.setdefault("attrs", {})
    attrs["sm_limits"] = limits.as_dict()
    why = occupancy.set_occupancy(graph, trace_events, repeats, limits)
    if why is not None:
        attrs["occupancy_missing"] = why
    events = prof.events()
    kernel_total: Dict[str, float] = {}
    for event in events:
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernel_total[event.name] = kernel_total.get(event.name, 0.0) + event.device_time
    launches: Dict[str, int] = {}
    for node in graph["nodes"]:
        launches[node["op"]] = launches.get(node["op"], 0) + 1
    # Extern calls: the ATen ops called from Inductor's code, in order, with their kernels' time.
    calls: Dict[str, List[float]] = {}
    for event in events:
        if event.device_type == torch.autograd.DeviceType.CPU and event.name.startswith("aten::") and (event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::")):
            calls.setdefault(event.name, []).append(event.device_time_total)
    used: Dict[str, int] = {}
    missing = []
    for node in graph["nodes"]:
        op = node["op"]
        if node["attrs"]["kind"] == "extern":
            # The k-th call of this op in each repeat.
            times = occupancy.kth_calls(calls, op, used, repeats)
            if times is None:
                missing.append(op)
                continue
            node["duration_us"] = sum(times) / repeats
        elif op in kernel_total:
            node["duration_us"] = kernel_total[op] / repeats / launches[op]
        else:
            missing.append(op)
    if missing:
        return f"no profiled kernel for {len(missing)} of {len(graph['nodes'])} tasks (first: {missing[0]})"
    return None


def kernel_graphs(model, *args, repeats: int = 20, **kwargs) -> List[dict]:
    """The task graphs of Inductor's kernels for ``model(*args, **kwargs)``, one per graph Dynamo
    produced, each with ``attrs``: the graph's kernels, and on CUDA the measured durations (or
    ``durations_missing`` saying why not)."""
    if repeats < 1:
        raise NimbleInputError(f"repeats={repeats}: expected at least 1 profiled call")
    torch._dynamo.reset()
    recorded: List[_Recorded] = []
    compiled = torch.compile(model)
    with _recording(recorded):
        compiled(*args, **kwargs)
    graphs = [_graph_of(r) for r in recorded if r.reading.nodes]
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in list(args) + list(kwargs.values()))
    if cuda and graphs:
        for _ in range(3):  # autotuning and lazy loading happen in the first calls
            compiled(*args, **kwargs)
        # Every graph's kernels are in one profile; a name met in several graphs is split evenly.
        for graph in graphs:
            why = _measure_durations(graph, lambda: compiled(*args, **kwargs), repeats)
            if why is not None:
                graph.setdefault("attrs", {})["durations_missing"] = why
    torch._dynamo.reset()
    return graphs


def write_kernel_graphs(graphs: List[dict], directory: str, name: str) -> List[str]:
    """Writes each graph as ``DIRECTORY/NAME.graph.json`` (``NAME-2.graph.json``, … after the first; what ``schedulers --simulate --graphs DIRECTORY`` reads); returns
    the paths. An existing file of that name is an error, not overwritten."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, graph in enumerate(graphs):
        path = Path(directory) / (f"{name}.graph.json" if i == 0 else f"{name}-{i + 1}.graph.json")
        if path.exists():
            raise NimbleInputError(f"{path} exists; remove it or pick another name (kernel graphs are never overwritten)")
        paths.append(str(path))
    for graph, path in zip(graphs, paths):
        Path(path).write_text(json.dumps(graph, indent=1) + "\n")
    return paths
