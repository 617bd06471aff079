"""torch.compile(backend="nimble") on a CUDA GPU with convolutions fused (option
fuse_convolutions): convolution, BatchNorm and ReLU as one cuDNN kernel with the weights folded,
or with the BatchNorm in cuDNN's epilogue (its plans built and timed per shape; a shape that is
not exact or has no engine stays Inductor's, with one warning), each captured and checked against
eager. The rewrite's choices without a GPU: test_backend_fold.py and test_backend_epilogue.py.
Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails instead."""

import warnings

import pytest
import torch

from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import relative_error


class BranchyConvBN(torch.nn.Module):
    """Two branches of convolution, BatchNorm and ReLU chains (calibrated statistics), added."""

    def __init__(self, c=16):
        super().__init__()

        def block(k):
            return [torch.nn.Conv2d(c, c, k, padding=k // 2, bias=False), torch.nn.BatchNorm2d(c), torch.nn.ReLU()]

        self.left = torch.nn.Sequential(*block(3), *block(1))
        self.right = torch.nn.Sequential(*block(1), *block(3))
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-1, 1)

    def forward(self, x):
        return self.left(x) + self.right(x)


@pytest.mark.parametrize("choose", ["streams", "single"])
def test_fused_convolutions_are_captured_and_fold_the_weights_of_every_call(choose, monkeypatch):
    # Option fuse_convolutions: each chain is cuDNN's fused convolution+bias+ReLU over weights
    # scaled in the graph (TF32 off: what eager computes, up to reassociation); where the fused
    # kernel would be measured slower, the test says it pays, so that all four chains are fused.
    from nimble_rs.dynamo.passes import fold

    monkeypatch.setattr(fold, "pays_on_gpu", lambda *shape: True)
    _all_chains_fused_and_following_every_call(choose, TOLERANCE, fuse_convolutions=True)


def _all_chains_fused_and_following_every_call(choose, tolerance, **options):
    """BranchyConvBN compiled with ``options``: its four chains fused, its outputs against
    eager's within ``tolerance``, also after .data writes to a weight and to a BatchNorm's
    statistics (every call computes what is fused from them as they are), one shape captured."""
    model = BranchyConvBN().cuda().eval()
    fast = compiled(model, choose=choose, **options)
    x = torch.randn(4, 16, 24, 24, device="cuda")
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < tolerance
        report = last_report()
        assert report["fused_convolutions"] == {"fused": 4, "left_to_inductor": 0, "slower_fused": 0}, report
        assert report["choice"] == choose, report
        model.left[0].weight.data.mul_(-0.5)
        model.right[4].running_var.mul_(2.0)
        for _ in range(3):
            x = torch.randn(4, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < tolerance
    assert last_report()["captured_shapes"] == 1


def test_a_shape_without_a_fused_engine_stays_inductors_with_a_warning(monkeypatch):
    # Where cuDNN has no fused kernel for a shape, the timing at compile time finds it (its
    # warm-up raises): that convolution is not fused, announced once, and the model runs.
    from nimble_rs.dynamo.passes import fold

    def no_engine(*args):
        raise RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED (test)")

    monkeypatch.setattr(fold, "fused_op", lambda: no_engine)
    fold._MEASURED.clear()
    said = _none_fused_with_a_warning_per_shape("fused convolution failed", TOLERANCE, fuse_convolutions=True)
    assert "CUDNN_STATUS_NOT_SUPPORTED" in said[0], said
    fold._MEASURED.clear()


def _none_fused_with_a_warning_per_shape(phrase, tolerance, **options):
    """BranchyConvBN compiled with ``options`` where no chain gets fused: its outputs against
    eager's, its four chains counted slower fused, and one warning saying ``phrase`` for each
    of its two shapes (3x3 and 1x1), returned."""
    model = BranchyConvBN().cuda().eval()
    fast = compiled(model, choose="streams", **options)
    x = torch.randn(4, 16, 24, 24, device="cuda")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        assert relative_error(fast(x), model(x)) < tolerance
    assert last_report()["fused_convolutions"] == {"fused": 0, "left_to_inductor": 0, "slower_fused": 4}
    said = [str(w.message) for w in caught if phrase in str(w.message)]
    assert len(said) == 2, said
    return said


# With TF32 on (cuDNN's fused float32 plans are TF32 ones), Inductor's program alone is 1.1e-4
# from eager on BranchyConvBN (H100): TF32's error, not the 1e-4 of float32 reassociation.
TF32_TOLERANCE = 2e-3


def _require_cudnn_frontend():
    from nimble_rs.dynamo.passes import epilogue

    missing = epilogue.available()
    if missing is not None:
        import os

        if os.environ.get("NIMBLE_REQUIRE_GPU") == "1":
            pytest.fail(f"NIMBLE_REQUIRE_GPU=1 and {missing}")
        pytest.skip(missing)


@pytest.mark.parametrize("choose", ["streams", "single"])
def test_convolutions_fused_in_the_epilogue_are_captured_and_match_eager(choose, monkeypatch):
    # fuse_convolutions="epilogue": cuDNN's graph runs each chain over the weights as they are,
    # the BatchNorm's scale and shift made in the graph on every call. TF32 on for cuDNN's
    # convolutions, eager's and the fused ones (cuDNN's fused plans in float32 are TF32 ones).
    # Where the fastest plan would be measured slower than the convolution and a pointwise pass,
    # or not exact (at these 16 channels one plan rounded to TF32 otherwise: 1.1e-3), the test
    # keeps it anyway, so that all four are fused; the exactness rule has its own test below.
    from nimble_rs.dynamo.passes import epilogue, fold

    _require_cudnn_frontend()
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    epilogue._TUNED.clear()

    def kept(*args):
        fused = fold.epilogue_plan(*args)
        if fused.plan is None and fused.times.get("difference") is not None:
            fused.plan = min((p for p in fused.built if f"plan_{p}_us" in fused.times), key=lambda p: fused.times[f"plan_{p}_us"])
        return fused.plan is not None

    monkeypatch.setattr(fold, "pays_in_epilogue", kept)
    _all_chains_fused_and_following_every_call(choose, TF32_TOLERANCE, fuse_convolutions="epilogue")
    # Two shapes (3x3 and 1x1), each built and timed once.
    assert len(epilogue._TUNED) == 2, list(epilogue._TUNED)
    epilogue._TUNED.clear()


def test_a_shape_not_exact_in_the_epilogue_stays_inductors_with_a_warning(monkeypatch):
    from nimble_rs.dynamo.passes import epilogue

    _require_cudnn_frontend()
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    epilogue._TUNED.clear()
    monkeypatch.setattr(epilogue, "EXACT", -1.0)  # any output at all counts as inexact
    said = _none_fused_with_a_warning_per_shape("not fused in cuDNN's epilogue", TF32_TOLERANCE, fuse_convolutions="epilogue")
    assert "differs from the unfused arithmetic" in said[0], said
    epilogue._TUNED.clear()


def test_with_tf32_off_the_epilogue_fuses_only_plans_without_it_and_stays_exact():
    # Eager's convolutions are full float32 then: plans that would use TF32 are not candidates.
    # Whichever shapes are fused, the model computes what eager does.
    from nimble_rs.dynamo.passes import epilogue

    _require_cudnn_frontend()
    epilogue._TUNED.clear()
    model = BranchyConvBN().cuda().eval()
    fast = compiled(model, choose="streams", fuse_convolutions="epilogue")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 16, 24, 24, device="cuda")
            assert relative_error(fast(x), model(x)) < TOLERANCE
    counts = last_report()["fused_convolutions"]
    assert counts["fused"] + counts["slower_fused"] == 4 and counts["left_to_inductor"] == 0, counts
    assert len(epilogue._TUNED) == 2
    epilogue._TUNED.clear()


def test_the_epilogue_option_without_cudnn_frontend_leaves_the_convolutions_with_a_warning(monkeypatch):
    from nimble_rs.dynamo.passes import epilogue

    monkeypatch.setattr(epilogue, "available", lambda: "nvidia-cudnn-frontend is not importable (test)")
    model = BranchyConvBN().cuda().eval()
    fast = compiled(model, fuse_convolutions="epilogue")
    x = torch.randn(4, 16, 24, 24, device="cuda")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        assert relative_error(fast(x), model(x)) < TOLERANCE
    assert last_report()["fused_convolutions"] == {"failed": "nvidia-cudnn-frontend is not importable (test)"}
    assert any("needs cuDNN's graph API" in str(w.message) for w in caught)


def test_the_fused_kernel_is_measured_once_per_shape():
    from nimble_rs.dynamo.passes import fold

    x = torch.empty(4, 16, 24, 24, device="cuda")
    w = torch.empty(16, 16, 3, 3, device="cuda")
    fold._MEASURED.clear()
    first = fold.pays_on_gpu(x, w, (1, 1), (1, 1), (1, 1), 1)
    assert isinstance(first, bool) and len(fold._MEASURED) == 1
    assert fold.pays_on_gpu(x, w, (1, 1), (1, 1), (1, 1), 1) is first and len(fold._MEASURED) == 1
