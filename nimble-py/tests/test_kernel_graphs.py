"""Fused-kernel task graphs (nimble_rs.dynamo.kernels): one task per kernel Inductor generates,
dependencies from the buffers kernels read and write, planned by every registered algorithm;
on a GPU, every task timed."""

import json

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.kernels import kernel_graphs, write_kernel_graphs
from nimble_rs.errors import NimbleInputError
from conftest import require_cuda
from models import Branches, Inception


def reachable(graph):
    successors = {n["id"]: set() for n in graph["nodes"]}
    for u, v in graph["edges"]:
        successors[u].add(v)
    closure = {}
    for node in sorted(successors, reverse=True):  # edges go forward in launch order
        closure[node] = set(successors[node])
        for s in successors[node]:
            closure[node] |= closure[s]
    return closure


def test_inception_kernels_keep_its_branches_apart_and_every_algorithm_plans_them():
    torch.manual_seed(0)
    with torch.no_grad():
        (graph,) = kernel_graphs(Inception(channels=8).eval(), torch.randn(1, 8, 12, 12))
    nodes = graph["nodes"]
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    assert all(u < v for u, v in graph["edges"]), "edges follow launch order"
    # Every Inductor node in exactly one task; fusion made fewer kernels than ATen ops.
    inductor_nodes = [name for n in nodes for name in n["attrs"]["inductor_nodes"]]
    assert len(inductor_nodes) == len(set(inductor_nodes))
    assert sum(len(n["attrs"]["aten"]) for n in nodes) > len(nodes) // 2
    convolutions = [n["id"] for n in nodes if n["op"] == "aten::convolution"]
    assert len(convolutions) >= 8, [n["op"] for n in nodes]
    # The first block's branch convolutions read the same input and are independent.
    closure = reachable(graph)
    independent = [(a, b) for a in convolutions for b in convolutions if a < b and b not in closure[a]]
    assert independent, graph["edges"]
    for _, usage, _ in nimble_rs.algorithms():
        plan = nimble_rs.scheduling.assign(graph, usage.replace(":K", ":3"))
        assert plan["streams"] >= 1
    assert nimble_rs.scheduling.assign(graph, "nimble")["streams"] >= 2


def test_a_chain_is_a_chain_and_graphs_are_written_once(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
    with torch.no_grad():
        (graph,) = kernel_graphs(model, torch.randn(4, 8))
    closure = reachable(graph)
    first, last = graph["nodes"][0]["id"], graph["nodes"][-1]["id"]
    assert last in closure[first], graph
    assert nimble_rs.scheduling.assign(graph, "nimble")["streams"] == 1
    (path,) = write_kernel_graphs([graph], str(tmp_path), "mlp")
    assert path.endswith("mlp.graph.json") and json.loads(open(path).read()) == graph
    with pytest.raises(NimbleInputError, match="exists"):
        write_kernel_graphs([graph], str(tmp_path), "mlp")
    with pytest.raises(NimbleInputError, match="repeats"):
        kernel_graphs(model, torch.randn(4, 8), repeats=0)


def test_every_kernel_is_timed_on_a_gpu():
    require_cuda()
    torch.backends.cudnn.allow_tf32 = False
    model = Branches().cuda().eval()
    with torch.no_grad():
        graphs = kernel_graphs(model, torch.randn(2, 3, 16, 16, device="cuda"), repeats=5)
    for graph in graphs:
        assert "durations_missing" not in graph.get("attrs", {}), graph.get("attrs")
        assert all(n["duration_us"] > 0 for n in graph["nodes"]), [(n["op"], n.get("duration_us")) for n in graph["nodes"]]
        simulated = nimble_rs.scheduling.simulate(graph, "nimble")
        assert simulated, simulated


def test_the_bound_a_schedule_cannot_beat_is_the_heaviest_chain():
    # experiments/python/kernel_graphs.py's critical path (the scheduler's own): what no number of
    # streams can undercut.
    import importlib.util
    import sys
    from pathlib import Path

    directory = Path(__file__).resolve().parents[2] / "experiments" / "python"
    sys.path.insert(0, str(directory))
    try:
        loaded = importlib.util.spec_from_file_location("kernel_graphs_script", directory / "kernel_graphs.py")
        script = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(script)
    finally:
        sys.path.remove(str(directory))
    durations = [2.0, 5.0, 1.0, 3.0, 4.0]
    graph = {"nodes": [{"id": i, "op": f"k{i}", "duration_us": d} for i, d in enumerate(durations)], "edges": [[0, 1], [0, 2], [1, 3], [2, 3], [2, 4]]}
    assert script.critical_path_us(graph) == 10.0  # 0 -> 1 -> 3, not 0 -> 2 -> 4 (7)
    graph["nodes"][4]["duration_us"] = 9.0
    assert script.critical_path_us(graph) == 12.0
    del graph["nodes"][1]["duration_us"]  # untimed: counts as 0
    assert script.critical_path_us(graph) == 12.0
    graph["edges"].append([3, 0])
    with pytest.raises(NimbleInputError, match="cycle"):
        script.critical_path_us(graph)
