"""The backend's options on the CPU: bad ones are input errors; option inductor_config holds
for every compile the backend makes (forward, inference, a backward compiled at its first call,
every region); Inductor's programmatic dependent launch keeps Inductor's own program; the
accuracy check's bounds (its slack and the inputs it can afford)."""

import warnings

import pytest
import torch
from torch import nn

import nimble_rs
from nimble_rs.dynamo.runtime import accuracy, capturable
from nimble_rs.dynamo.common import announce
from nimble_rs.dynamo.runtime import compiled as compiled_graphs
from nimble_rs.dynamo import options as backend_options
from nimble_rs.dynamo import pipeline
from models import Inception, relative_error


@pytest.mark.parametrize(
    "options, message",
    [
        ({"algorithm": "no-such"}, "registered algorithm"),
        ({"streams": 2}, "unknown option `streams`"),
        ({"choose": "fastest"}, "choose='fastest'"),
        ({"accuracy": "best"}, "accuracy='best'"),
        ({"capture_training": "yes"}, "capture_training='yes'"),
        ({"max_shapes": 0}, "max_shapes=0"),
        ({"algorithm": "round-robin:0"}, "stream count of at least 1"),
        ({"granularity": "ops"}, "granularity='ops'"),
        ({"graphs": 3}, "graphs=3"),
        ({"priority": "yes"}, "priority='yes'"),
        ({"merge_convolutions": 1}, "merge_convolutions=1: expected True or False"),
        ({"time_critical_path": "no"}, "time_critical_path='no': expected True or False"),
        ({"hoist_weight_kernels": "yes"}, "hoist_weight_kernels='yes': expected True or False"),
        ({"weight_stream": 1}, "weight_stream=1: expected True or False"),
        ({"check_after_launch": "no"}, "check_after_launch='no': expected True or False"),
        ({"transpose_products": 1}, "transpose_products=1: expected True or False"),
        ({"concat_in_place": "yes"}, "concat_in_place='yes': expected True or False"),
        ({"disjoint_slices": None}, "disjoint_slices=None: expected True or False"),
        ({"fuse_convolutions": 1}, "fuse_convolutions=1: expected False, True"),
        ({"fuse_convolutions": "epilog"}, "fuse_convolutions='epilog': expected False, True"),
        ({"depthwise_kernels": "column"}, "depthwise_kernels='column': expected True, False, \"unrolled\" or \"columns\""),
        ({"depthwise_kernels": 1}, "depthwise_kernels=1: expected True, False, \"unrolled\" or \"columns\""),
        ({"inductor_config": {"no_such_setting": 1}}, "no_such_setting is not settings of torch._inductor.config"),
        ({"inductor_config": ["layout_optimization"]}, "expected a dict of torch._inductor.config names"),
        ({"inductor_config": {"layout_optimization": "yes"}}, "layout_optimization='yes': expected True or False"),
        ({"inductor_config": {"max_autotune_gemm_search_space": 3}}, "max_autotune_gemm_search_space=3: expected one of 'DEFAULT', 'EXHAUSTIVE'"),
        ({"max_shapes": True}, "max_shapes=True: expected a positive integer"),
        ({"warmups": True}, "warmups=True: expected a positive integer"),
        (["algorithm", "greedy"], r"options=\['algorithm', 'greedy'\]: expected a dict of option names to values"),
        ("algorithm=greedy", "options='algorithm=greedy': expected a dict"),
    ],
)
def test_bad_options_are_input_errors(options, message):
    with pytest.raises(nimble_rs.NimbleInputError, match=message):
        backend_options.checked(options)


def test_a_configured_backend_checks_its_options_when_built_and_runs_with_them():
    # nimble_rs.backend(...) refuses a bad option at once, where the user wrote it; given with
    # torch.compile(options=...), the same error reaches the user wrapped by Dynamo, as
    # BackendCompilerFailed with the NimbleInputError as its inner_exception.
    with pytest.raises(nimble_rs.NimbleInputError, match="max_shapes=True"):
        nimble_rs.backend(max_shapes=True)
    with pytest.raises(nimble_rs.NimbleInputError, match="unknown option `algorithms`"):
        nimble_rs.backend(algorithms="greedy")
    model, x = Inception(channels=4).eval(), torch.randn(1, 4, 8, 8)
    configured = nimble_rs.backend(algorithm="greedy")
    torch._dynamo.reset()
    before = len(pipeline.reports())
    with torch.no_grad():
        out = torch.compile(model, backend=configured)(x)
        assert relative_error(out, model(x)) < 1e-5
    assert [r["algorithm"] for r in pipeline.reports()[before:]] == ["greedy"]
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as raised, torch.no_grad():
        torch.compile(model, backend="nimble", options={"warmups": True})(x)
    assert isinstance(raised.value.inner_exception, nimble_rs.NimbleInputError), raised.value.inner_exception
    torch._dynamo.reset()


def test_inductor_settings_apply_to_the_backends_compile_alone():
    # On the CPU Inductor runs convolutions channels-last: a kernel into that layout and one out
    # of it. With layout_optimization off in option inductor_config they are gone, the output is
    # still eager's, and the user's own setting is as it was.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()
    x = torch.randn(2, 4, 8, 8)
    kernels = []
    for options in ({}, {"inductor_config": {"layout_optimization": False}}):
        torch._dynamo.reset()
        before = len(pipeline.reports())
        out = torch.compile(model, backend="nimble", options=options)(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
        kernels.append([r["kernels"] for r in pipeline.reports()[before:]])
    assert kernels[1][0] < kernels[0][0], kernels
    assert torch._inductor.config.layout_optimization


def test_inductor_settings_hold_for_the_backward_too(monkeypatch):
    # compile_fx compiles a training graph's backward at its first call, after the backend has
    # returned: option inductor_config must hold there as well.
    seen = []
    original = pipeline.compile_kernels

    def spy(gm, example_inputs, options, inner_kwargs):
        seen.append((bool(inner_kwargs.get("is_backward")), torch._inductor.config.layout_optimization))
        return original(gm, example_inputs, options, inner_kwargs)

    monkeypatch.setattr(pipeline, "compile_kernels", spy)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    fast = torch.compile(model, backend="nimble", options={"inductor_config": {"layout_optimization": False}})
    fast(torch.randn(4, 8)).sum().backward()
    assert sorted(seen) == [(False, False), (True, False)], seen
    assert torch._inductor.config.layout_optimization


def test_inductor_settings_hold_for_every_region_of_a_training_step(monkeypatch):
    # Granularity "regions": AOTAutograd compiles the backward at its first call too; every
    # region Inductor lowers then, forward and backward, sees option inductor_config.
    from torch._inductor.graph import GraphLowering

    seen = []
    phase = ["forward"]
    original = GraphLowering.__init__

    def spy(self, *args, **kwargs):
        seen.append((phase[0], torch._inductor.config.layout_optimization))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GraphLowering, "__init__", spy)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    # (Inductor's cache off: a region compiled by an earlier test would be found, not lowered.)
    fast = torch.compile(model, backend="nimble", options={"granularity": "regions", "inductor_config": {"layout_optimization": False, "fx_graph_cache": False}})
    out = fast(torch.randn(4, 8))
    phase[0] = "backward"
    out.sum().backward()
    assert {p for p, _ in seen} == {"forward", "backward"} and not any(value for _, value in seen), seen
    assert torch._inductor.config.layout_optimization


def test_programmatic_launch_is_found_where_inductor_turns_it_on(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (9, 0))
    assert capturable.programmatic_launch(True) is None  # off by default
    with torch._inductor.config.patch({"triton.enable_pdl": True}):
        assert "triton.enable_pdl" in capturable.programmatic_launch(True)
        assert capturable.programmatic_launch(False) is None  # no CUDA graph: nothing to keep
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (8, 0))
        assert capturable.programmatic_launch(True) is None  # Inductor launches so on Hopper and later only


def test_with_programmatic_launch_inductors_program_runs_as_it_is_announced(monkeypatch):
    # (On the CPU no kernel is launched so; the GPU test runs it for real.)
    reason = "Inductor's programmatic dependent launch is on (triton.enable_pdl), as if on a GPU"
    monkeypatch.setattr(capturable, "programmatic_launch", lambda on_cuda: reason)
    announce._WARNED.discard(("pdl",))
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    torch._dynamo.reset()
    before = len(pipeline.reports())
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = torch.compile(model, backend="nimble", options={"choose": "streams"})
        for _ in range(2):
            assert relative_error(fast(x), model(x)) < 1e-5
    report = pipeline.reports()[before:][-1]
    assert report["reason"] == reason and report["streams"] == 1 and "regions" not in report, report
    assert sum(reason in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]


def test_the_accuracy_checks_bounds_hold_on_any_machine():
    # The check allows the compiler's own spread beyond 2%, and runs as many of its five inputs
    # as a quarter of the free device memory holds eager's outputs for, at least one.
    assert accuracy.within_accuracy(0.2, 0.1, 0.15) and not accuracy.within_accuracy(0.2, 0.1, 0.0)
    assert accuracy.within_accuracy(0.102, 0.1, 0.0) and not accuracy.within_accuracy(0.103, 0.1, 0.0)
    gib = 1 << 30
    assert [accuracy.check_inputs(size, 40 * gib) for size in (0, gib, 4 * gib, 6 * gib, 20 * gib)] == [5, 5, 2, 1, 1]


def test_eagers_references_run_without_cudnns_benchmark_and_leave_the_users_setting():
    # The choice computes eager's references with cuDNN's benchmark mode off (the ATen graph's
    # convolutions would each be benchmarked again), and puts the user's setting back, also
    # when the reference fails.
    before = torch.backends.cudnn.benchmark
    try:
        for setting in (True, False):
            torch.backends.cudnn.benchmark = setting
            with accuracy.heuristic_convolutions():
                assert torch.backends.cudnn.benchmark is False
            assert torch.backends.cudnn.benchmark is setting
        torch.backends.cudnn.benchmark = True
        with pytest.raises(RuntimeError, match="eager failed"):
            with accuracy.heuristic_convolutions():
                raise RuntimeError("eager failed")
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = before


def test_the_accuracy_checks_inputs_permute_the_users_inputs_alone():
    # Each check input after the first permutes the values of the user's inputs (the same
    # distribution: token ids stay token ids), fixed per seed, drawn where each input is;
    # parameters (static), inputs the graph updates, and the process's random state untouched.
    graph = object.__new__(compiled_graphs.NimbleCompiled)
    graph.mutated, graph.clobbered = [2], [3]
    args = [torch.arange(12.0).view(3, 4), torch.randn(5), torch.randn(6), torch.randn(7), torch.arange(10), 3]
    static = [False, True, False, False, False, False]
    state = torch.random.get_rng_state()
    first, again, other = (graph._shuffled(args, static, seed) for seed in (0, 0, 1))
    assert torch.equal(torch.random.get_rng_state(), state)
    for i in (0, 4):
        assert first[i].shape == args[i].shape and first[i].dtype == args[i].dtype
        assert torch.equal(first[i].flatten().sort().values, args[i].flatten().sort().values) and not torch.equal(first[i], args[i])
        assert torch.equal(first[i], again[i]) and not torch.equal(first[i], other[i])
    assert all(first[i] is args[i] for i in (1, 2, 3, 5))


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Inception(channels=4)

    def forward(self, x):
        y = self.body(x)
        return y, y.mean(1)


def test_a_training_forward_is_checked_on_what_its_caller_sees():
    # Inductor marks which of a training forward's outputs are the user's; the accuracy check
    # compares those (and any updated input returned before them), not the values saved for
    # the backward that follow. (BatchNorm's running statistics are written in place by the
    # graph here, not returned.)
    torch._dynamo.reset()
    fast = torch.compile(TwoOutputs().train(), backend="nimble")
    y, m = fast(torch.randn(2, 4, 8, 8))
    (y.sum() + m.sum()).backward()
    forward = [r for r in nimble_rs.dynamo.reports() if r["graph"] == "forward"][-1]
    assert forward["accuracy_outputs"] == 2 and forward["kernels"] > 2, forward
    backward = [r for r in nimble_rs.dynamo.reports() if r["graph"] == "backward"][-1]
    assert "accuracy_outputs" not in backward, backward
