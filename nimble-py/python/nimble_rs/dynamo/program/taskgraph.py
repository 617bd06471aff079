"""An ATen-level FX graph as a task graph in the project's JSON schema: one task per op.

A task is a ``call_function`` node of the graph, except ``operator.getitem``, which only picks
one output of a multi-output op and belongs to that op's task. Dependencies are the FX data
edges between tasks, plus the ordering that in-place ops and views need: an op that writes a
tensor (its schema marks the argument as written, as ``aten.copy_`` does when AOTAutograd
writes back a mutated input) comes after every earlier op that read or wrote the same storage
(through any view of it) and before every later op that touches it.
"""

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
import torch.fx

from . import slices


@dataclass
class Tasks:
    """The tasks of an FX graph: ``nodes[i]`` is task ``i``'s FX node, ``task_of`` maps every
    call_function node (getitems included) to its task, ``graph`` is the JSON-schema dict."""

    nodes: List[torch.fx.Node]
    task_of: Dict[torch.fx.Node, int]
    graph: dict = field(default_factory=dict)


def target_name(target) -> str:
    """``aten::addmm`` for an ATen overload, the Python name for anything else."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return getattr(target, "__name__", str(target))


def op_name(node: torch.fx.Node) -> str:
    """The name of a node's op (``target_name``)."""
    return target_name(node.target)


class Accesses:
    """The order that reads and writes of shared storage need, access by access in program
    order: a read waits for the last write; a write for the last write and every read since.
    Where an access is of a part of its storage (``parts``: storage -> ``slices.Box``), only
    accesses of overlapping parts are ordered: the writes of disjoint slices of one buffer
    follow none of each other, and a later access of the whole follows them all."""

    def __init__(self):
        # Per storage, the writes no later write covers and the reads since: (task, part).
        self.writers: Dict[Any, List[tuple]] = {}
        self.readers: Dict[Any, List[tuple]] = {}

    def access(self, task: int, reads: Set[Any], writes: Set[Any], parts: Optional[Dict[Any, Any]] = None) -> Set[int]:
        """Records ``task``'s accesses; returns the earlier tasks it must follow."""
        parts = parts or {}
        after: Set[int] = set()
        for storage in reads - writes:
            part = parts.get(storage)
            after.update(t for t, q in self.writers.get(storage, ()) if slices.overlap(part, q))
            self.readers.setdefault(storage, []).append((task, part))
        for storage in writes:
            part = parts.get(storage)
            after.update(t for t, q in self.writers.get(storage, ()) if slices.overlap(part, q))
            after.update(t for t, q in self.readers.get(storage, ()) if slices.overlap(part, q))
            # What this write covers, later accesses reach through it.
            self.readers[storage] = [(t, q) for t, q in self.readers.get(storage, ()) if not slices.within(q, part)]
            self.writers[storage] = [(t, q) for t, q in self.writers.get(storage, ()) if not slices.within(q, part)] + [(task, part)]
        after.discard(task)
        return after


def _schema(node: torch.fx.Node):
    return getattr(node.target, "_schema", None)


def arguments(node: torch.fx.Node) -> List[torch.fx.Node]:
    """The FX values ``node`` reads (its node arguments, nested ones included)."""
    found: List[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def _written_args(node: torch.fx.Node) -> List[torch.fx.Node]:
    """The arguments an op writes in place, from its schema's alias annotations."""
    schema = _schema(node)
    if schema is None:
        return []
    written = []
    for i, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
        torch.fx.node.map_arg(value, lambda a: written.append(a))
    return written


def _aliased_argument(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The argument whose storage the op's first output shares, if any: a view's source, or the
    tensor an in-place op wrote and returned (later ops read it through this node)."""
    schema = _schema(node)
    if schema is None or not schema.returns:
        return None
    returned = schema.returns[0].alias_info
    if returned is None:
        return None
    for i, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and set(info.before_set) & set(returned.before_set):
            value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
            return value if isinstance(value, torch.fx.Node) else None
    return None


def mutated_inputs(gm: torch.fx.GraphModule) -> List[int]:
    """The indices of the graph's inputs that an op writes in place, directly or through a view
    (AOTAutograd's ``copy_`` back into a mutated buffer or user input, for example)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    root: Dict[torch.fx.Node, torch.fx.Node] = {}
    written: Set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        source = _aliased_argument(node)
        if source is not None:
            root[node] = root.get(source, source)
        written.update(root.get(a, a) for a in _written_args(node))
    return [i for i, p in enumerate(placeholders) if p in written]


def _weight_only_anchors(gm: torch.fx.GraphModule, static_inputs: Set[torch.fx.Node]) -> Dict[torch.fx.Node, torch.fx.Node]:
    """Ops computed from parameters and constants alone (``aten.t`` of a linear layer's weight,
    ``arange`` for positions), each with the first op that reads it and is not such an op
    itself. As tasks of their own they would be sources independent of everything, and
    maximum logical concurrency would give each a stream; they belong with their reader."""
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    weight_only: Set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or _written_args(node):
            continue
        if all(a.op == "get_attr" or a in static_inputs or a in weight_only for a in arguments(node)):
            weight_only.add(node)
    anchors: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in reversed(list(gm.graph.nodes)):
        if node not in weight_only:
            continue
        readers = [anchors.get(u) if u in weight_only else u for u in node.users]
        readers = [u for u in readers if u is not None and u.op == "call_function"]
        if readers:
            anchors[node] = min(readers, key=order.__getitem__)
    return anchors


def tasks_of(gm: torch.fx.GraphModule, static_inputs: Sequence[int] = (), durations_us: Optional[Dict[int, float]] = None) -> Tasks:
    """The task graph of ``gm``: tasks in graph order (ids 0, 1, …), each with its op name,
    output shape where known (attribute ``out_shape``), and ``duration_us`` from ``durations_us``
    when given. ``static_inputs`` are the indices of the placeholders that are parameters or
    buffers: ops computed from those alone join the task of their first reader (attribute
    ``folded``: their op names)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    anchors = _weight_only_anchors(gm, {placeholders[i] for i in static_inputs})
    nodes: List[torch.fx.Node] = []
    task_of: Dict[torch.fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node in anchors:
            continue
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and node.args[0] in task_of:
            task_of[node] = task_of[node.args[0]]
            continue
        task_of[node] = len(nodes)
        nodes.append(node)
    folded: Dict[int, List[str]] = {}
    for node, anchor in anchors.items():
        task_of[node] = task_of[anchor]
        folded.setdefault(task_of[anchor], []).append(op_name(node))

    edges: Set[tuple] = set()

    def depend(u: Optional[int], v: int) -> None:
        if u is not None and u != v:
            edges.add((u, v))

    # The storage each value lives in: itself, or what it is a view of (placeholders and
    # get_attrs are roots).
    root: Dict[torch.fx.Node, torch.fx.Node] = {}

    def root_of(value: torch.fx.Node) -> torch.fx.Node:
        return root.get(value, value)

    accesses = Accesses()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        task = task_of[node]
        read = arguments(node)
        for argument in read:
            depend(task_of.get(argument), task)
        if node.target is operator.getitem:
            continue
        source = _aliased_argument(node)
        if source is not None:
            root[node] = root_of(source)
        for earlier in accesses.access(task, {root_of(a) for a in read}, {root_of(a) for a in _written_args(node)}):
            depend(earlier, task)

    graph_nodes = []
    for i, node in enumerate(nodes):
        entry = {"id": i, "op": op_name(node)}
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            # Symbolic sizes (dynamic shapes) as their expressions.
            entry["attrs"] = {"out_shape": [int(d) if isinstance(d, int) else str(d) for d in value.shape]}
        if i in folded:
            entry.setdefault("attrs", {})["folded"] = sorted(folded[i])
        if durations_us is not None and i in durations_us:
            entry["duration_us"] = float(durations_us[i])
        graph_nodes.append(entry)
    graph = {"nodes": graph_nodes, "edges": sorted([u, v] for u, v in edges)}
    return Tasks(nodes=nodes, task_of=task_of, graph=graph)
