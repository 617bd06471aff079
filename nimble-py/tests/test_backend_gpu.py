"""torch.compile(backend="nimble") on a CUDA GPU: regions captured on several streams in one CUDA
graph, parameters read in place, one memory pool for every shape, buffers safe across streams,
and the fallback for a graph that cannot be captured (the measured choice between programs:
test_backend_gpu_choice.py; fused convolutions: test_backend_gpu_fold.py). Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails
instead."""

import gc
import re
import warnings

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.runtime import runner
from nimble_rs.dynamo.common import timing
from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import Attention, Counter, Inception, ScalesItsInput, inductor_programs, relative_error, train_beside_eager


def test_regions_on_streams_are_one_graph_that_matches_eager():
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, choose="streams")
    with torch.no_grad():
        for _ in range(10):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["streams"] >= 3 and report["regions"] > report["streams"], report
    assert report["choice"] == "streams" and report["captured_shapes"] == 1, report


def test_the_heaviest_path_is_captured_at_high_priority_and_matches_eager(monkeypatch):
    made = []

    class Recorded(torch.cuda.Stream):
        def __new__(cls, device=None, priority=0, **kwargs):
            made.append(priority)
            return super().__new__(cls, device, priority, **kwargs)

    monkeypatch.setattr(torch.cuda, "Stream", Recorded)
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, choose="streams", algorithm="nimble-critical", priority=True)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["streams"] >= 3 and report["choice"] == "streams" and report["algorithm"] == "nimble-critical", report
    # The capture stream (the plan's stream 0) at the highest priority, the others at the default.
    highest = Recorded.priority_range()[1]
    assert highest < 0 and highest in made, made
    first = made.index(highest)
    assert made[first + 1 : first + report["streams"]] == [0] * (report["streams"] - 1), made


def test_inductors_cuda_program_is_read_kernel_by_kernel():
    # Triton kernels' parameters read from their source (inputs named in_ptr*), extern kernels'
    # outputs from out=: a kernel read as writing everything would serialize every reader.
    from nimble_rs.dynamo.program import kernels_plan
    from nimble_rs.dynamo.program.emit import Schedule
    from nimble_rs.dynamo.program.wrapper import WrapperProgram

    model = Inception(channels=16).cuda().eval()
    (program, static), = inductor_programs(model, torch.randn(2, 16, 24, 24, device="cuda"))
    wrapper = WrapperProgram(kernels_plan.inductor_module(program), static)
    triton = [s for s in wrapper.statements if s.kind == "kernel" and s.name.startswith("triton_")]
    assert triton and all(wrapper.signatures.writes(s.name) is not None for s in triton), [s.name for s in triton]
    assert wrapper.stream_variables, "no get_raw_stream in Inductor's call"
    plan, cut = kernels_plan.plan(wrapper, "nimble")
    assert plan["streams"] >= 3, plan
    schedule = Schedule(wrapper, cut["regions"], cut["syncs"])
    schedule.check()
    schedule.function(streams=True)
    # Triton launches on side streams take those streams' handles.
    assert re.search(r"stream=_nimble_raw\[[1-9]\]", schedule.source), schedule.source


def test_parameters_are_read_in_place():
    model = Inception(channels=8).cuda().eval()
    fast = compiled(model, choose="streams")
    x = torch.randn(1, 8, 16, 16, device="cuda")
    with torch.no_grad():
        fast(x)
        # Changed in place after the capture: the graph reads the new values, not a copy.
        model.mix.weight.mul_(-2.0)
        model.b3[0].bias.add_(1.0)
        assert relative_error(fast(x), model(x)) < TOLERANCE


def test_a_parameter_whose_memory_moved_is_captured_again():
    # `p.data = other`: the same Parameter object at another address (Dynamo does not compile
    # again). The old graph would read the old memory: it is captured again, announced. An
    # inference graph replays before it compares the addresses: that replay reads the old
    # memory, which the graph holds, even once the allocator has given back what it caches.
    model = Inception(channels=8).cuda().eval()
    fast = compiled(model, choose="streams")
    x = torch.randn(1, 8, 16, 16, device="cuda")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast(x)
        assert last_report()["addresses_checked"] == "after the launch", last_report()
        for scale in (-2.0, 0.5):
            model.mix.weight.data = model.mix.weight.data * scale
            gc.collect()
            torch.cuda.empty_cache()
            for _ in range(2):
                x = torch.randn(1, 8, 16, 16, device="cuda")
                assert relative_error(fast(x), model(x)) < TOLERANCE
    assert sum("capturing again" in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]
    assert last_report()["captured_shapes"] == 1


def test_weight_layout_copies_run_outside_the_graph_and_again_when_a_weight_changes():
    # Inductor copies each 3x3 and 5x5 convolution's weight into the layout the convolution
    # reads, on every call. With hoist_weight_kernels the copies run before the graph, and
    # again only when such a weight changed in place or moved.
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, choose="streams", hoist_weight_kernels=True)
    x = torch.randn(2, 16, 24, 24, device="cuda")
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < TOLERANCE
        report = last_report()
        assert report["hoisted_kernels"] >= 2 and report["hoisted_bytes"] > 0, report
        model.b2[2].weight.mul_(-2.0)
        model.b3[2].weight.data = model.b3[2].weight.data * 0.5
        for _ in range(3):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    assert last_report()["captured_shapes"] == 1


@pytest.mark.parametrize("algorithm", ["nimble", "single"])
def test_weight_layout_copies_on_a_stream_of_their_own_are_captured_and_see_every_change(algorithm):
    # With weight_stream the copies run on every call, first, on a stream of their own in the
    # graph, each into a buffer of its own; the convolutions wait for their events. A write
    # through `.data`, which hoisting misses, is seen. ("single" plans one stream: the copies'
    # stream is the second.)
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, choose="streams", weight_stream=True, algorithm=algorithm)
    x = torch.randn(2, 16, 24, 24, device="cuda")
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < TOLERANCE
        report = last_report()
        assert report["weight_stream_kernels"] >= 2 and report["choice"] == "streams", report
        if algorithm == "single":
            assert report["streams"] == 2, report
        model.b2[2].weight.data.mul_(-2.0)
        for _ in range(3):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    assert last_report()["captured_shapes"] == 1


@pytest.mark.parametrize("streams_faster", [True, False])
def test_hoisted_values_are_kept_only_while_a_plan_that_reads_them_is(streams_faster, monkeypatch):
    # The choice times the plans with the weights' kernels hoisted against Inductor's own
    # program. Kept, the plan reads the hoisted values; not kept, they are freed.
    from nimble_rs.dynamo.runtime import compiled as choice

    timings = iter([[1.0] * 30, [0.5 if streams_faster else 2.0] * 30, [0.6 if streams_faster else 2.0] * 30])
    monkeypatch.setattr(choice, "time_samples_ms", lambda run, repeats=30: next(timings))
    kept = []
    original = nimble_rs.dynamo.program.hoist.Prologue.release
    monkeypatch.setattr(nimble_rs.dynamo.program.hoist.Prologue, "release", lambda self: kept.append(self) or original(self))
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, hoist_weight_kernels=True)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["hoisted_kernels"] >= 2 and report["choice"] == ("streams" if streams_faster else "single"), report
    if streams_faster:
        assert not kept and report["hoisted_bytes"] > 0, report
    else:
        assert len(kept) == 1 and kept[0].cache == {} and "hoisted_bytes" not in report, report


def test_shapes_share_one_pool_and_are_bounded():
    model = Attention(d=32).cuda().eval()
    fast = compiled(model, choose="streams", max_shapes=2)
    pool = runner.shared_pool()
    torch._dynamo.config.automatic_dynamic_shapes, saved = False, torch._dynamo.config.automatic_dynamic_shapes
    try:
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for tokens in (5, 9, 13, 5):
                x = torch.randn(2, tokens, 32, device="cuda")
                assert relative_error(fast(hidden_states=x)["last_hidden_state"], model(hidden_states=x)["last_hidden_state"]) < TOLERANCE
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = saved
    assert runner.shared_pool() == pool
    bounded = [str(w.message) for w in caught if "max_shapes" in str(w.message)]
    assert len(bounded) == 1, ([str(w.message) for w in caught], last_report())


def test_with_programmatic_launch_inductors_kernels_keep_inductors_order():
    # Inductor's programmatic dependent launch (Hopper and later) lets a kernel read before the
    # kernel launched before it ends, where Inductor's order makes that safe: the plan must not
    # reorder those kernels.
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("Inductor launches kernels so on Hopper and later GPUs only")
    model = Inception(channels=16).cuda().eval()
    fast = compiled(model, choose="streams", inductor_config={"triton.enable_pdl": True})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert "triton.enable_pdl" in report["reason"] and report["choice"] == "single" and report["streams"] == 1, report
    assert sum("triton.enable_pdl" in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]
    assert not torch._inductor.config.triton.enable_pdl


def test_a_new_model_captures_after_every_earlier_graph_is_gone_but_its_output_is_kept():
    # PyTorch's allocator lets a capture share a pool only while a graph captured into it lives;
    # with every earlier graph gone (dynamo reset) but one of its outputs still held, sharing the
    # old pool failed an internal assertion and left the CUDA generator in capture mode.
    first = Inception().cuda().eval()
    x = torch.randn(2, 4, 16, 16, device="cuda")
    with torch.no_grad():
        kept = compiled(first, choose="streams")(x)
    expected = first(x).clone()
    pool = runner.shared_pool()
    second = Inception().cuda().eval()
    fast = compiled(second)  # resets dynamo: the first model's graphs are gone, `kept` is not
    gc.collect()
    with torch.no_grad():
        for _ in range(2):
            y = fast(x)
            assert relative_error(y, second(x)) < TOLERANCE
    assert runner.shared_pool() != pool, "the next captures share a pool with a live graph"
    assert relative_error(kept, expected) < TOLERANCE, "the kept output is the first model's, untouched"
    torch.randn(4, device="cuda")  # the generator is not left in capture mode


def test_captures_leave_no_cublas_workspace_behind():
    # The projections run on side streams. cuBLAS keeps a workspace per handle and stream for
    # the process's life: a warm-up on a new stream used to leave one allocated for good.
    model = Attention(d=256, heads=4).cuda().eval()
    x = torch.randn(4, 32, 256, device="cuda")
    # What earlier tests left for the collector goes first: it is not this test's to count.
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    timing.clear_cublas_workspaces()
    before = torch.cuda.memory_allocated()
    fast = compiled(model, choose="streams")
    with torch.no_grad():
        for _ in range(3):
            out = fast(hidden_states=x)
        assert relative_error(out["last_hidden_state"], model(hidden_states=x)["last_hidden_state"]) < TOLERANCE
    assert last_report()["streams"] >= 2, last_report()
    del fast, out
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    timing.clear_cublas_workspaces()  # eager's own call above, on the current stream
    assert torch.cuda.memory_allocated() == before


def test_capturing_leaves_the_processs_peak_memory_statistics_alone():
    # What a capture holds is read from its pool's segments: resetting the peak-memory
    # statistics to measure it hid every earlier peak from the user (and from our records).
    model = Inception(channels=16).cuda().eval()
    big = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    del big
    peak = torch.cuda.max_memory_allocated()
    with torch.no_grad():
        x = torch.randn(2, 16, 24, 24, device="cuda")
        assert relative_error(compiled(model)(x), model(x)) < TOLERANCE
    report = last_report()
    assert torch.cuda.max_memory_allocated() >= peak, (torch.cuda.max_memory_allocated(), peak)
    # Each program timed has what its capture added to the pool; the first, into a new pool, more than nothing.
    assert set(report["measured_peak_bytes"]) == set(report["measured_ms"]) and report["measured_peak_bytes"]["single"] > 0, report


@pytest.mark.parametrize("granularity", ["kernels", "regions"])
def test_values_read_on_other_streams_are_not_reused_while_read(granularity):
    # Wide branches of unequal length: a value made on one stream is read by a kernel on
    # another while its own stream goes on allocating (and, with granularity "kernels",
    # Inductor reuses buffers planned for one stream). A race shows as wrong numbers.
    model = Inception(channels=32).cuda().eval()
    fast = compiled(model, choose="streams", granularity=granularity)
    with torch.no_grad():
        for _ in range(20):
            x = torch.randn(4, 32, 32, 32, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert all(v > 0 for v in report["peak_bytes"].values()), report


@pytest.mark.parametrize("choose", ["streams", "auto"])
def test_buffers_written_in_place_are_written_once_per_call(choose):
    # Warm-ups, the choice's timings and its accuracy check run the graph many times: a
    # buffer it writes must end as if only the user's calls had run.
    eager, model = Counter().cuda(), Counter().cuda()
    model.load_state_dict(eager.state_dict())
    fast = compiled(model, choose=choose)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 4, device="cuda")
            assert relative_error(fast(x), eager(x)) < TOLERANCE
        # A graph that writes a buffer it reads in place compares the addresses before its
        # launch: a replay wasted on a moved weight would add to the buffer twice.
        assert "addresses_checked" not in last_report(), last_report()
        model.fc.weight.data = model.fc.weight.data.clone()
        x = torch.randn(3, 4, device="cuda")
        assert relative_error(fast(x), eager(x)) < TOLERANCE
    assert torch.allclose(model.seen, eager.seen, atol=1e-5), (model.seen, eager.seen)


def test_a_user_input_written_in_place_is_copied_back():
    model = ScalesItsInput().cuda()
    fast = compiled(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4, device="cuda")
            mine = x.clone()
            expected = model(mine)
            assert relative_error(fast(x), expected) < TOLERANCE
            assert torch.equal(x, mine)


def test_a_graph_that_cannot_be_captured_runs_uncaptured_with_a_warning():
    class ToHost(torch.nn.Module):
        def forward(self, x):
            return (x * 2).cpu() + 1

    model = ToHost()
    fast = compiled(model)
    x = torch.randn(8, device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(fast(x), model(x))
    assert any("without a CUDA graph" in str(w.message) and "cpu" in str(w.message) for w in caught), [str(w.message) for w in caught]


TRAINING_MODELS = [(lambda: Inception(channels=8), (4, 8, 16, 16)), (lambda: Attention(d=32), (2, 7, 32))]


@pytest.mark.parametrize("make, shape", TRAINING_MODELS)
def test_training_steps_are_captured_and_match_eager(make, shape):
    # Forward and backward each one CUDA graph: the backward reads the values the forward saved
    # in place; gradients reach .grad, SGD steps the parameters, BatchNorm's statistics move.
    import copy

    eager = make().cuda().train()
    model = copy.deepcopy(eager)
    fast = compiled(model)
    before = len(nimble_rs.dynamo.reports())
    train_beside_eager(eager, fast, model, lambda: torch.randn(shape, device="cuda"), steps=4, state_rtol=1e-4)
    reports = nimble_rs.dynamo.reports()[before:]
    assert [r["graph"] for r in reports] == ["forward", "backward"], reports
    for r in reports:
        assert r.get("captured_shapes") == 1 and "uncaptured_calls" not in r and "uncapturable" not in r, r


def test_gradients_are_lent_to_autograd_and_gradients_kept_across_calls_stay_right():
    # The usual loop (zero_grad() sets gradients to None): autograd takes the backward graph's
    # gradients over instead of copying each. Gradients kept from one backward call to the next
    # (zero_grad(set_to_none=False) and accumulation over micro-batches, a forward between the
    # backward calls): those calls run on a second graph, captured once, whose gradients are
    # copied, and every gradient is still eager's; back in the usual loop the first graph lends
    # again.
    import copy

    eager = Inception(channels=8).cuda().train()
    model = copy.deepcopy(eager)
    fast = compiled(model)
    before = len(nimble_rs.dynamo.reports())
    make = lambda: torch.randn(4, 8, 16, 16, device="cuda")
    train_beside_eager(eager, fast, model, make, steps=3, state_rtol=1e-4)
    backward = [r for r in nimble_rs.dynamo.reports()[before:] if r["graph"] == "backward"][-1]
    assert backward["gradients"] == "lent" and backward.get("captured_shapes") == 1 and "copied_calls" not in backward, backward
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for m in (eager, model):
                m.zero_grad(set_to_none=False)
            for _ in range(2):
                x = make()
                for run in (eager, fast):
                    run(x).square().mean().backward()
            for a, b in zip(eager.parameters(), model.parameters()):
                assert torch.allclose(b.grad, a.grad, rtol=1e-4, atol=1e-6), (a.grad, b.grad)
    assert backward["copied_calls"] == 6 and "uncaptured_calls" not in backward, backward
    assert sum("second graph" in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]
    # Gradients set to None again: the lending graph runs, its gradients become .grad as they are.
    train_beside_eager(eager, fast, model, make, steps=2, state_rtol=1e-4)
    assert backward["copied_calls"] == 6 and backward["gradients"] == "lent" and "uncaptured_calls" not in backward, backward


def test_a_second_forward_before_the_backward_does_not_overwrite_the_first():
    # Gradient accumulation over two forwards and one backward: the second forward must not
    # replay over the values the first one saved, nor a backward over the gradients autograd
    # still holds to sum with the next; each runs uncaptured then, with one warning.
    import copy

    eager = Inception(channels=8).cuda().train()
    model = copy.deepcopy(eager)
    fast = compiled(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x1, x2 = torch.randn(2, 8, 16, 16, device="cuda"), torch.randn(2, 8, 16, 16, device="cuda")
            for run, m in ((eager, eager), (fast, model)):
                m.zero_grad()
                (run(x1).square().mean() + run(x2).abs().mean()).backward()
            for a, b in zip(eager.parameters(), model.parameters()):
                assert torch.allclose(b.grad, a.grad, rtol=1e-4, atol=1e-6), (a.grad, b.grad)
    assert any("ran again before the backward" in str(w.message) for w in caught), [str(w.message) for w in caught]
