"""torch.compile(backend="nimble") on a CUDA GPU: the choice between Inductor's own program and
the plans on streams, measured on the first capture (timings, timed again where they do not
tell the programs apart, and outputs no further from eager than the compiler's own beyond its
noise). Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails instead."""

import pytest
import torch

from nimble_rs.dynamo.runtime import runner
from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import Inception, relative_error, train_beside_eager


def test_auto_measures_both_and_says_why():
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model)
    with torch.no_grad():
        x = torch.randn(1, 16, 24, 24, device="cuda")
        assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["choice"] in ("streams", "single"), report
    # The critical-path plan too, unless it is the primary plan (option time_critical_path).
    timed = {"streams", "single"} | ({"critical"} if isinstance(report["critical_path"], dict) else set())
    assert set(report["measured_ms"]) == timed and "measured" in report["reason"], report
    # Every program's outputs against the ATen graph run eagerly on the capture's input.
    assert set(report["measured_error"]) == timed, report
    assert all(0 <= e < TOLERANCE for e in report["measured_error"].values()), report


@pytest.mark.parametrize("critical_faster", [True, False])
def test_the_critical_path_plan_is_kept_where_it_is_the_fastest(critical_faster, monkeypatch):
    # Three programs timed (one region, the primary plan, the heaviest path first): the fastest
    # beyond noise is kept, the critical-path plan captured with its stream 0 at the highest
    # priority, and its outputs match eager.
    from nimble_rs.dynamo.runtime import compiled as choice

    captures, replays = [], []
    capture, replay, checked = runner.CapturedGraph.__init__, runner.CapturedGraph.__call__, runner.CapturedGraph.replay_checked

    def recorded_capture(graph, program, *args, **kwargs):
        capture(graph, program, *args, **kwargs)
        captures.append((graph, program.partition.algorithm, args[-1]))

    monkeypatch.setattr(runner.CapturedGraph, "__init__", recorded_capture)
    monkeypatch.setattr(runner.CapturedGraph, "__call__", lambda graph, args: replays.append(graph) or replay(graph, args))
    # (The user's calls of an inference graph: replayed, then its addresses checked.)
    monkeypatch.setattr(runner.CapturedGraph, "replay_checked", lambda graph, args: replays.append(graph) or checked(graph, args))
    timings = iter([[1.0] * 30, [0.8] * 30, [0.5 if critical_faster else 0.9] * 30])
    monkeypatch.setattr(choice, "time_samples_ms", lambda run, repeats=30: next(timings))
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert isinstance(report["critical_path"], dict), report  # the plans differ on this model
    assert report["measured_ms"] == {"single": 1.0, "streams": 0.8, "critical": 0.5 if critical_faster else 0.9}, report
    assert report["choice"] == "streams" and report["captured_shapes"] == 1, report
    # One capture each to time; the kept graph is the fastest's, not captured again.
    assert [(algorithm, priority) for _, algorithm, priority in captures] == [("single", False), ("nimble", False), ("nimble-critical", True)], captures
    kept = next(c for c in captures if c[1] == ("nimble-critical" if critical_faster else "nimble"))
    assert replays[-5:] == [kept[0]] * 5, (replays, captures)
    if critical_faster:
        assert report["algorithm"] == "nimble-critical" and report["priority"] is True, report
        assert report["streams"] == report["critical_path"]["streams"] and "heaviest path first" in report["reason"], report
    else:
        assert report["algorithm"] == "nimble" and "priority" not in report, report


@pytest.mark.parametrize("accuracy, spread", [("compiler", 0.0), ("any", 0.0), ("compiler", 0.15)])
def test_streams_further_from_eager_than_one_region_beyond_its_spread_are_not_kept(accuracy, spread, monkeypatch):
    # The decision alone, on real captures: the timings say the streams win, the distances that
    # they are further from eager (one region's first: on each of its five inputs its distance,
    # then how far it is from itself run again; then the streams' distances). accuracy="compiler" keeps
    # one region, unless the streams are within its own spread; "any" keeps the streams.
    from nimble_rs.dynamo.runtime import compiled as choice

    timings = iter([[1.0] * 30, [0.5] * 30])
    distances = iter([0.1, spread] * choice.ACCURACY_INPUTS + [0.2] * choice.ACCURACY_INPUTS)
    monkeypatch.setattr(choice, "time_samples_ms", lambda run, repeats=30: next(timings))
    monkeypatch.setattr(choice, "distance", lambda got, expected: next(distances))
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, accuracy=accuracy, time_critical_path=False)
    with torch.no_grad():
        x = torch.randn(1, 16, 24, 24, device="cuda")
        assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["measured_error"] == {"single": 0.1, "streams": 0.2} and report["measured_spread"] == spread, report
    if accuracy == "compiler" and spread == 0.0:
        assert report["choice"] == "single" and "further from eager" in report["reason"] and "0.00e+00 from itself" in report["reason"], report
    else:
        assert report["choice"] == "streams", report


class TwoScatters(torch.nn.Module):
    """Two independent sums by index (two streams): Inductor adds each value in with an atomic
    addition, in whatever order the GPU runs them."""

    def forward(self, x, i, y, j):
        a = torch.zeros(8, x.shape[1], device=x.device).index_add_(0, i, x)
        b = torch.zeros(4, y.shape[1], device=y.device).index_add_(0, j, y)
        return a, b


def test_the_compilers_own_spread_is_measured_where_its_sums_are_atomic():
    # Deterministic kernels run the same on the same inputs: no spread. Atomic additions of many
    # values into few sums do not (float addition is not associative), and the choice measures
    # by how much.
    fast = compiled(Inception(channels=16).cuda().eval())
    with torch.no_grad():
        fast(torch.randn(1, 16, 24, 24, device="cuda"))
    assert last_report()["measured_spread"] == 0.0, last_report()
    model = TwoScatters()
    x, y = torch.randn(1 << 18, 64, device="cuda"), torch.randn(1 << 17, 32, device="cuda")
    i, j = torch.randint(0, 8, (x.shape[0],), device="cuda"), torch.randint(0, 4, (y.shape[0],), device="cuda")
    fast = compiled(model)
    with torch.no_grad():
        got, expected = fast(x, i, y, j), model(x, i, y, j)
    assert all(relative_error(a, b) < TOLERANCE for a, b in zip(got, expected))
    report = last_report()
    assert report["streams"] >= 2 and report["measured_spread"] > 0, report


@pytest.mark.parametrize("clear", [True, False])
def test_timings_that_do_not_tell_the_programs_apart_are_taken_again(clear, monkeypatch):
    # The first timings overlap, the streams' median the lower: both are timed three times more,
    # in turns (one region captured again), and the pooled samples decide.
    from nimble_rs.dynamo.runtime import compiled as choice

    first = [[0.9] * 10 + [1.0] * 10 + [1.1] * 10, [0.8] * 10 + [0.95] * 10 + [1.2] * 10]
    again = [[1.0] * 30, [0.5] * 30] if clear else [[0.9] * 15 + [1.1] * 15, [0.8] * 15 + [1.2] * 15]
    timings = iter(first + again * choice.RETIMINGS)
    calls = []
    monkeypatch.setattr(choice, "time_samples_ms", lambda run, repeats=30: calls.append(run) or next(timings))
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, time_critical_path=False)
    with torch.no_grad():
        x = torch.randn(1, 16, 24, 24, device="cuda")
        assert relative_error(fast(x), model(x)) < TOLERANCE
        assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert len(calls) == 2 + 2 * choice.RETIMINGS and report["timed_again"] == choice.RETIMINGS, report
    assert report["choice"] == ("streams" if clear else "single") and "3 more timings each" in report["reason"], report


def test_references_above_the_bound_wait_in_host_memory_and_measure_the_same(monkeypatch):
    # Eager's outputs larger than HOST_REFERENCES_BYTES (a backward's every gradient) are kept on
    # the host, each moved back for its comparison: the check measures the same distances as
    # with them on the device, and a training step's choices still keep gradients right.
    import copy

    import nimble_rs
    from nimble_rs.dynamo.runtime import compiled as choice

    model = Inception(channels=16).cuda().eval()
    x = torch.randn(1, 16, 24, 24, device="cuda")
    errors = []
    for bound in (choice.HOST_REFERENCES_BYTES, 0):
        monkeypatch.setattr(choice, "HOST_REFERENCES_BYTES", bound)
        fast = compiled(model)
        with torch.no_grad():
            assert relative_error(fast(x), model(x)) < TOLERANCE
        report = last_report()
        assert report.get("references") == ("host" if bound == 0 else None), report
        errors.append(report["measured_error"])
    assert errors[0].keys() == errors[1].keys() and all(errors[1][k] == pytest.approx(errors[0][k], rel=1e-6, abs=1e-12) for k in errors[0]), errors
    eager = Inception(channels=8).cuda().train()
    trained = copy.deepcopy(eager)
    fast = compiled(trained)
    before = len(nimble_rs.dynamo.reports())
    train_beside_eager(eager, fast, trained, lambda: torch.randn(4, 8, 16, 16, device="cuda"), steps=3, state_rtol=1e-4)
    reports = nimble_rs.dynamo.reports()[before:]
    assert [(r["graph"], r.get("references")) for r in reports] == [("forward", "host"), ("backward", "host")], reports


class EightBranches(torch.nn.Module):
    """Eight independent chains of two matrix products through a wide middle: one stream reuses
    one chain's wide buffer for the next; on eight streams all eight are live at once."""

    def __init__(self, d=256, wide=4096):
        super().__init__()
        shapes = [(d, wide), (wide, d)] * 8
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(shape) / shape[0] ** 0.5) for shape in shapes])

    def forward(self, x):
        return torch.stack([((x @ self.w[2 * i]) @ self.w[2 * i + 1]).sum(0) for i in range(8)])


def test_a_plan_on_streams_the_device_has_no_room_for_gives_way_to_one_region():
    # A real shortage: the process limited (PyTorch's per-process memory fraction) to what one
    # region's capture needs and less than the plan on streams needs. The choice catches the
    # plan's out-of-memory error, says so once, and keeps Inductor's own program.
    import gc

    model = EightBranches().cuda().eval()
    x = torch.randn(4096, 256, device="cuda")
    with torch.no_grad():
        expected = model(x)
        compiled(model, time_critical_path=False)(x)
    peaks = last_report()["measured_peak_bytes"]
    assert peaks["streams"] > 4 * peaks["single"], peaks
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    # Room for the user's input copied, one of the check's shuffles of it (with its int64
    # permutation), and halfway between the two programs' captures: one region's warm-up and
    # capture fit (twice its peak, if its warm-up's memory stays cached), the streams' capture
    # does not.
    limit = torch.cuda.memory_reserved() + 4 * x.nbytes + (peaks["single"] + peaks["streams"]) // 2
    caught = compiled_within(limit, model, x, lambda got: relative_error(got, expected) < TOLERANCE)
    report = last_report()
    assert report["choice"] == "single" and report.get("out_of_memory") == ["streams"] and "ran out of device memory" in report["reason"], (peaks, report)
    assert sum("ran out of device memory" in message for message in caught) == 1, caught


def compiled_within(limit: int, model, x, right) -> list:
    """``model`` compiled and called twice on ``x`` (each output ``right``) with the process held
    to ``limit`` bytes of device memory (PyTorch's per-process memory fraction, put back after);
    the warnings it gave."""
    import warnings

    torch.cuda.set_per_process_memory_fraction(limit / torch.cuda.get_device_properties(x.device).total_memory)
    try:
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            fast = compiled(model, time_critical_path=False)
            for _ in range(2):
                assert right(fast(x))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    return [str(w.message) for w in caught]


class FailsOnItsSideStream:
    """A two-stream program whose capture runs out of memory after forking its side stream
    (its warm-ups run through)."""

    partition = type("Partition", (), {"streams": 2})

    def launch(self, args, streams):
        streams[1].wait_stream(streams[0])
        with torch.cuda.stream(streams[1]):
            doubled = args[0] * 2
        if torch.cuda.is_current_stream_capturing():
            raise torch.OutOfMemoryError("CUDA out of memory (raised by the test)")
        streams[0].wait_stream(streams[1])
        return doubled


def test_a_capture_failing_on_a_side_stream_raises_its_own_error_and_leaves_the_process_sound():
    # The out-of-memory error the choice catches, not "capturing stream has unjoined work"; and
    # no random generator left marked as capturing (a later random op would fail).
    x = torch.randn(64, 64, device="cuda")
    with pytest.raises(torch.OutOfMemoryError, match="raised by the test"):
        runner.CapturedGraph(FailsOnItsSideStream(), [x], [False], warmups=1)
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.randn(8, device="cuda").isfinite().all()
    graph, static = torch.cuda.CUDAGraph(), torch.zeros(4, device="cuda")
    with torch.cuda.graph(graph):
        static.add_(torch.rand(4, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()


class TwoChains(torch.nn.Module):
    """Two chains of pointwise ops over one input, each ending in a sum: Inductor fuses each into
    one kernel reading the input; the ATen graph run op by op makes each op's output in full."""

    def forward(self, x):
        a, b = x, x
        for _ in range(4):
            a, b = torch.sin(a) * 2 + 1, torch.cos(b) * 3 - 1
        return a.sum(0), b.sum(1)


def test_eagers_references_the_device_has_no_room_for_give_way_to_one_region():
    # A real shortage again (PyTorch's per-process memory fraction): room for the input's static
    # copy (one region's capture needs little more) but not for the ATen graph's full-size
    # intermediates, which eager's references for the accuracy check need. The choice keeps
    # Inductor's own program, captured once its memory is let go, with one warning.
    import gc

    model = TwoChains()
    x = torch.randn(8192, 8192, device="cuda")
    with torch.no_grad():
        expected = model(x)
    gc.collect()
    torch.cuda.empty_cache()
    limit = torch.cuda.memory_reserved() + 3 * x.nbytes // 2
    caught = compiled_within(limit, model, x, lambda got: all(relative_error(a, b) < TOLERANCE for a, b in zip(got, expected)))
    report = last_report()
    assert report["streams"] >= 2 and report["choice"] == "single" and report.get("out_of_memory") == ["references"], report
    assert "eager's references for the accuracy check ran out of device memory" in report["reason"], report
    assert sum("ran out of device memory" in message for message in caught) == 1, caught
