"""Inductor's fused kernels as its scheduler holds them, not as its generated text says.

``reading(found)`` installs a pass through the scheduler's post-fusion hook
(``torch._inductor.config._post_fusion_custom_pass``, in every supported torch) that changes
nothing and keeps the ``Scheduler`` of each graph Inductor compiles meanwhile; once that compile
is done, the scheduler's ``nodes`` are the ones its code was generated from, in that order. The
FX graph cache is off inside, so that Inductor schedules the graph rather than loading code.

Each node after fusion is one kernel launch (a fused Triton or C++ kernel, a template, an extern
call) or none (a view, the pick of one output of a multi-output call: ``kind`` "view"). Its
reads and writes are Inductor's own dependency analysis, by buffer, with mutations mapped back to
the buffer they write (``mutation_real_name``): ``dependencies`` orders them as the text reader
orders storages (a read after the last write, a write after the reads and write before it), views
contracted. Unlike the text, these buffers are the graph's values before Inductor's memory
planning reuses one buffer's memory for a later one, so the only orders are the data's.

What this reading feeds: ``kernel_graphs`` (the research loop's fused-kernel graphs), the
comparison with the text reader (``readings.compare``), and, keyed by the nodes' names, a plan
that Inductor's own stream machinery (2.13+) could emit.
"""

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set

import torch

from .taskgraph import Accesses, target_name

HOOK = "_post_fusion_custom_pass"


def available() -> bool:
    """Whether this torch's Inductor has the post-fusion hook."""
    import torch._inductor.config as config

    return hasattr(config, HOOK)


@dataclass
class SchedulerReading:
    """One graph's scheduler, kept from the hook; ``nodes`` are final once its compile is done."""

    scheduler: Any

    @property
    def nodes(self) -> List[Any]:
        return list(self.scheduler.nodes)

    def real(self, name: str) -> str:
        """The buffer a name writes: a mutation's output is the buffer it mutates."""
        return self.scheduler.mutation_real_name.get(name, name)


@contextmanager
def reading(found: List[SchedulerReading]):
    """Inside, every graph Inductor compiles appends its ``SchedulerReading`` to ``found``
    (a pass set before is still run, after the reading's)."""
    import torch._inductor.config as config

    if not available():
        raise RuntimeError(f"torch {torch.__version__}'s Inductor has no {HOOK}")
    previous: Optional[Callable] = getattr(config, HOOK)
    seen: Set[int] = set()

    def keep(nodes):
        if nodes and id(nodes[0].scheduler) not in seen:
            seen.add(id(nodes[0].scheduler))
            found.append(SchedulerReading(nodes[0].scheduler))
        return previous(nodes) if previous is not None else nodes

    with config.patch({HOOK: keep, "fx_graph_cache": False}):
        yield


def kind(node) -> str:
    """``view`` (no kernel: a view, or the pick of one output of a multi-output extern call),
    ``extern``, ``template``, ``reduction`` or ``pointwise``."""
    from torch._inductor import ir
    from torch._inductor import scheduler as s

    if isinstance(node, s.NopKernelSchedulerNode) or isinstance(getattr(node, "node", None), ir.MultiOutput):
        return "view"
    if node.is_extern():
        return "extern"
    if node.is_template():
        return "template"
    return "reduction" if node.is_reduction() else "pointwise"


def aten_ops(node) -> List[str]:
    """The ATen ops a node computes (its FX origins'), sorted."""
    ops = set()
    for base in node.get_nodes():
        for origin in getattr(base.node, "origins", ()) if base.node is not None else ():
            if origin.op != "call_function":
                continue
            ops.add(target_name(origin.meta.get("original_aten") or origin.target))
    return sorted(ops)


def accesses(reading: SchedulerReading, node) -> tuple:
    """(buffers read, buffers written) by ``node``, by the buffers' real names."""
    reads = {reading.real(d.name) for d in node.read_writes.reads}
    writes = {reading.real(d.name) for d in node.read_writes.writes} | {reading.real(n) for n in node.get_buffer_names()}
    return reads, writes


def dependencies(reading: SchedulerReading, nodes: List[Any], kinds: List[str]) -> List[Set[int]]:
    """For each node (by index in ``nodes``), the earlier nodes that launch a kernel it must
    follow, through views: a read after the last write of its buffer, a write after the write
    and the reads before it."""
    predecessors: List[Set[int]] = []
    order = Accesses()
    for i, node in enumerate(nodes):
        reads, writes = accesses(reading, node)
        after = order.access(i, reads, writes)
        # Views launch nothing: a reader of a view waits on what the view waits on.
        predecessors.append({q for p in after for q in (predecessors[p] if kinds[p] == "view" else {p})})
    return predecessors


def task_graph(reading: SchedulerReading) -> dict:
    """The graph's kernel launches as tasks in the project's JSON schema, in the scheduler's
    order: ``op`` the node's name (Inductor's, ``op3_op4`` for fused ones), attrs ``kind``,
    ``aten``, ``writes`` (the buffers' real names); edges by ``dependencies``."""
    nodes = reading.nodes
    kinds = [kind(n) for n in nodes]
    task_of: Dict[int, int] = {}
    tasks = []
    for i, (node, k) in enumerate(zip(nodes, kinds)):
        if k == "view":
            continue
        task_of[i] = len(tasks)
        _, writes = accesses(reading, node)
        tasks.append({"id": len(tasks), "op": node.get_name(), "attrs": {"kind": k, "aten": aten_ops(node), "writes": sorted(writes)}})
    edges = set()
    for i, before in enumerate(dependencies(reading, nodes, kinds)):
        if i in task_of:
            edges.update((task_of[p], task_of[i]) for p in before)
    return {"nodes": tasks, "edges": sorted([u, v] for u, v in edges)}
