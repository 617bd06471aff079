"""Option weight_stream on the CPU: the kernels that read parameters and buffers alone run on
every call, first, one after another on a stream of their own, each writing a buffer of its own;
each region of the plan that reads one waits for it. Exact (a write through ``p.data`` is seen);
every kernel is in one region, and the schedule is proven, for every registered algorithm."""

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.program import hoist, kernels_plan
from nimble_rs.dynamo.program.emit import Schedule
from nimble_rs.dynamo.program.wrapper import WrapperProgram
from models import Inception, WeightNormed, inductor_programs, relative_error


def every_algorithm():
    return [usage.replace(":K", ":3") for _, usage, _ in nimble_rs.algorithms()]


def last_report(graph="inference"):
    return [r for r in nimble_rs.dynamo.reports() if r["graph"] == graph][-1]


def compiled_weight_normed(**options):
    """A WeightNormed model, the backend's compile of it (option weight_stream on, and
    ``options``), an input, and its output checked against eager's."""
    torch.manual_seed(0)
    model = WeightNormed().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="nimble", options={"weight_stream": True, **options})
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < 1e-5
    return model, fast, x


@pytest.fixture(scope="module")
def weight_normed():
    torch.manual_seed(0)
    model, x = WeightNormed().eval(), torch.randn(4, 16)
    (program, static), = inductor_programs(model, x)
    return kernels_plan.inductor_module(program), static


def wrapper_of(module, static, separate):
    wrapper = WrapperProgram(module, static)
    if separate:
        wrapper = WrapperProgram(module, static, hoist.separate(wrapper, hoist.find(wrapper)))
    return wrapper


@pytest.mark.parametrize("algorithm", every_algorithm())
def test_kernels_on_weights_alone_run_first_on_a_stream_of_their_own(weight_normed, algorithm):
    wrapper = wrapper_of(*weight_normed, separate=True)
    weights = hoist.on_weights_alone(wrapper)
    assert wrapper.set_aside(weights) == weights and len(weights) == 3, weights
    graph = wrapper.task_graph()
    # Not planned: the three matrix products, the ReLU over their concatenation.
    assert len(graph["nodes"]) == 4 and not any(n["op"].startswith("cpp_fused_div") for n in graph["nodes"]), graph
    plan, cut = kernels_plan.plan(wrapper, algorithm)
    side = plan["side_stream"]
    assert side == plan["streams"] - 1 == cut["streams"] - 1, plan
    regions = cut["regions"]
    # One region each, first, in Inductor's order, on the last stream; nothing else there.
    assert [r["nodes"] for r in regions[:3]] == [[wrapper.task_of[i]] for i in weights], regions
    assert all(r["stream"] == side for r in regions[:3]) and all(r["stream"] != side for r in regions[3:]), regions
    covered = sorted(i for r in regions for t in r["nodes"] for i in wrapper.tasks[t].statements)
    assert covered == sorted(s.index for s in wrapper.statements if s.kind == "kernel"), covered
    # A region waits for a weight's kernel just before its first reader (the plan's regions are
    # cut there: with one stream, the first product must not wait for the last weight); that
    # every reader follows its kernel, the schedule's check proves.
    needs, side_of = wrapper.kernel_needs(), {i: n for n, i in enumerate(weights)}
    waits = [(a, b) for a, b in cut["syncs"] if a < 3]
    assert sorted(a for a, _ in waits) == [0, 1, 2], cut
    for a, b in waits:
        read = [side_of[j] for i in wrapper.tasks[regions[b]["nodes"][0]].statements for j in needs[i] if j in side_of]
        assert max(read, default=-1) == a, (a, b, cut)
    schedule = Schedule(wrapper, regions, cut["syncs"])
    schedule.check()
    # The weights' buffers are touched on two streams, and freed when the call ends.
    assert schedule.kept_to_end == 3, schedule.kept_to_end


def test_a_reused_buffer_keeps_its_next_kernel_in_the_plan(weight_normed):
    # Inductor gives the second and third weights the first one's buffers: their kernels must
    # follow the first product, a kernel of the plan, so only the first goes aside. (The
    # backend gives each a buffer of its own first, as separate_weight_buffers does.)
    wrapper = wrapper_of(*weight_normed, separate=False)
    weights = hoist.on_weights_alone(wrapper)
    assert wrapper.set_aside(weights) == weights[:1], weights
    plan, cut = kernels_plan.plan(wrapper, "nimble")
    Schedule(wrapper, cut["regions"], cut["syncs"]).check()


@pytest.mark.parametrize("algorithm", every_algorithm())
def test_outputs_stay_eagers_and_a_write_through_data_is_seen(algorithm):
    model, fast, x = compiled_weight_normed(algorithm=algorithm)
    report = last_report()
    assert report["weight_stream_kernels"] == 3 and report["separated_weight_buffers"] == 4, report
    with torch.no_grad():
        # Nothing is kept between calls: what hoisting misses, this sees.
        model.v[1].data.mul_(-1.0)
        assert relative_error(fast(x), model(x)) < 1e-5


def test_with_hoisting_the_hoisted_kernels_are_not_set_aside():
    compiled_weight_normed(hoist_weight_kernels=True)
    report = last_report()
    assert report["hoisted_kernels"] == 3 and report["weight_stream_kernels"] == 0 and report["streams"] == 3, report


def test_kernels_updating_an_activation_in_place_stay_in_the_plan():
    # On the CPU Inductor fuses each weight's layout copy into the ReLU it applies in place to a
    # branch's activation: by its accesses such a kernel reads parameters alone, but it follows
    # the convolution it updates. Nothing is set aside and the plan is the one without the option.
    torch.manual_seed(0)
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    (program, static), = inductor_programs(model, x)
    module = kernels_plan.inductor_module(program)
    plain, aside = WrapperProgram(module, static), WrapperProgram(module, static)
    assert aside.set_aside(hoist.on_weights_alone(aside)) == []
    (before, before_cut), (after, after_cut) = kernels_plan.plan(plain, "nimble"), kernels_plan.plan(aside, "nimble")
    assert kernels_plan.same_plan(before, after) and before_cut == after_cut and "side_stream" not in after, (before, after)


def test_training_forwards_set_their_weight_kernels_aside_and_gradients_stay_eagers():
    torch.manual_seed(0)
    model, reference = WeightNormed(), WeightNormed()
    reference.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    fast = torch.compile(model, backend="nimble", options={"weight_stream": True})
    x = torch.randn(4, 16)
    fast(x).square().mean().backward()
    reference(x).square().mean().backward()
    assert last_report("forward")["weight_stream_kernels"] >= 1, last_report("forward")
    for p, q in zip(model.parameters(), reference.parameters()):
        assert relative_error(p.grad, q.grad) < 1e-5


def test_buffers_that_cannot_be_separated_stay_shared_announced(monkeypatch):
    # Giving each weight's kernel a buffer of its own is a rewrite of Inductor's code: where it
    # fails, the program keeps Inductor's buffers (exact too), says so once, and the kernels
    # that would write into a reused buffer stay in the plan.
    from nimble_rs.dynamo.common import announce

    announce._WARNED.clear()

    def broken(program, hoisting):
        raise KeyError("buf3")

    monkeypatch.setattr(hoist, "separate", broken)
    with pytest.warns(RuntimeWarning, match="keep Inductor's shared buffers"):
        compiled_weight_normed()
    report = last_report()
    assert report["separated_weight_buffers"].startswith("not separated") and report["weight_stream_kernels"] == 1, report


def test_written_graphs_keep_the_weight_kernels_with_their_readers(tmp_path):
    # Option graphs writes the kernels for research as planned without weight_stream: each
    # weight's kernel joined to its reader's task (a task of two kernels), none left out.
    import json

    compiled_weight_normed(graphs=str(tmp_path))
    (path,) = sorted(tmp_path.glob("inference-*.graph.json"))
    graph = json.loads(path.read_text())
    joined = [n for n in graph["nodes"] if n.get("attrs", {}).get("kernels") == 2]
    assert len(graph["nodes"]) == 4 and len(joined) == 3, graph
    assert last_report()["weight_stream_kernels"] == 3

