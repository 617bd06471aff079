"""Writes of disjoint parts of one buffer (the slices of a join that option ``concat_in_place``
writes one kernel each): the parts a view covers (``slices``), the order ``WrapperProgram``
keeps between accesses of parts, and a schedule that runs the parts' writers on two streams
with the buffer allocated ahead of them (``emit``: after the latest kernel they all follow, or
before the fork), proved by its check and run on the CPU."""

import copy
import importlib.util

import pytest
import torch

from nimble_rs.dynamo.program import slices
from nimble_rs.dynamo.program.emit import Schedule
from nimble_rs.dynamo.program.wrapper import WrapperError, WrapperProgram

CHANNELS_LAST = ((2, 5, 4, 4), (80, 1, 20, 5))


@pytest.mark.parametrize("view, box", [
    # Channel slices of a channels-last buffer: interleaved in memory, disjoint as indices.
    (((2, 2, 4, 4), (80, 1, 20, 5), 0), ((0, 2), (0, 2), (0, 4), (0, 4))),
    (((2, 3, 4, 4), (80, 1, 20, 5), 2), ((0, 2), (2, 5), (0, 4), (0, 4))),
    # A batch row: offset 80 is index (1, 0, 0, 0).
    (((1, 5, 4, 4), (80, 1, 20, 5), 80), ((1, 2), (0, 5), (0, 4), (0, 4))),
    # The whole buffer, other strides, past the last channel, an offset past the end: no part.
    (((2, 5, 4, 4), (80, 1, 20, 5), 0), None),
    (((2, 2, 4, 4), (32, 16, 4, 1), 0), None),
    (((2, 2, 4, 4), (80, 1, 20, 5), 4), None),  # channels 4-5 of 5
    (((2, 2, 4, 4), (80, 1, 20, 5), 81), None),
])
def test_the_part_a_view_covers(view, box):
    assert slices.sub_box(*CHANNELS_LAST, *view) == box


def test_a_layout_whose_indices_share_memory_has_no_parts():
    # An expanded dimension (stride 0) and overlapping strides.
    assert not slices.one_to_one((2, 3), (0, 1)) and not slices.one_to_one((4, 4), (2, 1))
    assert slices.one_to_one((2, 5, 4, 4), (80, 1, 20, 5)) and slices.one_to_one((2, 3), (4, 1))  # padded rows
    assert slices.sub_box((4, 4), (2, 1), (2, 4), (2, 1), 0) is None


def test_parts_overlap_only_where_their_boxes_do_and_only_in_one_layout():
    a = slices.part(*CHANNELS_LAST, (2, 2, 4, 4), (80, 1, 20, 5), 0)
    b = slices.part(*CHANNELS_LAST, (2, 3, 4, 4), (80, 1, 20, 5), 2)
    c = slices.part(*CHANNELS_LAST, (2, 3, 4, 4), (80, 1, 20, 5), 1)
    assert not slices.overlap(a, b) and slices.overlap(a, c) and slices.overlap(b, c)
    assert slices.overlap(a, None) and slices.within(a, None) and not slices.within(None, a)
    # The same box in another layout of the same memory: not comparable, so overlapping.
    other = ((((2, 5, 4, 4), (80, 16, 4, 1))), a[1])
    assert slices.overlap(a, other) and not slices.within(a, other)


PROGRAM = '''
import torch
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
aten = torch.ops.aten


def call(args):
    arg0_1, arg1_1, arg2_1 = args
    args.clear()
    buf0 = empty_strided_cpu((2, 5, 4, 4), (80, 1, 20, 5), torch.float32)
    buf1 = reinterpret_tensor(buf0, (2, 2, 4, 4), (80, 1, 20, 5), 0)  # alias
    torch.add(arg0_1, 1, out=buf1)
    buf2 = reinterpret_tensor(buf0, (2, 3, 4, 4), (80, 1, 20, OTHER), SECOND)  # alias
    torch.mul(arg1_1, 2, out=buf2)
    del buf1
    del buf2
    buf3 = aten.mul.Tensor(buf0, arg2_1)
    del buf0
    return (buf3, )
'''


def program(tmp_path, second=2, other=5, disjoint_slices=True):
    """A program in the form of Inductor's: a join of two parts, each written by its own
    kernel through a view of its slice (the second at offset ``second``), then read whole."""
    path = tmp_path / f"join_{second}_{other}.py"
    path.write_text(PROGRAM.replace("SECOND", str(second)).replace("OTHER", str(other)))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return WrapperProgram(module, disjoint_slices=disjoint_slices)


def kernels(wrapper):
    return [s.index for s in wrapper.statements if s.kind == "kernel"]


def test_writes_of_disjoint_parts_follow_none_of_each_other_and_the_whole_read_follows_both(tmp_path):
    wrapper = program(tmp_path)
    first, second, reader = kernels(wrapper)
    needs = wrapper.kernel_needs()
    assert needs[second] == set() and needs[reader] == {first, second}
    assert wrapper.task_graph()["edges"] == [[0, 2], [1, 2]]


def test_without_disjoint_slices_the_parts_are_written_in_program_order(tmp_path):
    # Option disjoint_slices=False: the second part's writer follows the first, as before.
    wrapper = program(tmp_path, disjoint_slices=False)
    first, second, reader = kernels(wrapper)
    assert wrapper.kernel_needs()[second] == {first}
    assert all(not s.parts for s in wrapper.statements)


@pytest.mark.parametrize("second, other", [(1, 5), (2, 4)])
def test_parts_that_may_overlap_stay_in_order(tmp_path, second, other):
    # Channels 1-3 overlap channels 0-1; other strides are no part of the same layout.
    wrapper = program(tmp_path, second, other)
    first, second_writer, reader = kernels(wrapper)
    assert wrapper.kernel_needs()[second_writer] == {first}


def two_streams(wrapper):
    """The parts' writers on streams 0 and 1, the reader on stream 0 after stream 1's event."""
    regions = [{"stream": 0, "nodes": [0]}, {"stream": 1, "nodes": [1]}, {"stream": 0, "nodes": [2]}]
    return Schedule(wrapper, regions, [[1, 2]])


def test_parts_written_on_two_streams_are_allocated_before_the_fork_and_the_check_proves_it(tmp_path):
    wrapper = program(tmp_path)
    schedule = two_streams(wrapper)
    allocation = next(s.index for s in wrapper.statements if s.kind == "alloc")
    # The two parts' writers follow no kernel in common: before the fork.
    assert schedule.steps[:2] == [("stmt", allocation, 0), ("fork",)] and (schedule.allocated_ahead, schedule.allocated_first) == (1, 1)
    schedule.check()
    # Allocated after the fork instead, the second stream's writer may touch memory that stream
    # 0's earlier users still hold.
    broken = copy.copy(schedule)
    broken.steps = [("fork",), ("stmt", allocation, 0)] + schedule.steps[2:]
    with pytest.raises(WrapperError, match="may touch memory stream 0 allocated"):
        broken.check()
    # The program in the plan's order computes what the parts and the reader do.
    a, b, w = torch.randn(2, 2, 4, 4), torch.randn(2, 3, 4, 4), torch.randn(2, 5, 4, 4)
    (got,) = schedule.function(streams=False)([a, b, w])
    assert torch.equal(got, torch.cat([a + 1, b * 2], 1) * w)


ANCHORED = PROGRAM.replace("""    args.clear()
    buf0""", """    args.clear()
    buf9 = aten.mean.default(arg2_1)
    buf0""").replace("torch.add(arg0_1, 1, out=buf1)", "torch.add(arg0_1, buf9, out=buf1)").replace("torch.mul(arg1_1, 2, out=buf2)", "torch.mul(arg1_1, buf9, out=buf2)")


def anchored(tmp_path):
    path = tmp_path / "anchored.py"
    path.write_text(ANCHORED.replace("SECOND", "2").replace("OTHER", "5"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return WrapperProgram(module)


def test_parts_that_follow_a_common_kernel_are_allocated_just_after_it(tmp_path):
    # Both parts read what one kernel computed (as an Inception block's branches read its
    # input): the join is allocated right after that kernel, on its stream, not at the start.
    wrapper = anchored(tmp_path)
    mean, first, second, reader = kernels(wrapper)
    assert wrapper.kernel_needs()[second] == {mean}
    # The mean and the first part on stream 0, the second part on stream 1 after the mean's
    # region, the reader on stream 0 after both.
    regions = [{"stream": 0, "nodes": [0]}, {"stream": 0, "nodes": [1]}, {"stream": 1, "nodes": [2]}, {"stream": 0, "nodes": [3]}]
    schedule = Schedule(wrapper, regions, [[0, 2], [2, 3]])
    allocation = next(s.index for s in wrapper.statements if s.kind == "alloc")
    assert schedule.steps[0] == ("fork",)
    at = schedule.steps.index(("stmt", mean, 0))
    assert schedule.steps[at + 1] == ("stmt", allocation, 0)
    assert (schedule.allocated_ahead, schedule.allocated_first) == (1, 0)
    schedule.check()
    a, b, w = torch.randn(2, 2, 4, 4), torch.randn(2, 3, 4, 4), torch.randn(2, 5, 4, 4)
    (got,) = schedule.function(streams=False)([a, b, w])
    m = w.mean()
    assert torch.allclose(got, torch.cat([a + m, b * m], 1) * w)
    # Made after the mean's region's event instead, the second stream's part would not follow it.
    broken = copy.copy(schedule)
    steps = [step for step in schedule.steps if step != ("stmt", allocation, 0)]
    record = steps.index(("record", 0, 0))
    broken.steps = steps[: record + 1] + [("stmt", allocation, 0)] + steps[record + 1:]
    with pytest.raises(WrapperError, match="may touch memory stream 0 allocated"):
        broken.check()


@pytest.mark.parametrize("streams, syncs", [
    # The tasks' streams (the mean, the two parts, the reader), one region each; the syncs
    # between regions the plan would make.
    ((1, 0, 1, 0), [[0, 1], [2, 3]]),
    ((0, 1, 2, 0), [[0, 1], [0, 2], [1, 3], [2, 3]]),
    ((2, 1, 0, 1), [[0, 1], [0, 2], [2, 3]]),
])
def test_the_allocation_goes_on_the_stream_of_the_kernel_both_parts_follow(tmp_path, streams, syncs):
    wrapper = anchored(tmp_path)
    mean = kernels(wrapper)[0]
    regions = [{"stream": k, "nodes": [task]} for task, k in enumerate(streams)]
    schedule = Schedule(wrapper, regions, syncs)
    allocation = next(s.index for s in wrapper.statements if s.kind == "alloc")
    at = schedule.steps.index(("stmt", mean, streams[0]))
    assert schedule.steps[at + 1] == ("stmt", allocation, streams[0])
    assert (schedule.allocated_ahead, schedule.allocated_first) == (1, 0)
    schedule.check()
    a, b, w = torch.randn(2, 2, 4, 4), torch.randn(2, 3, 4, 4), torch.randn(2, 5, 4, 4)
    (got,) = schedule.function(streams=False)([a, b, w])
    assert torch.allclose(got, torch.cat([a + w.mean(), b * w.mean()], 1) * w)


def test_on_one_stream_the_allocation_stays_where_inductor_put_it(tmp_path):
    wrapper = program(tmp_path)
    schedule = Schedule(wrapper, [{"stream": 0, "nodes": [0, 1, 2]}], [])
    assert schedule.steps[0] == ("fork",) and (schedule.allocated_ahead, schedule.allocated_first) == (0, 0)
    schedule.check()
