"""Option ``fuse_convolutions``'s rewrite (``nimble_rs.dynamo.passes.fold``) on the CPU: which chains of
convolution, per-channel affine ops and ReLU become the fused op, the folded arithmetic against
eager, and what is left to Inductor. The op's CPU body computes what cuDNN's fused kernel does;
the backend applies the rewrite on a GPU only (test_backend_gpu_fold.py runs it there)."""

import pytest
import torch
from torch import nn

from nimble_rs.dynamo.passes import fold
from models import relative_error, rewritten_through_inductor


def fused_through_inductor(model, x, pays=lambda *shape: True, mode="folded"):
    """The model compiled by Inductor with the rewrite applied to its inference graph, its
    output on ``x``, the rewrite's counts and the graph's ops after it."""
    return rewritten_through_inductor(model, x, lambda gm: fold.fuse_convolutions(gm, pays, mode=mode))


def asked(answer):
    """A ``pays`` that answers ``answer`` for every convolution, and the list of what it was
    asked: (input shape, weight shape, stride, groups)."""
    seen = []

    def pays(x, weight, stride, padding, dilation, groups):
        seen.append((tuple(x.shape), tuple(weight.shape), stride, groups))
        return answer

    return pays, seen


def calibrated(model):
    """BatchNorm statistics and affine parameters away from their initial zeros and ones, so
    that folding them is exercised."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-1, 1)
    return model.eval()


class Chains(nn.Module):
    """Chains the rewrite fuses (convolution, BatchNorm, ReLU with and without the
    convolution's bias; a scale and a shift by numbers) and ones it leaves (a ReLU feeding a
    concatenation, a ReLU that is the graph's output, a shift subtracted from a number)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, stride=2), nn.BatchNorm2d(8, eps=1e-3), nn.ReLU())
        self.grouped = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.scaled = nn.Conv2d(8, 8, 1)
        self.left = nn.Conv2d(8, 4, 1)
        self.right = nn.Conv2d(8, 4, 3, padding=1)
        self.reversed = nn.Conv2d(8, 8, 1)
        self.last = nn.Sequential(nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8), nn.ReLU())

    def forward(self, x):
        y = self.grouped(self.b(self.a(x)))
        y = torch.relu(self.scaled(y) * 2.0 + 0.5)
        y = torch.relu(1.0 - self.reversed(y))
        z = torch.cat([torch.relu(self.left(y)), torch.relu(self.right(y))], 1)
        return self.last(z)


def test_chains_fuse_and_compute_what_eager_does():
    model = calibrated(Chains())
    x = torch.randn(2, 3, 20, 20)
    got, counts, ops = fused_through_inductor(model, x)
    # a, b, grouped, scaled fused; left, right (into the concatenation) and last (the output) left.
    assert counts == {"fused": 4, "left_to_inductor": 3, "slower_fused": 0}, counts
    assert ops.count(torch.ops.nimble.conv_bias_relu.default) == 4 and ops.count(torch.ops.aten.convolution.default) == 4, ops
    with torch.no_grad():
        expected = model(x)
    assert relative_error(got, expected) < 1e-5


def test_in_the_epilogue_the_batchnorm_chains_fuse_over_the_weights_as_they_are():
    # fuse_convolutions="epilogue": nimble::conv_scale_bias_relu takes the weights unscaled and
    # the BatchNorm's scale and shift; chains scaled or shifted by numbers, and grouped
    # convolutions, stay Inductor's. (The op's CPU body is the unfused arithmetic, which cuDNN's
    # graph matches within epilogue.EXACT where it is kept.)
    model = calibrated(Chains())
    x = torch.randn(2, 3, 20, 20)
    pays, measured = asked(True)
    got, counts, ops = fused_through_inductor(model, x, pays, mode="epilogue")
    # a and b fused; grouped and scaled now left too.
    assert counts == {"fused": 2, "left_to_inductor": 5, "slower_fused": 0}, counts
    assert ops.count(torch.ops.nimble.conv_scale_bias_relu.default) == 2 and ops.count(torch.ops.aten.convolution.default) == 6, ops
    assert torch.ops.nimble.conv_bias_relu.default not in ops
    assert measured and {groups for *_, groups in measured} == {1}, measured  # a grouped one is not even measured
    with torch.no_grad():
        expected = model(x)
    assert relative_error(got, expected) < 1e-5


def test_a_tuned_epilogue_graph_is_found_whatever_the_strides_of_dimensions_of_size_one():
    # A 1x1 weight tuned channels-last at compile time, (C, 1, C, C), comes contiguous at run
    # time, (C, 1, 1, 1): the same memory, so the same graph (the strides of size-1 dimensions
    # are no part of the key); a 3x3 weight's layouts are two graphs.
    from nimble_rs.dynamo.passes.epilogue import _key

    geometry = ((1, 1), (0, 0), (1, 1))
    x = ((4, 16, 24, 24), (9216, 1, 384, 16))
    assert _key(*x, (8, 16, 1, 1), (16, 1, 16, 16), torch.float32, "cuda:0", *geometry) == _key(*x, (8, 16, 1, 1), (16, 1, 1, 1), torch.float32, "cuda:0", *geometry)
    assert _key(*x, (8, 16, 3, 3), (144, 1, 48, 16), torch.float32, "cuda:0", *geometry) != _key(*x, (8, 16, 3, 3), (144, 9, 3, 1), torch.float32, "cuda:0", *geometry)


class ScaledAndShiftedByANumber(nn.Module):
    """relu(conv(x) * a * b + 1) with no bias: the scale a * b is built before the shift turns
    out to be a number with no bias to carry it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, bias=False)
        self.a = nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        self.b = nn.Parameter(torch.rand(8, 1, 1) + 0.5)

    def forward(self, x):
        return torch.relu(self.conv(x) * self.a * self.b + 1.0).sum(dim=(2, 3)) * 2


def test_a_shift_by_a_number_without_a_bias_to_carry_it_is_left_unchanged():
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    model, x = ScaledAndShiftedByANumber().eval(), torch.randn(2, 3, 10, 10)
    seen = []

    def inner(gm, example_inputs, **kwargs):
        before = [str(n) for n in gm.graph.nodes]
        seen.append((fold.fuse_convolutions(gm, lambda *shape: True), before, [str(n) for n in gm.graph.nodes]))
        return compile_fx_inner(gm, example_inputs, **kwargs)

    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False), torch.no_grad():
        got = torch.compile(model, backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))(x)
        expected = model(x)
    counts, before, after = seen[0]
    assert counts == {"fused": 0, "left_to_inductor": 1, "slower_fused": 0}, counts
    assert after == before  # what the attempt built is gone
    assert relative_error(got, expected) < 1e-5


def test_a_convolution_measured_slower_fused_is_left_as_it_is():
    model = calibrated(Chains())
    x = torch.randn(2, 3, 20, 20)
    slower, measured = asked(False)
    got, counts, ops = fused_through_inductor(model, x, slower)
    assert counts == {"fused": 0, "left_to_inductor": 3, "slower_fused": 4}, counts
    assert torch.ops.nimble.conv_bias_relu.default not in ops
    assert ((2, 3, 20, 20), (8, 3, 3, 3), (1, 1), 1) in measured and ((2, 8, 9, 9), (8, 2, 3, 3), (1, 1), 4) in measured, measured
    with torch.no_grad():
        assert relative_error(got, model(x)) < 1e-5


@pytest.mark.parametrize("mode", ["folded", "epilogue"])
def test_weights_changed_after_compiling_are_folded_again(mode):
    # The scaled weights (or, "epilogue", the scale) and the bias are computed in the graph on
    # every call: a change through .data (which bumps no version counter) is seen as well.
    model = calibrated(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(1), nn.Linear(8 * 16 * 16, 4)))
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner(gm, example_inputs, **kwargs):
        counts.append(fold.fuse_convolutions(gm, lambda *shape: True, mode=mode))
        return compile_fx_inner(gm, example_inputs, **kwargs)

    counts = []
    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False), torch.no_grad():
        fast = torch.compile(model, backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))
        x = torch.randn(2, 3, 20, 20)
        fast(x)
        assert counts[0]["fused"] == 2, counts
        model[0].weight.data.mul_(0.5)
        model[1].running_var.mul_(3.0)
        model[4].bias.data.add_(0.25)
        assert relative_error(fast(x), model(x)) < 1e-5


def test_the_backend_fuses_on_a_gpu_only():
    # On the CPU the option changes nothing (cuDNN's kernel is what it buys), and says so in
    # no report key.
    import nimble_rs

    model = calibrated(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)))
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        got = torch.compile(model, backend="nimble", options={"fuse_convolutions": True})(x)
        assert relative_error(got, model(x)) < 1e-5
    assert "fused_convolutions" not in nimble_rs.dynamo.reports()[before]
