"""On a GPU, the pattern the weight-only rule keeps out (a BatchNorm/ReLU kernel updating a
convolution's output in place, with only parameters among its other inputs, between branches):
captured with hoisting and the weight stream on, its outputs match eager's over fresh inputs and
its branches run on streams of their own. Read as weights-only, that kernel was hoisted out of the
graph (computed once, from the first input) or moved onto the weight stream."""

import pytest
import torch

from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import Ghost, TwoBranches, relative_error
from test_backend_weight_only import in_place_on_weights, planned


@pytest.mark.parametrize("make", [TwoBranches, Ghost])
def test_in_place_updates_between_branches_are_planned_and_captured_right(make):
    model = make(c=16).cuda().eval()
    # Inductor writes the pattern on the GPU too, and the rule keeps it out of the weights' kernels.
    wrapper, plan = planned(model, torch.randn(2, 16, 24, 24, device="cuda"))
    updates = in_place_on_weights(wrapper)
    assert updates, "Inductor wrote no in-place update on weights here: the test would prove nothing"
    assert not set(wrapper.weight_only()) & set(updates)
    assert plan["streams"] >= 2, plan
    fast = compiled(model, choose="streams", hoist_weight_kernels=True, weight_stream=True)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(2, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    report = last_report()
    assert report["choice"] == "streams" and report["streams"] >= 2, report
    assert report["captured_shapes"] == 1, report
    print(f"{make.__name__}: streams {report['streams']}, syncs {report.get('syncs')}, "
          f"hoisted {report.get('hoisted_kernels')}, weight stream {report.get('weight_stream_kernels')}")
