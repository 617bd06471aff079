"""Option hoist_weight_kernels on the CPU: the kernels that read parameters and buffers alone
run once before the program, again only when such a parameter changed as PyTorch tracks it,
and what the program computes stays eager's; those kernels no longer order the branches (their
reused buffers made the plan one stream)."""

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.program import hoist, kernels_plan
from nimble_rs.dynamo.program.wrapper import WrapperProgram
from models import Decaying, Inception, WeightNormed, inductor_programs, relative_error


def every_algorithm():
    return [usage.replace(":K", ":3") for _, usage, _ in nimble_rs.algorithms()]


def compiled(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="nimble", options={"hoist_weight_kernels": True, **options})


def last_report():
    return [r for r in nimble_rs.dynamo.reports() if r["graph"] == "inference"][-1]


@pytest.fixture(scope="module")
def weight_normed():
    torch.manual_seed(0)
    model, x = WeightNormed().eval(), torch.randn(4, 16)
    (program, static), = inductor_programs(model, x)
    return model, x, WrapperProgram(kernels_plan.inductor_module(program), static)


def test_kernels_on_weights_alone_are_found_and_no_longer_order_the_branches(weight_normed):
    model, x, wrapper = weight_normed
    weight_only = wrapper.weight_only()
    # Given no storage as parameters (every one written, say), no kernel reads weights alone.
    assert wrapper.weight_only(static=set()) == []
    before, _ = kernels_plan.plan(wrapper, "nimble")
    hoisting = hoist.find(wrapper)
    # One kernel per branch computes its weight; Inductor gives each the last one's buffers.
    assert sorted(hoisting.written) == weight_only and len(weight_only) == 3, hoisting
    assert all(len(names) == 2 for names in hoisting.written.values()), hoisting
    assert hoisting.inputs == [1, 2, 3, 4, 5, 6], hoisting  # every v and g; not the input x
    wrapper.exclude(hoisting)
    after, cut = kernels_plan.plan(wrapper, "nimble")
    # The reused buffers chained the branches: one stream; without those kernels, one each.
    assert before["streams"] == 1 and after["streams"] == 3, (before, after)
    assert not any(i in hoisting.written for task in wrapper.tasks for i in task.statements)


def test_kernels_updating_an_activation_in_place_are_not_taken_for_kernels_on_weights():
    # On the CPU Inductor fuses each weight's layout copy into the ReLU it applies in place to
    # the branch's activation: by its accesses (a storage read and written counts as written)
    # such a kernel reads parameters alone, and so do the convolutions reading its output.
    # None of them is on weights alone (``WrapperProgram.weight_only``, the rule the task graph,
    # the weight stream and hoisting share), and none may run before the program.
    torch.manual_seed(0)
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    (program, static), = inductor_programs(model, x)
    wrapper = WrapperProgram(kernels_plan.inductor_module(program), static)
    by_accesses = [s.index for s in wrapper.statements if s.kind == "kernel" and s.reads and s.reads <= wrapper.static_storages]
    assert len(by_accesses) >= 3, by_accesses
    assert wrapper.weight_only() == []
    hoisting = hoist.find(wrapper)
    assert hoisting.written == {} and hoisting.refused == {}, hoisting


def test_separated_weight_buffers_let_the_branches_run_apart_and_every_change_is_seen():
    # Option separate_weight_buffers: each branch's weight gets a buffer of its own, so the
    # branches run side by side; the kernels still run on every call, so a write through
    # `.data` is seen too (hoisting is what misses it).
    torch.manual_seed(0)
    model = WeightNormed().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="nimble", options={"separate_weight_buffers": True, "weight_stream": False})
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < 1e-5
        report = last_report()
        # Each of the second and third weights' two buffers was the first one's.
        assert report["separated_weight_buffers"] == 4 and report["streams"] == 3, report
        assert "hoisted_kernels" not in report, report
        model.v[1].data.mul_(-1.0)
        model.g[0].mul_(3.0)
        assert relative_error(fast(x), model(x)) < 1e-5
    torch._dynamo.reset()
    shared = torch.compile(model, backend="nimble", options={"weight_stream": False})
    with torch.no_grad():
        assert relative_error(shared(x), model(x)) < 1e-5
    report = last_report()
    assert "separated_weight_buffers" not in report and report["streams"] == 1, report


def test_a_kernel_updating_a_reused_buffer_in_place_keeps_that_buffer(weight_normed):
    # A kernel that reads the last value of the buffer Inductor gave it (an in_out_ptr
    # parameter) needs that very buffer: neither separated nor hoisted. Seen as such, the
    # second and third weights' kernel (one kernel, the same code) is refused, and with it the
    # first, whose buffers the second then writes in the program.
    import copy as copying

    model, x, wrapper = weight_normed
    kernel = wrapper.statements[wrapper.weight_only()[0]].name
    names = wrapper.signatures.names[kernel]
    assert names == ["in_ptr0", "in_ptr1", "out_ptr0", "out_ptr1"], names
    in_place = copying.copy(wrapper)
    in_place.signatures = copying.deepcopy(wrapper.signatures)
    in_place.signatures.names[kernel] = ["in_ptr0", "in_ptr1", "in_out_ptr0", "in_out_ptr1"]
    hoisting = hoist.find(in_place)
    first, second, third = wrapper.weight_only()
    assert hoisting.written == {}, hoisting
    assert hoisting.refused[second] == hoisting.refused[third] == "it updates a reused buffer in place", hoisting.refused
    assert hoisting.refused[first] == f"its buffer is written by a kernel left in the program: {kernel} (statement {second})", hoisting.refused
    assert list(hoist.find(wrapper).written) == [first, second, third]
    assert hoist.separate(in_place, hoisting) == {}


@pytest.mark.parametrize("algorithm", every_algorithm())
def test_hoisted_kernels_run_before_the_plan_and_outputs_stay_eagers(algorithm):
    torch.manual_seed(0)
    model = WeightNormed().eval()
    fast = compiled(model, algorithm=algorithm)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 16)
            assert relative_error(fast(x), model(x)) < 1e-5
    report = last_report()
    assert report["hoisted_kernels"] == 3, report
    if report["streams"] > 1:
        assert report["choice"] == "streams", report


def test_a_changed_parameter_runs_the_hoisted_kernels_again_and_only_then(monkeypatch):
    torch.manual_seed(0)
    model = WeightNormed().eval()
    runs = []
    original = hoist.Prologue.prepare

    def counted(self, args):
        before = self.seen
        original(self, args)
        runs.append(self.seen != before)

    monkeypatch.setattr(hoist.Prologue, "prepare", counted)
    fast = compiled(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        fast(x)
        fast(x)
        assert runs == [True, False], runs
        # In place (the version counter), a new state dict (load_state_dict copies in place),
        # a parameter's memory replaced: each is seen before the next call.
        model.v[0].mul_(-2.0)
        assert relative_error(fast(x), model(x)) < 1e-5
        state = {k: torch.randn_like(t) for k, t in model.state_dict().items()}
        model.load_state_dict(state)
        assert relative_error(fast(x), model(x)) < 1e-5
        model.g[2].data = torch.rand(16, 1) + 2.0
        assert relative_error(fast(x), model(x)) < 1e-5
        fast(x)
    assert runs == [True, False, True, True, True, False], runs


def test_a_chain_on_one_stream_still_runs_its_hoisted_kernels_before_the_program():
    # One branch: the plan has one stream, and without hoisting the backend would run Inductor's
    # program as it is; with it, the program on one stream without the weight's kernel.
    torch.manual_seed(0)
    model = WeightNormed(branches=1).eval()
    fast = compiled(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < 1e-5
        report = last_report()
        assert report["hoisted_kernels"] == 1 and report["streams"] == 1 and report["choice"] == "streams", report
        model.g[0].mul_(-2.0)
        assert relative_error(fast(x), model(x)) < 1e-5


def test_a_write_through_data_is_not_seen_which_is_why_the_option_is_off_by_default():
    # `p.data` is a tensor with a version counter of its own: a write through it is not seen.
    torch.manual_seed(0)
    model = WeightNormed().eval()
    fast = compiled(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        before = fast(x).clone()
        model.v[1].data.mul_(-1.0)
        assert torch.equal(fast(x), before)
        assert relative_error(before, model(x)) > 0.1
    torch._dynamo.reset()
    plain = torch.compile(model, backend="nimble")
    with torch.no_grad():
        assert relative_error(plain(x), model(x)) < 1e-5


def test_weights_scaled_by_a_buffer_the_graph_changes_are_not_hoisted():
    torch.manual_seed(0)
    model, reference = Decaying().eval(), Decaying().eval()
    reference.load_state_dict(model.state_dict())
    fast = compiled(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 16)
            assert relative_error(fast(x), reference(x)) < 1e-5
    assert torch.equal(model.scale, reference.scale) and float(model.scale) == 0.125
    # `w * scale` reads the buffer the graph halves: hoisted, it would keep the first scale.
    # `u * 2` reads a parameter nothing writes, but Inductor gives it the buffer `w * scale`
    # wrote, and a buffer some kernel in the program writes is never kept.
    assert last_report()["hoisted_kernels"] == 0, last_report()


def test_a_buffer_reused_for_another_shape_is_whole_when_its_layout_covers_it_densely():
    # Inductor reuses a weight's buffer for the next of another shape with the same elements
    # (`reinterpret_tensor(buf, size, stride, 0)`): still a whole buffer, kept apart.
    import ast

    def extent(size, stride):
        return hoist._dense_extent([ast.parse(size).body[0].value, ast.parse(stride).body[0].value])

    assert extent("(32, 3, 3, 3)", "(27, 1, 9, 3)") == 864  # channels-last
    assert extent("(192, 160, 7, 1)", "(1120, 1, 160, 160)") == 215040
    assert extent("(2, 2)", "(1, 1)") is None  # overlapping
    assert extent("(4, 4)", "(8, 1)") is None  # a gap: a slice of a larger buffer
    assert extent("(s0, 4)", "(4, 1)") is None  # not literal
