"""Which kernels compute from weights alone (``WrapperProgram.weight_only``, the one rule the task
graph, the weight stream and hoisting share): not a kernel that updates an activation in place
with only parameters among its other inputs, as Inductor's BatchNorm and ReLU after a convolution
do. Read as one, it and every kernel after it joined their readers' tasks, and independent
branches were planned on one stream."""

import pytest
import torch
from torch import nn

from nimble_rs.dynamo import hoist, kernels_plan
from nimble_rs.dynamo.wrapper import WrapperProgram
from models import inductor_programs


class TwoBranches(nn.Module):
    """conv, BatchNorm and ReLU, then two convolutions of it: two independent branches."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.a = nn.Conv2d(c, c, 3, padding=1)
        self.b = nn.Conv2d(c, c, 5, padding=2)

    def forward(self, x):
        y = self.stem(x)
        return self.a(y) + self.b(y)


class Ghost(nn.Module):
    """GhostNet's module, twice: a primary convolution with BatchNorm and ReLU, a cheap depthwise
    one on its output, both concatenated; each block's two convolutions can overlap the next."""

    def __init__(self, c=8):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(2):
            primary = nn.Sequential(nn.Conv2d(c, c // 2, 1), nn.BatchNorm2d(c // 2), nn.ReLU())
            cheap = nn.Sequential(nn.Conv2d(c // 2, c // 2, 3, padding=1, groups=c // 2), nn.BatchNorm2d(c // 2), nn.ReLU())
            self.blocks.append(nn.ModuleList([primary, cheap]))
        self.side = nn.Conv2d(c, c, 1)

    def forward(self, x):
        side = self.side(x)
        for primary, cheap in self.blocks:
            p = primary(x)
            x = torch.cat([p, cheap(p)], 1)
        return x + side


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
