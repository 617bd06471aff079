"""Option ``concat_in_place`` on a CUDA GPU, where Inductor computes a concatenation pointwise:
an Inception-style block's join written in place by one kernel per branch, captured on streams
and in one region, matching eager (the choice's CPU tests: test_backend_concat.py). Skipped
without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails instead."""

import pytest
import torch

from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import relative_error
from test_backend_concat import Block, Rotary, calibrated


def follows_eager(fast, model, make, calls=5):
    with torch.no_grad():
        for _ in range(calls):
            x = make()
            assert relative_error(fast(x), model(x)) < TOLERANCE


@pytest.mark.parametrize("choose", ["streams", "single"])
def test_a_join_written_in_place_is_one_kernel_per_branch_and_matches_eager(choose, monkeypatch):
    from nimble_rs.dynamo.passes import concat

    monkeypatch.setattr(concat, "MIN_BYTES", 0)  # the block's join: 4x28x24x24 floats, 258 kB
    model = calibrated(Block()).cuda()
    make = lambda: torch.randn(4, 8, 24, 24, device="cuda")
    follows_eager(compiled(model, choose=choose, concat_in_place=False), model, make)
    joined = last_report()["kernels"]
    follows_eager(compiled(model, choose=choose), model, make)  # on by default
    report = last_report()
    assert report["concat_in_place"] == {"in_place": 1}, report
    # The join's one pointwise kernel became one per branch.
    assert report["kernels"] == joined + 3, (joined, report["kernels"])
    assert report["captured_shapes"] == 1 and report["choice"] == choose, report
    if choose == "streams":
        # The branches' parts, on their streams, write disjoint slices: no order between them,
        # the join allocated ahead of them all (test_backend_slices.py).
        assert report["streams"] > 1 and report.get("allocated_ahead") == 1, report
        # Without disjoint slices every part's writer follows the one before: nothing to allocate
        # ahead, and still eager's outputs.
        follows_eager(compiled(model, choose=choose, disjoint_slices=False), model, make)
        assert not last_report().get("allocated_ahead"), last_report()


def test_a_join_whose_branches_follow_a_stem_is_allocated_after_it_not_before_the_fork(monkeypatch):
    from nimble_rs.dynamo.passes import concat

    monkeypatch.setattr(concat, "MIN_BYTES", 0)
    model = calibrated(torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), Block())).cuda()
    follows_eager(compiled(model, choose="streams"), model, lambda: torch.randn(4, 8, 24, 24, device="cuda"))
    report = last_report()
    assert report["streams"] > 1 and report["concat_in_place"] == {"in_place": 1}, report
    # Every branch follows the stem's kernels: the join is made on a stream after them.
    assert report.get("allocated_ahead") == 1 and "allocated_before_fork" not in report, report


def test_a_join_read_pointwise_stays_fused(monkeypatch):
    # Inductor's choice, and its compile left as it is (concat.joins_for_users).
    from nimble_rs.dynamo.passes import concat

    monkeypatch.setattr(concat, "MIN_BYTES", 0)
    model = Rotary().cuda().eval()
    follows_eager(compiled(model), model, lambda: torch.randn(2, 5, 16, device="cuda"))
    assert "concat_in_place" not in last_report()


def test_a_small_join_is_left_as_inductor_lowers_it():
    model = calibrated(Block()).cuda()
    follows_eager(compiled(model), model, lambda: torch.randn(4, 8, 24, 24, device="cuda"))
    assert "concat_in_place" not in last_report()
