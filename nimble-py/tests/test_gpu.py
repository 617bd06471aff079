"""nimble_rs on a CUDA GPU: prepare, replay, and every output checked against the module.
Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails instead."""

import json
import os

import pytest
import torch

import nimble_rs
from models import Branches, HostRead, Structured, TwoInputs, relative_error

# Inference rewrites and TF32 convolutions (libtorch's defaults): the CLI's tolerance for them.
OPTIMIZED_TOLERANCE = 1e-2
RAW_TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def gpu():
    if not torch.cuda.is_available():
        if os.environ.get("NIMBLE_REQUIRE_GPU") == "1":
            pytest.fail("NIMBLE_REQUIRE_GPU=1, but torch sees no CUDA device")
        pytest.skip("no CUDA device (NIMBLE_REQUIRE_GPU=1 makes this a failure)")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)


def prepared_branches(**options):
    model = Branches().cuda().eval()
    nimble = nimble_rs.Nimble(model)
    report = nimble.prepare(torch.randn(1, 3, 32, 32, device="cuda"), **options)
    return model, nimble, report


def test_the_replayed_graph_matches_the_module_on_fresh_inputs():
    model, nimble, report = prepared_branches()
    assert report["streams"] >= 2 and report["kernel_nodes"] > 0, report
    for _ in range(10):
        x = torch.randn(1, 3, 32, 32, device="cuda")
        with torch.no_grad():
            expected = model(x)
        assert relative_error(nimble(x), expected) < OPTIMIZED_TOLERANCE
    # The module on inputs of another shape is traced apart; the prepared graph stays.
    nimble.eager(torch.randn(2, 3, 16, 16, device="cuda"))
    x = torch.randn(1, 3, 32, 32, device="cuda")
    with torch.no_grad():
        assert relative_error(nimble(x), model(x)) < OPTIMIZED_TOLERANCE
    graph = nimble.task_graph()
    assert all(node.get("duration_us", 0) > 0 for node in graph["nodes"]), graph
    assert nimble.plan()["streams"] == report["streams"]


def test_without_the_rewrites_the_graph_computes_what_eager_does():
    _, nimble, _ = prepared_branches(optimize=False, algorithm="nimble")
    x = torch.randn(1, 3, 32, 32, device="cuda")
    assert relative_error(nimble(x), nimble.eager(x)) < RAW_TOLERANCE


def test_outputs_are_the_graphs_buffers_and_forward_owned_copies_them():
    _, nimble, _ = prepared_branches()
    a, b = torch.randn(1, 3, 32, 32, device="cuda"), torch.randn(1, 3, 32, 32, device="cuda")
    first = nimble(a)
    owned = nimble.forward_owned(a)
    kept = first.clone()
    second = nimble(b)
    assert second.data_ptr() == first.data_ptr() and not torch.equal(first, kept)
    assert torch.equal(owned, kept)


def test_output_structures_and_integer_inputs_survive_the_graph():
    model = Structured().cuda().eval()
    x = torch.randn(4, 6, device="cuda")
    nimble = nimble_rs.Nimble(model)
    nimble.prepare(x)
    out = nimble(x)
    with torch.no_grad():
        expected = model(x)
    assert list(out[0]) == ["relu", "tanh"] and isinstance(out[1], list)
    assert relative_error(out[0]["tanh"], expected[0]["tanh"]) < OPTIMIZED_TOLERANCE
    two = TwoInputs().cuda().eval()
    ids, features = torch.randint(50, (2, 5), device="cuda"), torch.randn(2, 5, 8, device="cuda")
    nimble = nimble_rs.Nimble(two)
    nimble.prepare(ids, features)
    with torch.no_grad():
        assert relative_error(nimble(ids, features), two(ids, features)) < RAW_TOLERANCE


def test_a_host_read_on_the_gpu_is_refused_naming_the_op():
    nimble = nimble_rs.Nimble(torch.jit.script(HostRead()))
    with pytest.raises(nimble_rs.HostSyncError, match=r"synchronizes with the host at op #\d+ \(aten::"):
        nimble.prepare(torch.randn(8, device="cuda"))


def test_the_exported_graph_is_what_the_scheduler_reads(tmp_path):
    _, nimble, report = prepared_branches()
    path = tmp_path / "branches.json"
    nimble.export_graph(path)
    graph = json.loads(path.read_text())
    assert nimble_rs.assign(graph, "nimble")["streams"] == report["streams"]
    simulated = nimble_rs.simulate(graph, "nimble", "graph")
    assert simulated["critical_path_us"] <= simulated["makespan_us"] <= simulated["single_makespan_us"]
