"""``nimble_rs.Nimble`` on the backend's path (``path="backend"``, and what ``"auto"`` takes where the
engine cannot run: any torch but 2.11.0, or no engine): the seed's API over
``torch.compile(backend="nimble")``, on every torch CI runs."""

import copy

import pytest
import torch

import nimble_rs
from models import Branches, Inception, relative_error

torch.manual_seed(0)


def test_prepare_then_call_matches_eager_and_the_report_says_which_path():
    model, x = Inception(channels=4).eval(), torch.randn(2, 4, 8, 8)
    torch._dynamo.reset()
    fast = nimble_rs.Nimble(model, path="backend")
    report = fast.prepare(x)
    assert report["path"] == "backend" and report["why"] == 'path="backend" was asked for', report
    assert report["graphs"] == 1 and report["kernels"] >= 5 and report["streams"] >= 2, report
    assert report["captured"] is False and "ignored" not in report, report
    with torch.no_grad():
        expected = model(x)
    got = fast(x)
    assert not got.requires_grad and relative_error(got, expected) < 1e-5
    owned = fast.forward_owned(x)
    assert owned.data_ptr() != got.data_ptr() and relative_error(owned, expected) < 1e-5
    assert relative_error(fast.eager(x), expected) < 1e-6
    # A second prepared shape, one graph each; an unprepared one is refused naming both.
    y = torch.randn(1, 4, 6, 6)
    fast.prepare(y)
    with torch.no_grad():
        assert relative_error(fast(y), model(y)) < 1e-5
    with pytest.raises(nimble_rs.NimbleInputError, match=r"inputs 3x4x8x8 float32 on cpu were not prepared \(prepared: 2x4x8x8 float32 on cpu; 1x4x6x6"):
        fast(torch.randn(3, 4, 8, 8))


def test_what_the_backends_path_cannot_do_is_refused_saying_why():
    model, x = Branches().eval(), torch.randn(1, 3, 8, 8)
    fast = nimble_rs.Nimble(model, path="backend")
    with pytest.raises(nimble_rs.NotPreparedError):
        fast(x)
    for method in ("trace_graph", "run_optimized"):
        with pytest.raises(nimble_rs.NimbleError, match=rf"Nimble\.{method} needs the libtorch engine.*options=\{{\"graphs\": DIR\}}"):
            getattr(fast, method)(x)
    report = fast.prepare(x, optimize=False, fold_half_precision=True)
    assert report["ignored"] == ["optimize", "fold_half_precision"], report
    for method in ("task_graph", "plan"):
        with pytest.raises(nimble_rs.NimbleError, match="needs the libtorch engine"):
            getattr(fast, method)()
    with pytest.raises(nimble_rs.NimbleInputError, match="option algorithm='bogus'"):
        fast.prepare(x, algorithm="bogus")
    with pytest.raises(nimble_rs.NimbleInputError, match=r"path='fast': expected \"auto\", \"engine\" or \"backend\""):
        nimble_rs.Nimble(model, path="fast")
    with pytest.raises(nimble_rs.NimbleInputError, match="a ScriptModule runs only on the engine's path"):
        nimble_rs.Nimble(torch.jit.trace(model, x), path="backend")


def test_training_through_the_backends_path_gives_eagers_gradients():
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = Inception(channels=4).train()
    model = copy.deepcopy(eager)
    fast = nimble_rs.Nimble(model, path="backend")
    x = torch.randn(2, 4, 8, 8)
    report = fast.prepare(x, training=True)
    assert report["training"] and report["graphs"] == 2, report  # a forward and a backward
    model.zero_grad()
    fast(x).square().mean().backward()
    eager(x).square().mean().backward()
    for (name, a), b in zip(model.named_parameters(), eager.parameters()):
        # Absolute beside relative: a convolution's bias before BatchNorm has a gradient of zero,
        # computed as rounding noise.
        assert (a.grad - b.grad).abs().max() <= 1e-5 + 1e-4 * b.grad.abs().max(), name
    assert model.training, "the module's own mode is left as it was"
