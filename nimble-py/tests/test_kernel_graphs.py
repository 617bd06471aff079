"""Fused-kernel task graphs (nimble_rs.dynamo.research.kernels): one task per kernel Inductor generates,
dependencies from the buffers kernels read and write, planned by every registered algorithm;
on a GPU, every task timed."""

import json

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.research.kernels import kernel_graphs, write_kernel_graphs
from nimble_rs.dynamo.research.occupancy import SmLimits, blocks_per_sm, launch_configuration, set_occupancy, sm_share
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
        # Every kernel's share of the GPU, from the profiler's trace: the simulator then shares
        # the SMs among concurrent kernels (its kernel-timed calibration).
        assert "occupancy_missing" not in graph["attrs"] and graph["attrs"]["sm_limits"]["multiprocessors"] > 0, graph["attrs"]
        assert all(n["attrs"]["kernels"] >= 1 and 0 < n["attrs"]["sm_share"] <= 1 for n in graph["nodes"]), [n["attrs"] for n in graph["nodes"]]
        simulated = nimble_rs.scheduling.simulate(graph, "nimble")
        assert simulated["calibration"] == "kernel-timed-h200", simulated


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


H100 = SmLimits(multiprocessors=132, max_threads=2048, max_blocks=32, registers=65536, shared_memory=233472)


def test_a_kernels_share_is_its_grid_against_the_blocks_the_gpu_holds():
    # 128 threads and 32 registers a thread: 16 blocks a multiprocessor (threads and registers
    # both allow 16), 2112 on the GPU.
    assert sm_share([66, 1, 1], [128, 1, 1], 32, 0, H100) == 66 / 2112
    # 96 KiB of shared memory a block: 2 a multiprocessor.
    assert sm_share([132, 1, 1], [128, 1, 1], 32, 96 * 1024, H100) == 0.5
    # 255 registers a thread at 256 threads: one block a multiprocessor.
    assert sm_share([66, 2, 1], [256, 1, 1], 255, 0, H100) == 1.0
    assert sm_share([100000, 1, 1], [32, 1, 1], 16, 0, H100) == 1.0


def test_a_launch_configuration_says_what_it_implies_on_the_gpu():
    args = {"grid": [132, 1, 1], "block": [256, 1, 1], "registers per thread": 128, "shared memory": 4096, "est. achieved occupancy %": 25}
    launch = launch_configuration(args, 7.5, H100)
    # 128 registers at 256 threads: 2 blocks a multiprocessor by registers (16 warps of 64).
    assert launch["blocks_per_sm"] == 2 and launch["theoretical_occupancy"] == 0.25
    assert launch["sm_share"] == 0.5 and launch["achieved_occupancy_estimate"] == 0.25
    assert launch["shared_memory_bytes"] == 4096 and launch["duration_us"] == 7.5
    # A block larger than a multiprocessor holds still counts one.
    assert blocks_per_sm([4096, 1, 1], 0, 0, H100) == 1


def trace(repeats):
    """A Kineto trace of ``repeats`` calls: a convolution launching a large and a small kernel
    from an inner ATen op, a Triton kernel between ATen ops, a second convolution's one kernel,
    and an ATen op launching nothing."""
    events, correlation = [], 0

    def launch(ts, name, dur, grid, category="cuda_runtime"):
        nonlocal correlation
        correlation += 1
        events.append({"cat": category, "name": "launch", "tid": 1, "ts": ts, "dur": 1, "args": {"correlation": correlation}})
        events.append({"cat": "kernel", "name": name, "ts": ts + 100, "dur": dur, "args": {"correlation": correlation, "grid": grid, "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}})

    for r in range(repeats):
        t = 1000 * r
        events.append({"cat": "cpu_op", "name": "aten::convolution", "tid": 1, "ts": t, "dur": 10, "args": {}})
        events.append({"cat": "cpu_op", "name": "aten::cudnn_convolution", "tid": 1, "ts": t + 1, "dur": 8, "args": {}})
        launch(t + 2, "implicit_gemm", 4.0, [5000, 1, 1])
        launch(t + 3, "transpose", 2.0, [66, 1, 1])
        launch(t + 12, "triton_poi_fused_relu_0", 3.0, [264, 1, 1], "cuda_driver")
        events.append({"cat": "cpu_op", "name": "aten::convolution", "tid": 1, "ts": t + 20, "dur": 5, "args": {}})
        launch(t + 21, "implicit_gemm", 6.0, [1056, 1, 1])
        events.append({"cat": "cpu_op", "name": "aten::empty", "tid": 1, "ts": t + 30, "dur": 1, "args": {}})
    return events


def kernel_graph(*ops):
    return {"nodes": [{"id": i, "op": op, "attrs": {"kind": "extern" if op.startswith("aten::") else "pointwise"}} for i, op in enumerate(ops)], "edges": []}


def test_each_task_gets_its_kernels_and_their_time_weighted_share_from_the_trace():
    graph = kernel_graph("aten::convolution", "triton_poi_fused_relu_0", "aten::convolution", "aten::empty")
    assert set_occupancy(graph, trace(3), 3, H100) is None
    first, relu, second, empty = (n["attrs"] for n in graph["nodes"])
    # The first call's two kernels (launched inside its inner op), weighted by their time.
    assert first["kernels"] == 2 and abs(first["sm_share"] - (4.0 * 1.0 + 2.0 * 66 / 2112) / 6.0) < 1e-12
    assert relu == {**relu, "kernels": 1, "sm_share": 264 / 2112}
    assert second["kernels"] == 1 and second["sm_share"] == 0.5
    assert empty["kernels"] == 0 and "sm_share" not in empty and "launches" not in empty
    # Each kernel's launch configuration in one call, in launch order, with what it implies:
    # 128 threads and 32 registers a thread, 16 blocks a multiprocessor, 64 warps of 64.
    gemm, transpose = first["launches"]
    assert gemm == {
        "grid": [5000, 1, 1], "block": [128, 1, 1], "registers_per_thread": 32, "shared_memory_bytes": 0,
        "blocks_per_sm": 16, "theoretical_occupancy": 1.0, "sm_share": 1.0, "duration_us": 4.0,
    }
    assert transpose["grid"] == [66, 1, 1] and transpose["sm_share"] == 66 / 2112 and transpose["duration_us"] == 2.0
    assert [launch["grid"] for launch in relu["launches"]] == [[264, 1, 1]]
    assert [launch["grid"] for launch in second["launches"]] == [[1056, 1, 1]]
    # A task not in the trace: nothing set, and why.
    missing = kernel_graph("aten::convolution", "triton_poi_fused_tanh_1")
    assert set_occupancy(missing, trace(3), 3, H100) == "no traced kernel named triton_poi_fused_tanh_1"
    assert all(set(n["attrs"]) == {"kind"} for n in missing["nodes"])
    third = kernel_graph("aten::convolution", "aten::convolution", "aten::convolution")
    assert set_occupancy(third, trace(3), 3, H100) == "no traced call for aten::convolution"

