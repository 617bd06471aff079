"""Granularity "kernels" on the CPU: Inductor's own program for a whole graph read back
(``wrapper``), its kernels planned by every registered algorithm, the statements emitted again in
the plan's order (``emit``), the schedule's proof that every kernel follows what it depends on,
and outputs against eager when the plan's order is not Inductor's."""

import ast
import copy
import json
from pathlib import Path

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.program import kernels_plan
from nimble_rs.dynamo.program.emit import Schedule
from nimble_rs.dynamo.program.wrapper import WrapperError, WrapperProgram
from models import Attention, Counter, Inception, inductor_programs, relative_error

torch.manual_seed(0)


def every_algorithm():
    return [usage.replace(":K", ":3") for _, usage, _ in nimble_rs.algorithms()]


@pytest.fixture(scope="module")
def inception():
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    (compiled, static), = inductor_programs(model, x)
    return model, x, compiled, static


def reissued(cut):
    """The plan's regions issued in another order the plan allows (each stream's regions in
    order, every sync's region before its waiter): the latest region ready first, so that the
    program's kernels leave Inductor's order wherever two regions are independent."""
    regions = cut["regions"]
    before = {r: set() for r in range(len(regions))}
    last = {}
    for r, region in enumerate(regions):
        if region["stream"] in last:
            before[r].add(last[region["stream"]])
        last[region["stream"]] = r
    for a, b in cut["syncs"]:
        before[b].add(a)
    order = []
    while len(order) < len(regions):
        order.append(max(r for r in range(len(regions)) if r not in order and before[r] <= set(order)))
    position = {r: i for i, r in enumerate(order)}
    return dict(cut, regions=[regions[r] for r in order], syncs=[[position[a], position[b]] for a, b in cut["syncs"]])


@pytest.mark.parametrize("algorithm", every_algorithm())
def test_every_algorithm_plans_inductors_kernels_and_the_plan_order_matches_eager(algorithm, inception, monkeypatch):
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    assert len(wrapper.tasks) >= 10
    plan, cut = kernels_plan.plan(wrapper, algorithm)
    for regions in (cut, reissued(cut)):
        schedule = Schedule(wrapper, regions["regions"], regions["syncs"])
        schedule.check()
        kernels = [i for i in schedule.order if wrapper.statements[i].kind == "kernel"]
        assert sorted(kernels) == [s.index for s in wrapper.statements if s.kind == "kernel"]
    if plan["streams"] > 1:
        # Issued latest-ready-first, the program is not in Inductor's order: what makes this
        # test able to fail when a dependency (a reused buffer, a view) was missed.
        assert kernels != sorted(kernels), algorithm
        # The capture's program is made too (it runs on a GPU only).
        schedule.function(streams=True)
        assert "wait_event" in schedule.source and "torch.cuda.stream(_nimble_streams[1])" in schedule.source
    # On the CPU the backend runs the planned program in its order: here, the reissued one.
    planned = kernels_plan.plan
    monkeypatch.setattr(kernels_plan, "plan", lambda w, a: (lambda p, c: (p, reissued(c)))(*planned(w, a)))
    with torch.no_grad():
        expected = model(x)
        torch._dynamo.reset()
        got = torch.compile(model, backend="nimble", options={"algorithm": algorithm})(x)
    assert relative_error(got, expected) < 1e-5


def test_the_programs_on_streams_leave_inductors_statements_as_they_are(inception):
    # Both programs of a plan are compiled from Inductor's statements without copying them: the
    # one on streams reads each launch's raw stream as its plan stream's handle in new nodes.
    from nimble_rs.dynamo.program.emit import _on_raw_stream

    launch = ast.parse("triton_poi_0.run(buf0, arg1_1, 16, stream=stream0)\nbuf1 = empty((4,), stream0)").body
    before = [ast.dump(n) for n in launch]
    moved = [_on_raw_stream(n, {"stream0"}, 2) for n in launch]
    assert [ast.dump(n) for n in launch] == before
    assert [ast.unparse(n) for n in moved] == ["triton_poi_0.run(buf0, arg1_1, 16, stream=_nimble_raw[2])", "buf1 = empty((4,), _nimble_raw[2])"]
    # What does not name the stream is shared, not copied.
    assert moved[0].value.args is launch[0].value.args and moved[1].targets is launch[1].targets
    assert _on_raw_stream(launch[0].value.args[0], {"stream0"}, 2) is launch[0].value.args[0]
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    dumped = [ast.dump(s.node) for s in wrapper.statements]
    plan, cut = kernels_plan.plan(wrapper, "nimble")
    schedule = Schedule(wrapper, cut["regions"], cut["syncs"])
    schedule.function(streams=False)
    schedule.function(streams=True)
    assert plan["streams"] > 1 and "_nimble_streams[1]" in schedule.source
    assert [ast.dump(s.node) for s in wrapper.statements] == dumped


# A module as Inductor writes it for a GPU: each Triton kernel's source is a string argument.
TRITON_MODULE = '''
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()

triton_poi_fused_add_relu_0 = async_compile.triton('triton_poi_fused_add_relu_0', """
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers

@triton_heuristics.pointwise(size_hints={'x': 1024}, filename=__file__)
@triton.jit
def triton_poi_fused_add_relu_0(in_out_ptr0, in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    def unused(x):
        return x
    tl.store(out_ptr0 + xoffset, tl.load(in_ptr0 + xoffset))
""", device_str='cuda')
not_a_kernel = 3
'''


def test_triton_kernels_write_what_their_parameters_do_not_name_as_inputs():
    # On a GPU Inductor's kernels are Triton's: read from each kernel's own source, its pointers
    # named in_ptr* are only read, out_ptr* only written, in_out_ptr* both; constexpr parameters
    # are not arguments of the launch.
    from nimble_rs.dynamo.program.signatures import KernelSignatures

    signatures = KernelSignatures(ast.parse(TRITON_MODULE))
    kernel = "triton_poi_fused_add_relu_0"
    assert signatures.names[kernel] == ["in_out_ptr0", "in_ptr0", "out_ptr0", "xnumel"]
    assert signatures.writes(kernel) == [True, False, True, True]
    assert signatures.pure_writes(kernel) == [False, False, True, False]
    assert signatures.writes("not_a_kernel") is None and signatures.pure_writes("not_a_kernel") is None


# A scan (a cumulative sum, as Llama's position ids take) as Inductor writes it: the combine
# function, itself @triton.jit, defined before the kernel.
SCAN_MODULE = '''
triton_per_fused_add_arange_cat_cumsum_0 = async_compile.triton('triton_per_fused_add_arange_cat_cumsum_0', """
import triton
import triton.language as tl

@triton.jit
def _triton_helper_fn_add0(arg0_0, arg1_0):
    tmp0 = arg0_0 + arg1_0
    return tmp0

@triton_heuristics.persistent_reduction(size_hints={'x': 1, 'r0_': 128}, filename=__file__)
@triton.jit
def triton_per_fused_add_arange_cat_cumsum_0(in_out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    tmp = tl.associative_scan(tl.load(in_out_ptr0), 1, _triton_helper_fn_add0)
""", device_str='cuda')
'''


def test_a_scans_combine_function_is_not_taken_for_its_kernel():
    # On an H200 the backend read Llama's cumulative-sum launch `...cumsum_0.run(buf8, 1, 128,
    # stream=stream0)` as drift: the reader took the helper defined first (two parameters) for
    # the kernel (three), and the launch matched neither a kernel nor any known call.
    from nimble_rs.dynamo.program.signatures import KernelSignatures

    signatures = KernelSignatures(ast.parse(SCAN_MODULE))
    kernel = "triton_per_fused_add_arange_cat_cumsum_0"
    assert signatures.names[kernel] == ["in_out_ptr0", "xnumel", "r0_numel"]
    assert signatures.writes(kernel) == [True, True, True]
    # Named otherwise than its variable, the kernel is the one the launch heuristics decorate.
    renamed = KernelSignatures(ast.parse(SCAN_MODULE.replace("def triton_per_fused_add_arange_cat_cumsum_0(", "def kernel(")))
    assert renamed.names[kernel] == ["in_out_ptr0", "xnumel", "r0_numel"]
    # Two undecorated functions and none of the name: which is launched is not known, not guessed.
    ambiguous = KernelSignatures(ast.parse(SCAN_MODULE.replace("def triton_per_fused_add_arange_cat_cumsum_0(", "def kernel(").replace("@triton_heuristics.persistent_reduction(size_hints={'x': 1, 'r0_': 128}, filename=__file__)\n", "")))
    assert ambiguous.writes(kernel) is None


def test_nimble_critical_puts_the_longest_chain_of_kernels_on_stream_zero(inception):
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    graph = wrapper.task_graph()
    # The longest chain of dependent kernels, counted in kernels (no durations on the CPU).
    longest = {}
    for u, v in sorted(graph["edges"], key=lambda e: e[1]):
        longest[v] = max(longest.get(v, 1), longest.get(u, 1) + 1)
    depth = max(longest.values())
    on_zero = {}
    for algorithm in ("nimble", "nimble-critical"):
        plan, cut = kernels_plan.plan(wrapper, algorithm)
        on_zero[algorithm] = [t for region in cut["regions"] if region["stream"] == 0 for t in region["nodes"]]
        assert plan["streams"] > 1
    # Stream 0's kernels are one chain (each reaches the next: no two independent tasks share a
    # stream), so holding as many as the longest chain has is holding a longest chain.
    reaches = {t: set() for t in range(len(graph["nodes"]))}
    for u, v in sorted(graph["edges"], key=lambda e: -e[0]):
        reaches[u] |= {v} | reaches[v]
    zero = sorted(on_zero["nimble-critical"])
    assert all(b in reaches[a] for a, b in zip(zero, zero[1:])), zero
    assert len(zero) >= depth > 2


def test_the_critical_path_plan_is_made_to_be_timed_beside_the_primary_one(inception):
    # Option time_critical_path: at the choice (a GPU) the plan with the heaviest path first is
    # timed too, at high priority; none is made where it is the primary plan already.
    from nimble_rs.dynamo import kernels as granularity

    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    primary, _ = kernels_plan.plan(wrapper, "nimble")
    critical, _ = kernels_plan.plan(wrapper, "nimble-critical")
    assert kernels_plan.same_plan(primary, primary) and kernels_plan.same_plan(critical, critical)
    report = {}
    program = granularity._critical_path_program(compiled, wrapper, primary, report)
    if kernels_plan.same_plan(primary, critical):
        assert program is None and report["critical_path"] == "the same plan as the primary", report
    else:
        assert program.priority and program.partition.algorithm == "nimble-critical", report
        assert report["critical_path"]["streams"] == critical["streams"] > 1, report
    assert granularity._critical_path_program(compiled, wrapper, critical, {}) is None
    # Stream numbers aside: the same plan with its streams renumbered is the same plan.
    renumbered = dict(critical, stream_of={t: (s + 1) % critical["streams"] for t, s in critical["stream_of"].items()})
    assert kernels_plan.same_plan(renumbered, critical)
    one_stream = dict(critical, stream_of={t: 0 for t in critical["stream_of"]})
    assert not kernels_plan.same_plan(one_stream, critical)


def test_a_critical_path_plan_that_cannot_be_made_is_announced(inception, monkeypatch):
    from nimble_rs.dynamo import kernels as granularity

    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    primary, _ = kernels_plan.plan(wrapper, "nimble")

    def refused(wrapper, algorithm):
        raise RuntimeError("the checker refused it")

    monkeypatch.setattr(kernels_plan, "plan", refused)
    report = {}
    with pytest.warns(RuntimeWarning, match="critical-path plan could not be made .the checker refused it.; the choice times the primary plan"):
        assert granularity._critical_path_program(compiled, wrapper, primary, report) is None
    assert report["critical_path"] == "not planned: the checker refused it"


def test_the_schedule_check_finds_a_missing_wait(inception):
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    plan, cut = kernels_plan.plan(wrapper, "nimble")
    assert plan["streams"] > 1 and cut["syncs"]
    schedule = Schedule(wrapper, cut["regions"], cut["syncs"])
    schedule.check()
    broken = copy.copy(schedule)
    first_wait = next(i for i, step in enumerate(schedule.steps) if step[0] == "wait")
    broken.steps = schedule.steps[:first_wait] + schedule.steps[first_wait + 1 :]
    with pytest.raises(WrapperError, match="may run before"):
        broken.check()


def test_buffers_inductor_reuses_become_dependencies(inception):
    # Inductor gives a dead buffer's memory to a later one (`buf7 = buf6; del buf6  # reuse`,
    # or a reinterpret_tensor of it): the later writer must follow the earlier readers.
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    needs = wrapper.kernel_needs()
    checked = 0
    for s in wrapper.statements:
        if s.kind != "kernel":
            continue
        for t in wrapper.statements[: s.index]:
            if t.kind == "kernel" and (t.reads & s.writes or t.writes & (s.reads | s.writes)):
                assert t.index in needs[s.index] or any(t.index in needs[m] for m in needs[s.index]) or _reaches(needs, t.index, s.index)
                checked += 1
    assert checked > 0
    reused = [s for s in wrapper.statements if s.kind == "alias"]
    assert reused, "Inductor reused no buffer in this model: the test no longer covers reuse"


def test_buffers_shared_by_streams_are_freed_once_safe_and_the_check_finds_an_early_free(inception):
    # A storage touched on several streams is freed once every kernel touching it is known
    # complete on the stream that allocated it (not kept to the graph's end); a free moved
    # before that is caught by the schedule check.
    model, x, compiled, static = inception
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    plan, cut = kernels_plan.plan(wrapper, "nimble")
    schedule = Schedule(wrapper, cut["regions"], cut["syncs"])
    schedule.check()
    assert schedule.shared > 0 and schedule.kept_to_end < schedule.shared, (schedule.shared, schedule.kept_to_end)
    touched = {}
    for i, s in enumerate(wrapper.statements):
        if s.kind == "kernel":
            for st in s.reads | s.writes:
                touched.setdefault(st, set()).add(schedule.region_of[i])
    streams = {i: r["stream"] for i, r in enumerate(schedule.regions)}
    crossing = {st for st, regions in touched.items() if len({streams[r] for r in regions}) > 1}
    frees = [k for k, step in enumerate(schedule.steps) if step[0] == "del" and any(wrapper.storage[n] & crossing for n in step[2])]
    assert frees, "no storage shared by streams is freed before the join"
    # The same free issued right after the fork, before any kernel ran: unsafe.
    broken = copy.copy(schedule)
    early = schedule.steps[frees[0]]
    broken.steps = [schedule.steps[0], early] + [step for k, step in enumerate(schedule.steps[1:], 1) if k != frees[0]]
    with pytest.raises(WrapperError, match="frees memory stream"):
        broken.check()
    # On the CPU the program with its frees still gives eager's outputs.
    with torch.no_grad():
        torch._dynamo.reset()
        assert relative_error(torch.compile(model, backend="nimble")(x), model(x)) < 1e-5


def _reaches(needs, a, b):
    stack, seen = [b], set()
    while stack:
        n = stack.pop()
        if n == a:
            return True
        for m in needs.get(n, ()):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return False


def test_the_backend_plans_kernels_by_default_and_reports_them():
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    before = len(nimble_rs.dynamo.reports())
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="nimble")(x)
    assert relative_error(got, model(x)) < 1e-5
    report = nimble_rs.dynamo.reports()[before]
    assert report["granularity"] == "kernels" and report["kernels"] >= 10 and report["streams"] > 1, report
    assert report["choice"] == "streams" and "shared_buffers" in report, report
    # (Inductor's compile, timed within the backend's)
    assert 0 < report["inductor_seconds"] < report["compile_seconds"], report


@pytest.mark.parametrize("granularity", ["kernels", "regions"])
def test_both_granularities_train_and_mutate_like_eager(granularity):
    from models import train_beside_eager

    eager = Attention(d=16).train()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="nimble", options={"granularity": granularity})
    train_beside_eager(eager, fast, model, lambda: torch.randn(2, 5, 16), steps=2)
    counter = Counter()
    twin = copy.deepcopy(counter)
    torch._dynamo.reset()
    counted = torch.compile(twin, backend="nimble", options={"granularity": granularity})
    for _ in range(3):
        x = torch.randn(3, 4)
        with torch.no_grad():
            assert relative_error(counted(x), counter(x)) < 1e-5
    assert torch.allclose(twin.seen, counter.seen)


def test_a_backward_that_reuses_its_saved_values_is_found():
    # AOTAutograd donates the forward's saved values to the backward and Inductor reuses their
    # memory as scratch: replaying such a backward (warm-ups, the choice's timings) over the
    # same saved values would read what it wrote. Those inputs are found, to be put back.
    model = Inception(channels=8).train()
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    torch.compile(model, backend="nimble")(torch.randn(4, 8, 16, 16)).square().mean().backward()
    backward = [r for r in nimble_rs.dynamo.reports()[before:] if r["graph"] == "backward"]
    assert backward and backward[0].get("clobbered_inputs", 0) > 0, backward


def test_an_aten_fallback_writes_only_what_its_schema_says():
    # A backward's ATen fallbacks (convolution_backward) read the weights they are given: the
    # parameters are never taken as written (putting them back would bump their version under
    # autograd), only the saved values Inductor reuses.
    model = Inception(channels=8).train()
    (_, _), (backward, _) = inductor_programs(model, torch.randn(4, 8, 16, 16), train=True)
    wrapper = WrapperProgram(kernels_plan.inductor_module(backward), [])
    assert any(s.kind == "kernel" and "convolution_backward" in s.name for s in wrapper.statements)
    weights = {name for name in wrapper.inputs if name.startswith("primals_")}
    written = {wrapper.inputs[i] for i in wrapper.written_inputs()}
    assert weights and written and not (written & weights), (written, weights)


def test_the_planned_kernel_graphs_are_written_for_the_research_loop(tmp_path):
    # What the backend planned, kernel by kernel, in the project's schema: every registered
    # algorithm plans and simulates it without a GPU, as `schedulers --simulate --graphs` does.
    model = Inception(channels=8).train()
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble", options={"graphs": str(tmp_path)})
    fast(torch.randn(4, 8, 16, 16)).square().mean().backward()
    reports = nimble_rs.dynamo.reports()[before:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["backward-1.graph.json", "forward-1.graph.json"], files
    assert sorted(Path(r["graph_file"]).name for r in reports) == files
    for path in tmp_path.iterdir():
        graph = json.loads(path.read_text())
        assert len(graph["nodes"]) >= 10 and graph["edges"]
        for algorithm in every_algorithm():
            assert nimble_rs.scheduling.simulate(graph, algorithm)["makespan_us"] > 0
    with pytest.raises(Exception, match="graphs="):
        torch._dynamo.reset()
        torch.compile(model, backend="nimble", options={"graphs": str(path)})(torch.randn(4, 8, 16, 16))
