"""nimble_rs on the CPU: tracing, task graphs, plans, simulation, the rewritten forward against the
module, output structures and every error. (Preparing a CUDA graph is in test_gpu.py.)"""

import pytest
import torch

import nimble_rs
from models import Branches, HostRead, Structured, Tied, TwoInputs, relative_error

torch.manual_seed(0)
pytestmark = pytest.mark.engine


def branches():
    return Branches().eval(), torch.randn(1, 3, 8, 8)


def test_algorithms_are_the_registry():
    names = [name for name, _, _ in nimble_rs.algorithms()]
    assert names[0] == "nimble" and "single" in names and "greedy" in names, names


def test_parallel_branches_get_streams_of_their_own():
    model, x = branches()
    graph = nimble_rs.Nimble(model).trace_graph(x, optimize=False)
    ops = [n["op"] for n in graph["nodes"]]
    assert ops.count("aten::conv2d") == 2, ops
    plan = nimble_rs.assign(graph, "nimble")
    single = nimble_rs.assign(graph, "single")
    assert plan["streams"] >= 2 and single["streams"] == 1, plan
    # The issue order respects every dependency, and the two convolutions are on two streams.
    position = {node: i for i, node in enumerate(plan["order"])}
    assert all(position[u] < position[v] for u, v in graph["edges"])
    convs = [n["id"] for n in graph["nodes"] if n["op"] == "aten::conv2d"]
    assert plan["stream_of"][str(convs[0])] != plan["stream_of"][str(convs[1])], plan


def test_simulated_latency_is_within_one_stream_and_the_critical_path():
    model, x = branches()
    graph = nimble_rs.Nimble(model).trace_graph(x)
    for node in graph["nodes"]:
        node["duration_us"] = 20.0 if node["op"].startswith("aten::conv") else 3.0
    result = nimble_rs.simulate(graph, "nimble", "graph")
    assert result["critical_path_us"] <= result["makespan_us"] <= result["single_makespan_us"], result
    eager = nimble_rs.simulate(graph, "nimble", "eager")
    assert eager["mode"] == "eager" and eager["makespan_us"] > 0, eager


def test_simulate_gives_the_clis_answer_on_the_committed_graphs():
    # The same choice of simulator parameters as the CLI: the committed schedulers --simulate
    # record (kernel-timed graphs, kernel-timed calibration) is what nimble_rs.simulate gives.
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "paper-figs" / "results"
    record = json.loads((results / "schedulers-simulated.json").read_text())
    for model in record["models"][:4]:
        graph = json.loads((results / "model-graphs" / model["file"]).read_text())
        nimble = next(r for r in model["rows"] if r["algorithm"] == "nimble")
        result = nimble_rs.simulate(graph, "nimble", "graph")
        assert result["calibration"] == "kernel-timed-h200", result
        assert result["makespan_us"] == nimble["graph_makespan_us"], (model["model"], result, nimble)


def test_the_rewritten_forward_matches_the_module():
    model, x = branches()
    nimble = nimble_rs.Nimble(model)
    with torch.no_grad():
        expected = model(x)
        (optimized,) = nimble.run_optimized(x)
        eager = nimble.eager(x)
    assert relative_error(optimized, expected) < 1e-5
    assert relative_error(eager, expected) == 0.0
    # Rewritten: BatchNorm folded into its convolution.
    ops = [n["op"] for n in nimble.trace_graph(x)["nodes"]]
    assert "aten::batch_norm" not in ops and "aten::_native_batch_norm_legit_no_training" not in ops, ops


def test_attention_masks_go_to_the_fused_kernels_as_eager_would_pass_them():
    # nimble::attention_mask, which the rewrites put before every attention (its CPU kernel is
    # its CUDA one). A boolean mask becomes the additive one attention makes of it; a mask
    # expanded along its last dimension (the tracer records transformers' padding mask so) is
    # copied, so that the fused kernels take it as they took eager's; a permuted one (T5's
    # position bias) is copied in float32 and passed as it is in half precision, where eager's
    # own kernel for it rounds differently from the fused ones.
    nimble_rs.nimble.engine()
    convert = torch.ops.nimble.attention_mask
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        query = torch.randn(1, 2, 6, 4).to(dtype)
        boolean = torch.rand(1, 1, 6, 6) > 0.5
        additive = convert(boolean, query)
        assert additive.dtype == dtype and torch.equal(additive == 0, boolean) and bool(torch.isinf(additive[~boolean]).all())
        expanded = torch.randn(1, 1, 6, 1).to(dtype).expand(1, 1, 6, 6)
        copied = convert(expanded, query)
        assert copied.is_contiguous() and torch.equal(copied, expanded), dtype
        permuted = torch.randn(1, 6, 6, 2).to(dtype).permute(0, 3, 1, 2)
        passed = convert(permuted, query)
        assert torch.equal(passed, permuted)
        assert (passed.data_ptr() == permuted.data_ptr()) == (dtype != torch.float32), dtype
        assert passed.is_contiguous() == (dtype == torch.float32), dtype
        plain = torch.randn(1, 1, 6, 6).to(dtype)
        assert convert(plain, query).data_ptr() == plain.data_ptr()


def test_output_structures_come_back_as_the_module_returns_them():
    model, x = Structured().eval(), torch.randn(2, 6)
    with torch.no_grad():
        expected = model(x)
        out = nimble_rs.Nimble(model).eager(x)
    assert isinstance(out, tuple) and isinstance(out[0], dict) and isinstance(out[1], list), out
    assert list(out[0]) == ["relu", "tanh"]
    assert torch.equal(out[0]["tanh"], expected[0]["tanh"]) and torch.equal(out[1][1], x)


def test_several_inputs_of_several_dtypes():
    model = TwoInputs().eval()
    ids, features = torch.randint(50, (2, 5)), torch.randn(2, 5, 8)
    nimble = nimble_rs.Nimble(model)
    with torch.no_grad():
        assert torch.equal(nimble.eager(ids, features), model(ids, features))
    graph = nimble.trace_graph(ids, features)
    assert any(n["op"] == "aten::embedding" for n in graph["nodes"]), graph


def test_a_script_module_is_taken_as_it_is():
    scripted = torch.jit.script(Structured().eval())
    x = torch.randn(3, 6)
    with torch.no_grad():
        out = nimble_rs.Nimble(scripted).eager(x)
        assert torch.equal(out[0]["relu"], scripted(x)[0]["relu"])


def test_bad_graphs_algorithms_and_modes_are_input_errors():
    model, x = branches()
    graph = nimble_rs.Nimble(model).trace_graph(x)
    with pytest.raises(nimble_rs.NimbleInputError, match=r"unknown algorithm `bogus`; registered algorithms: nimble"):
        nimble_rs.assign(graph, "bogus")
    with pytest.raises(ValueError, match=r"invalid argument `x` for algorithm `round-robin`"):
        nimble_rs.assign(graph, "round-robin:x")
    cycle = {"nodes": [{"id": 0, "op": "a"}, {"id": 1, "op": "b"}], "edges": [[0, 1], [1, 0]]}
    with pytest.raises(nimble_rs.NimbleInputError, match=r"cycle in task graph"):
        nimble_rs.assign(cycle)
    dangling = {"nodes": [{"id": 0, "op": "a"}], "edges": [[0, 7]]}
    with pytest.raises(nimble_rs.NimbleInputError, match=r"unknown node id 7"):
        nimble_rs.simulate(dangling)
    with pytest.raises(nimble_rs.NimbleInputError, match=r"unknown mode `fast`: expected `graph`"):
        nimble_rs.simulate(graph, "nimble", "fast")


def test_bad_inputs_and_misuse_are_clear_errors():
    model, x = branches()
    nimble = nimble_rs.Nimble(model)
    with pytest.raises(TypeError, match=r"expected a torch.nn.Module or a torch.jit.ScriptModule, got int"):
        nimble_rs.Nimble(3)
    with pytest.raises(TypeError, match=r"input 1: expected a torch.Tensor, got float"):
        nimble.trace_graph(x, 1.0)
    with pytest.raises(TypeError, match=r"no inputs given"):
        nimble.run_optimized()
    with pytest.raises(nimble_rs.NotPreparedError, match=r"call prepare"):
        nimble(x)
    with pytest.raises(nimble_rs.NotPreparedError):
        nimble.export_graph("never-written.json")
    with pytest.raises(nimble_rs.NimbleInputError, match=r"2 input tensors given; the module's forward takes \(x\)"):
        nimble.eager(x, x)
    scripted = nimble_rs.Nimble(torch.jit.script(model))
    with pytest.raises(nimble_rs.NimbleInputError, match=r"2 input tensors given; the module's forward takes \(x: Tensor\)"):
        scripted.eager(x, x)
    with pytest.raises(nimble_rs.NimbleError, match=r"expected input\[1, 4, 8, 8\] to have 3 channels"):
        scripted.eager(torch.randn(1, 4, 8, 8))


def test_a_module_the_tracer_cannot_take_names_the_way_out():
    class Mixed(torch.nn.Module):
        def forward(self, x):
            return {"y": x, "pair": (x, x)}

    with pytest.raises(nimble_rs.NimbleInputError, match=r"torch.jit.trace could not trace Mixed: Dictionary inputs to traced functions must have consistent type.*; script it"):
        nimble_rs.Nimble(Mixed()).trace_graph(torch.randn(2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_prepare_without_cuda_says_so():
    model, x = branches()
    for training in (False, True):
        with pytest.raises(nimble_rs.NoCudaError, match=r"no CUDA device"):
            nimble_rs.Nimble(model).prepare(x, training=training)


def test_reading_a_cpu_value_on_the_host_is_no_host_sync():
    # .item() on a CPU tensor is host work; on CUDA it is a sync (test_gpu.py).
    x = torch.randn(4)
    graph = nimble_rs.Nimble(torch.jit.script(HostRead())).trace_graph(x, optimize=False)
    assert len(graph["nodes"]) >= 1


def test_nimble_runs_on_the_modules_own_tensors():
    # Not copies from the traced file: what an optimizer does to the module, Nimble sees.
    for make in (lambda m: m, torch.jit.script):
        model, x = branches()
        nimble = nimble_rs.Nimble(make(model))
        before = nimble.eager(x)
        with torch.no_grad():
            model.left.weight.mul_(2.0)
            model.bn.running_mean.add_(0.5)
        after = nimble.eager(x)
        with torch.no_grad():
            expected = model(x)
        assert relative_error(after, expected) < 1e-6 and relative_error(after, before) > 1e-3


def test_tied_weights_stay_tied():
    model, x = Tied().eval(), torch.randn(2, 6)
    nimble = nimble_rs.Nimble(model)
    nimble.eager(x)
    with torch.no_grad():
        model.first.weight.add_(1.0)
        expected = model(x)
    assert relative_error(nimble.eager(x), expected) < 1e-6
