"""Which kernels compute from weights alone (``WrapperProgram.weight_only``, the one rule the task
graph, the weight stream and hoisting share): not a kernel that updates an activation in place
with only parameters among its other inputs, as Inductor's BatchNorm and ReLU after a convolution
do. Read as one, it and every kernel after it joined their readers' tasks, and independent
branches were planned on one stream."""

import pytest
import torch

from nimble_rs.dynamo.program import hoist, kernels_plan
from nimble_rs.dynamo.program.wrapper import WrapperProgram
from models import Ghost, TwoBranches, inductor_programs


def planned(model, x):
    (compiled, static), = inductor_programs(model.eval(), x)
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    plan, _ = kernels_plan.plan(wrapper, "nimble")
    return wrapper, plan


def in_place_on_weights(wrapper):
    """Kernels that write a storage an earlier kernel wrote and read parameters alone besides:
    the pattern the rule must keep out."""
    static = wrapper.static_storages
    found, written = [], set()
    for s in wrapper.statements:
        if s.kind == "kernel":
            if s.reads and s.reads <= static and s.writes & written:
                found.append(s.index)
            written |= s.writes
    return found


@pytest.mark.parametrize("make, streams", [(TwoBranches, 2), (Ghost, 2)])
def test_kernels_updating_an_activation_in_place_are_not_on_weights_alone(make, streams):
    torch.manual_seed(0)
    wrapper, plan = planned(make(), torch.randn(1, 8, 10, 10))
    updates = in_place_on_weights(wrapper)
    assert updates, "Inductor wrote no in-place update on weights here: the test would prove nothing"
    weight_only = set(wrapper.weight_only())
    assert not weight_only & set(updates), (sorted(weight_only), updates)
    # Hoisting and the weight stream take the same rule.
    assert set(hoist.on_weights_alone(wrapper)) <= weight_only
    # Every kernel the in-place one feeds stays a task of its own: the branches get streams.
    assert plan["streams"] >= streams, plan["streams"]
    assert len(wrapper.tasks) >= len([s for s in wrapper.statements if s.kind == "kernel"]) - len(weight_only)


def test_the_two_branches_plan_as_many_tasks_as_their_kernels():
    torch.manual_seed(0)
    wrapper, plan = planned(TwoBranches(), torch.randn(1, 8, 10, 10))
    kernels = [s for s in wrapper.statements if s.kind == "kernel"]
    # Only weight-layout copies may join their reader's task; the stem, its in-place BatchNorm
    # and ReLU, both branch convolutions and the sum are tasks each.
    assert len(wrapper.tasks) == len(kernels) - len(wrapper.weight_only()), (len(wrapper.tasks), len(kernels))
    assert len(wrapper.tasks) >= 5 and plan["streams"] == 2, (len(wrapper.tasks), plan["streams"])
