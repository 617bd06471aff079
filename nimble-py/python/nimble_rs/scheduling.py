"""The stream-assignment algorithms on task graphs given as dicts, in the JSON schema of docs/cli.md:
``{"nodes": [{"id": 0, "op": "aten::conv2d", "duration_us": 12.0}, ...], "edges": [[0, 1], ...]}``
(a networkx DiGraph converts with ``{"nodes": [{"id": n, **d} for n, d in g.nodes(data=True)],
"edges": list(g.edges())}``)."""

import json
from typing import Any, Dict, List, Tuple

from . import _sched

Graph = Dict[str, Any]


def algorithms() -> List[Tuple[str, str, str]]:
    """The registered algorithms: ``(name, usage, summary)`` each; ``usage`` shows an argument
    where the algorithm takes one (``round-robin:K``)."""
    return _sched.algorithms_list()


def assign(graph: Graph, algorithm: str = "nimble") -> Dict[str, Any]:
    """The plan of ``algorithm`` for ``graph``, checked: ``streams``, ``syncs``, ``stream_of``
    (node id as a string -> stream), ``order`` (ids in issue order), ``sync_edges`` and
    ``assign_ms``."""
    return json.loads(_sched.assign_json(json.dumps(graph), algorithm))


def simulate(graph: Graph, algorithm: str = "nimble", mode: str = "graph") -> Dict[str, Any]:
    """The simulated latency (µs) of ``algorithm``'s plan for ``graph`` launched as one CUDA graph
    (``mode="graph"``) or kernel by kernel (``"eager"``), with one stream's and the critical
    path's (the floor no assignment beats)."""
    return json.loads(_sched.simulate_json(json.dumps(graph), algorithm, mode))


def regions(graph: Graph, algorithm: str = "nimble") -> Dict[str, Any]:
    """The checked plan of ``algorithm`` for ``graph`` (``plan``, as ``assign`` gives it) and its
    regions (``regions``: the plan cut into maximal one-stream runs with no sync inside, what the
    backend compiles or captures as one program each)."""
    return json.loads(_sched.regions_json(json.dumps(graph), algorithm))
