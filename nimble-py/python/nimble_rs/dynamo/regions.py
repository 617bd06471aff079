"""A plan's regions as FX programs: each region (a maximal run of ops on one stream with no sync
inside, cut by ``nimble_sched::RegionPlan`` in Rust) becomes a GraphModule of its own, which
Inductor compiles and fuses freely, reusing buffers only within the region and so only on its
stream.

A region's inputs are the graph's inputs and other regions' values it reads (in first-use
order); its outputs are its values that a later region or the graph's output reads. Constants
(``get_attr``) are copied into every region that uses them.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import torch
import torch.fx

from .. import scheduling
from .program.taskgraph import Tasks, arguments


@dataclass
class Region:
    """One region: its stream, its ops' task ids, its program, and the FX values it reads and
    writes (nodes of the whole graph)."""

    index: int
    stream: int
    tasks: List[int]
    module: torch.fx.GraphModule
    inputs: List[torch.fx.Node]
    outputs: List[torch.fx.Node]
    waits_on: List[int] = field(default_factory=list)
    records: bool = False


@dataclass
class Partition:
    """The plan and its regions, in issue order."""

    algorithm: str
    streams: int
    syncs: int
    regions: List[Region]
    plan: dict


def plan_regions(tasks: Tasks, algorithm: str) -> Tuple[dict, dict]:
    """The plan of ``algorithm`` for the task graph and its regions, from the Rust registry."""
    answer = scheduling.regions(tasks.graph, algorithm)
    return answer["plan"], answer["regions"]


def partition(gm: torch.fx.GraphModule, tasks: Tasks, algorithm: str) -> Partition:
    """``gm`` cut into the regions of ``algorithm``'s plan, each a GraphModule."""
    plan, cut = plan_regions(tasks, algorithm)
    region_of_task: Dict[int, int] = {}
    for index, region in enumerate(cut["regions"]):
        for task in region["nodes"]:
            region_of_task[task] = index
    region_of: Dict[torch.fx.Node, int] = {node: region_of_task[task] for node, task in tasks.task_of.items()}

    members: List[List[torch.fx.Node]] = [[] for _ in cut["regions"]]
    for node in gm.graph.nodes:
        if node in region_of:
            members[region_of[node]].append(node)

    # Values each region hands on: read by another region or by the graph's output.
    needed_outside: List[List[torch.fx.Node]] = [[] for _ in cut["regions"]]
    marked = set()
    for node in gm.graph.nodes:
        readers = [region_of.get(user, -1) for user in node.users]
        if node in region_of and any(r != region_of[node] for r in readers) and node not in marked:
            marked.add(node)
            needed_outside[region_of[node]].append(node)

    waits: Dict[int, List[int]] = {}
    records = set()
    for a, b in cut["syncs"]:
        waits.setdefault(b, []).append(a)
        records.add(a)

    regions = []
    for index, (spec, nodes) in enumerate(zip(cut["regions"], members)):
        module, inputs = _region_module(gm, nodes, needed_outside[index], index)
        regions.append(
            Region(
                index=index,
                stream=spec["stream"],
                tasks=list(spec["nodes"]),
                module=module,
                inputs=inputs,
                outputs=needed_outside[index],
                waits_on=sorted(waits.get(index, [])),
                records=index in records,
            )
        )
    return Partition(algorithm=plan["algorithm"], streams=plan["streams"], syncs=plan["syncs"], regions=regions, plan=plan)


def _region_module(
    gm: torch.fx.GraphModule,
    nodes: List[torch.fx.Node],
    outputs: List[torch.fx.Node],
    index: int,
) -> Tuple[torch.fx.GraphModule, List[torch.fx.Node]]:
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    inputs: List[torch.fx.Node] = []
    # Placeholders first, in first-use order: graph inputs and values other regions compute.
    own = set(nodes)
    for node in nodes:
        for argument in arguments(node):
            if argument not in own and argument.op != "get_attr" and argument not in env:
                env[argument] = graph.placeholder(argument.name)
                env[argument].meta = dict(argument.meta)
                inputs.append(argument)

    def value(argument: torch.fx.Node) -> torch.fx.Node:
        if argument not in env:
            # A constant: copied into each region that reads it.
            env[argument] = graph.node_copy(argument)
            env[argument].meta = dict(argument.meta)
        return env[argument]

    for node in nodes:
        env[node] = graph.node_copy(node, value)
    graph.output(tuple(env[o] for o in outputs))
    # The whole graph's module owns any get_attr targets the region uses.
    return torch.fx.GraphModule(gm, graph, class_name=f"NimbleRegion{index}"), inputs
