"""The fused-kernel task graph read from Inductor's scheduler (``scheduler_graph``, through its
post-fusion hook) against the text reader's (``wrapper``), on every CPU model of the suite, on
whichever torch runs the suite (CI runs it on 2.11.0 and on the newest tested release).

The two must launch the same kernels, paired by the buffers they name; the text reader must
order every pair of kernels the scheduler orders (else the backend would plan a missing
dependency); an order only the text has must have a reason (``readings.compare``)."""

import pytest
import torch

from nimble_rs.dynamo.program import kernels_plan, readings, scheduler_graph
from nimble_rs.dynamo.program.wrapper import WrapperProgram
import models
from models import inductor_programs

# Every model of models.py, with an input (Repeats twice: its count from a shape and from data).
CASES = {
    "branches": (models.Branches, lambda: (torch.randn(2, 3, 8, 8),)),
    "structured": (models.Structured, lambda: (torch.randn(3, 6),)),
    "two-inputs": (models.TwoInputs, lambda: (torch.randint(0, 50, (2, 5)), torch.randn(2, 5, 8))),
    "tied": (models.Tied, lambda: (torch.randn(3, 6),)),
    "host-read": (models.HostRead, lambda: (torch.randn(4, 4),)),
    "repeats": (models.Repeats, lambda: (torch.randn(6, 8),)),
    "repeats-from-data": (lambda: models.Repeats(from_data=True), lambda: (torch.randn(6, 8),)),
    "inception": (lambda: models.Inception(channels=4), lambda: (torch.randn(2, 4, 8, 8),)),
    "attention": (lambda: models.Attention(d=16), lambda: (torch.randn(2, 5, 16),)),
    "branchy": (models.Branchy, lambda: (torch.randn(3, 8),)),
    "weight-normed": (models.WeightNormed, lambda: (torch.randn(3, 16),)),
    "decaying": (models.Decaying, lambda: (torch.randn(3, 16),)),
    "counter": (models.Counter, lambda: (torch.randn(3, 4),)),
    "scales-its-input": (models.ScalesItsInput, lambda: (torch.randn(3, 4),)),
    "two-branches": (models.TwoBranches, lambda: (torch.randn(1, 8, 10, 10),)),
    "ghost": (models.Ghost, lambda: (torch.randn(1, 8, 10, 10),)),
}


def both_readings(model, inputs):
    """(WrapperProgram, SchedulerReading) of every graph Inductor compiles for ``model``."""
    found = []
    compiled = inductor_programs(model, *inputs, within=scheduler_graph.reading(found))
    torch._dynamo.reset()
    return [WrapperProgram(kernels_plan.inductor_module(c), static) for c, static in compiled], found


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_scheduler_and_the_text_read_the_same_kernels_and_orders(case):
    make, inputs = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    programs, found = both_readings(model, inputs())
    assert len(programs) == len(found) >= 1, (len(programs), len(found))
    for program, reading in zip(programs, found):
        comparison = readings.compare(program, reading)
        assert comparison.unpaired is None, comparison.unpaired
        # The scheduler's task graph: one task per node that launches a kernel, each paired above.
        graph = scheduler_graph.task_graph(reading)
        assert len(graph["nodes"]) == len(comparison.pairs), (len(graph["nodes"]), len(comparison.pairs))
        assert all(u < v for u, v in graph["edges"])
        assert not comparison.missing, comparison.differences()
        assert not comparison.unexplained, comparison.differences()
        for line in comparison.differences():
            print(f"{case}: {line}")


def test_a_missed_order_and_an_unexplained_one_are_caught(monkeypatch):
    # The comparison can fail: a text reader that dropped every order, or one that made up an
    # order between two kernels of independent branches of an Inception block.
    torch.manual_seed(0)
    (program,), (reading,) = both_readings(models.Inception(channels=4).eval(), (torch.randn(2, 4, 8, 8),))
    honest = readings.compare(program, reading)
    assert honest.unpaired is None and not honest.missing and not honest.unexplained
    needs = program.kernel_needs()
    reach = {}
    for k in sorted(needs):
        reach[k] = set(needs[k]).union(*(reach[n] for n in needs[k]))
    u, v = next((u, v) for v in sorted(needs) for u in sorted(needs) if u < v and u not in reach[v])
    monkeypatch.setattr(program, "kernel_needs", lambda: {**needs, v: needs[v] | {u}})
    assert (u, v) in readings.compare(program, reading).unexplained
    monkeypatch.setattr(program, "kernel_needs", lambda: {k: set() for k in needs})
    assert readings.compare(program, reading).missing
