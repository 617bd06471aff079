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
from typing import Dict, List, Optional, Set

import torch
import torch.fx


@dataclass
class Tasks:
    """The tasks of an FX graph: ``nodes[i]`` is task ``i``'s FX node, ``task_of`` maps every
    call_function node (getitems included) to its task, ``graph`` is the JSON-schema dict."""

    nodes: List[torch.fx.Node]
    task_of: Dict[torch.fx.Node, int]
    graph: dict = field(default_factory=dict)


def op_name(node: torch.fx.Node) -> str:
    """``aten::addmm`` for an ATen overload, the Python name for anything else."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return getattr(target, "__name__", str(target))


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


def tasks_of(gm: torch.fx.GraphModule, durations_us: Optional[Dict[int, float]] = None) -> Tasks:
    """The task graph of ``gm``: tasks in graph order (ids 0, 1, …), each with its op name,
    output shape where known (attribute ``out_shape``), and ``duration_us`` from ``durations_us`` when given."""
    nodes: List[torch.fx.Node] = []
    task_of: Dict[torch.fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and node.args[0] in task_of:
            task_of[node] = task_of[node.args[0]]
            continue
        task_of[node] = len(nodes)
        nodes.append(node)

    edges: Set[tuple] = set()

    def depend(u: Optional[int], v: int) -> None:
        if u is not None and u != v:
            edges.add((u, v))

    # The storage each value lives in: itself, or what it is a view of (placeholders and
    # get_attrs are roots).
    root: Dict[torch.fx.Node, torch.fx.Node] = {}

    def root_of(value: torch.fx.Node) -> torch.fx.Node:
        return root.get(value, value)

    last_writer: Dict[torch.fx.Node, int] = {}
    readers: Dict[torch.fx.Node, List[int]] = {}
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
        written = {root_of(a) for a in _written_args(node)}
        for storage in {root_of(a) for a in read} - written:
            depend(last_writer.get(storage), task)
            readers.setdefault(storage, []).append(task)
        for storage in written:
            depend(last_writer.get(storage), task)
            for reader in readers.pop(storage, []):
                depend(reader, task)
            last_writer[storage] = task

    graph_nodes = []
    for i, node in enumerate(nodes):
        entry = {"id": i, "op": op_name(node)}
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            # Symbolic sizes (dynamic shapes) as their expressions.
            entry["attrs"] = {"out_shape": [int(d) if isinstance(d, int) else str(d) for d in value.shape]}
        if durations_us is not None and i in durations_us:
            entry["duration_us"] = float(durations_us[i])
        graph_nodes.append(entry)
    graph = {"nodes": graph_nodes, "edges": sorted([u, v] for u, v in edges)}
    return Tasks(nodes=nodes, task_of=task_of, graph=graph)
