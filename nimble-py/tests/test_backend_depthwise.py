"""Option ``depthwise_kernels`` (``nimble_rs.dynamo.passes.depthwise``) on the CPU: which convolutions
the rewrite takes (depthwise ones of a multiple of four channels; not grouped, full or other
depthwise ones), the graph through Inductor against eager, and our Triton kernel itself against
float64 in Triton's interpreter (bias, stride, dilation, sizes that do not fill its tiles, and
each tile the backend measures, unrolled and with its kernel columns a loop). The backend
measures and applies it on a GPU only (test_backend_gpu_depthwise.py runs it there); its
compiles ahead: test_backend_depthwise_ahead.py."""

import pytest
import torch
from torch import nn

from nimble_rs.dynamo.passes import depthwise, depthwise_kernel
from nimble_rs.dynamo.passes.fxnodes import value as _val
from models import rewritten_through_inductor
from triton_interpreter import interpreted


def fast(tile, us=1.0):
    """A measurement (``depthwise.Timing``) of ``tile`` at ``us`` microseconds against cuDNN's 10,
    no write spared."""
    return depthwise.Timing(tile, (us,), 10.0, 0.0)


# a measurement slower than cuDNN's
SLOWER = depthwise.Timing((2, 8, 8, 1), (20.0,), 10.0, 0.0)


class Convolutions(nn.Module):
    """Three depthwise convolutions the rewrite takes (one with a bias, one at stride 2 with
    dilation, one of six channels, loaded two at a time), and two it leaves: a grouped one (two
    channels per group) and a full one."""

    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(8, 8, 5, padding=2, groups=8)
        self.strided = nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=8, bias=False)
        self.grouped = nn.Conv2d(8, 4, 3, padding=1, groups=4)
        self.full = nn.Conv2d(4, 6, 1)
        self.six = nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False)

    def forward(self, x):
        return self.six(self.full(self.grouped(self.strided(torch.relu(self.depthwise(x))))))


def test_depthwise_convolutions_of_four_channels_are_replaced_and_compute_what_eager_does():
    model = Convolutions().eval()
    x = torch.randn(2, 8, 13, 11)
    asked = []

    def tile_for(at):
        asked.append((tuple(_val(at.source).shape), tuple(_val(at.weight).shape), at.bias is not None, at.stride, at.padding, at.dilation, at.relu_input))
        return fast((4, 8, 64, 4))

    got, counts, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.replace_depthwise(gm, tile_for))
    with torch.no_grad():
        expected = model(x)
    # the second reads the first's output through its ReLU (measured so and as it is, equally
    # fast: the first taken)
    assert counts == {"replaced": 3, "slower": 0, "prologue": 1}, counts
    assert asked == [((2, 8, 13, 11), (8, 1, 5, 5), True, (1, 1), (2, 2, 2, 2), (1, 1), False), ((2, 8, 13, 11), (8, 1, 3, 3), False, (2, 2), (2, 2, 2, 2), (2, 2), True), ((2, 8, 13, 11), (8, 1, 3, 3), False, (2, 2), (2, 2, 2, 2), (2, 2), False), ((2, 6, 7, 6), (6, 1, 3, 3), False, (1, 1), (1, 1, 1, 1), (1, 1), False)], asked
    assert ops.count(torch.ops.nimble.depthwise_conv2d.default) == 3
    # each weight laid out tap by tap in the graph, from the parameter on every call
    assert ops.count(torch.ops.aten.permute.default) == 3
    assert ops.count(torch.ops.aten.convolution.default) == 2
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5, rtol=1e-4), (got - expected).abs().max()


class Separable(nn.Module):
    """timm's separable convolutions as NASNet-A large has them: a ReLU, an uneven zero padding
    (here unlike across the rows and the columns) and a depthwise convolution at stride 2; a ReLU another branch reads too, before a padded
    one; and a padding by a value other than zero, which the kernel does not take."""

    def __init__(self):
        super().__init__()
        self.strided = nn.Conv2d(8, 8, 5, stride=2, groups=8, bias=False)
        self.padded = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.ones = nn.Conv2d(8, 8, 3, groups=8, bias=False)

    def forward(self, x):
        r = torch.relu(x)
        a = self.strided(nn.functional.pad(torch.relu(x + 1), (1, 2, 0, 3)))
        return a, self.padded(r) + r, self.ones(nn.functional.pad(x, (1, 1, 1, 1), value=1.0))


def test_a_zero_padding_and_a_relu_before_the_convolution_are_read_through():
    model = Separable().eval()
    x = torch.randn(2, 8, 14, 13)
    asked = []

    def tile_for(at):
        asked.append((at.padding, at.relu_input, "input" if at.source.op == "placeholder" else at.source.target))
        # (reading through measured the faster)
        return fast((2, 8, 8, 1), 1.0 if at.relu_input else 2.0)

    got, counts, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.replace_depthwise(gm, tile_for))
    with torch.no_grad():
        expected = model(x)
    assert counts == {"replaced": 3, "slower": 0, "prologue": 2}, counts
    aten = torch.ops.aten
    # each read through and as it is where that differs
    assert asked == [((0, 3, 1, 2), True, aten.add.Tensor), ((0, 0, 0, 0), False, aten.constant_pad_nd.default), ((1, 1, 1, 1), True, "input"), ((1, 1, 1, 1), False, aten.relu.default), ((0, 0, 0, 0), False, aten.constant_pad_nd.default)], asked
    # the first's padding and ReLU are gone from the graph; the second's ReLU stays for the sum
    assert ops.count(aten.constant_pad_nd.default) == 1 and ops.count(aten.relu.default) == 1, ops
    for g, e in zip(got, expected):
        assert g.shape == e.shape and torch.allclose(g, e, atol=1e-5, rtol=1e-4), (g - e).abs().max()


class SecondSeparable(nn.Module):
    """The second half of a NASNet-A large separable convolution pair: a 1x1 convolution, its
    BatchNorm, a ReLU and a depthwise convolution."""

    def __init__(self):
        super().__init__()
        self.pointwise = nn.Conv2d(8, 8, 1, bias=False)
        self.norm = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False)

    def forward(self, x):
        return self.depthwise(torch.relu(self.norm(self.pointwise(x))))


def test_an_inference_batchnorm_before_the_relu_is_read_through_too():
    model = SecondSeparable().eval()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-1, 1)
        model.norm.running_var.uniform_(0.5, 2)
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-1, 1)
    x = torch.randn(2, 8, 10, 9)
    sources = []

    def tile_for(at):
        sources.append((at.source.target, at.relu_input, len(at.affine)))
        return fast((2, 8, 8, 1), 1.0 if at.affine else 2.0)

    got, counts, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.replace_depthwise(gm, tile_for))
    with torch.no_grad():
        expected = model(x)
    assert counts == {"replaced": 1, "slower": 0, "prologue": 1, "affine_prologue": 1}, counts
    # the kernel reads the 1x1's output; the BatchNorm's ops on it and the ReLU are gone
    assert sources[0][:2] == (torch.ops.aten.convolution.default, True) and sources[0][2] >= 2, sources
    assert torch.ops.aten.relu.default not in ops, ops
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4), (got - expected).abs().max()


def test_a_shape_measured_slower_or_unmeasured_stays_cudnns():
    model = Convolutions().eval()
    x = torch.randn(2, 8, 13, 11)
    # the first convolution one way (its input as it is); the second read through its ReLU,
    # then as it is; the third one way
    answers = iter([SLOWER, SLOWER, False, SLOWER])
    got, counts, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.replace_depthwise(gm, lambda at: next(answers)))
    assert next(answers, "all asked") == "all asked"
    assert counts == {"replaced": 0, "slower": 2, "unmeasured": 1}, counts
    assert torch.ops.nimble.depthwise_conv2d.default not in ops
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5, rtol=1e-4)


def test_where_reading_through_measures_slower_the_plain_kernel_is_taken():
    model = Convolutions().eval()
    x = torch.randn(2, 8, 13, 11)
    asked = []

    def tile_for(at):
        asked.append(at.relu_input)
        return SLOWER if at.relu_input else fast((2, 8, 8, 1))

    got, counts, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.replace_depthwise(gm, tile_for))
    # the second convolution read through its ReLU measured slower: it reads the ReLU's output
    assert asked == [False, True, False, False], asked
    assert counts == {"replaced": 3, "slower": 0}, counts
    assert torch.ops.aten.relu.default in ops
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5, rtol=1e-4)


def _convolution_reading(others: int):
    """A depthwise convolution node reading a ReLU that ``others`` more nodes read."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    relu = graph.call_function(aten.relu.default, (x,))
    for _ in range(others):
        graph.call_function(aten.neg.default, (relu,))
    return graph.call_function(aten.convolution.default, (relu, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8))


def test_the_choice_counts_the_write_reading_through_spares():
    through, plain = "through", "plain"  # (sites, as the choice tells them apart: the plain one last)
    # cuDNN 10 us; the write of the tensor the convolution reads, 2 us
    timed = lambda through_us, plain_us, tile=(2, 8, 8, 1): [(through, depthwise.Timing(tile, (through_us,), 10.0, 2.0)), (plain, depthwise.Timing((4, 8, 64, 4), (plain_us,), 10.0, 2.0))]
    alone, shared = _convolution_reading(0), _convolution_reading(1)
    # 9.5 us reading through: past 0.9 of cuDNN's 10, within 0.9 of 10 and the 2 it spares
    assert depthwise.choose(alone, timed(9.5, 50.0)) == (through, (2, 8, 8, 1))
    # where another node reads the ReLU's output, nothing is spared
    assert depthwise.choose(shared, timed(9.5, 50.0)) is None
    assert depthwise.choose(shared, timed(8.5, 50.0)) == (through, (2, 8, 8, 1))
    # the plain kernel, 6 us and the 2 us write it leaves, against 9 reading through
    assert depthwise.choose(alone, timed(9.0, 6.0)) == (plain, (4, 8, 64, 4))
    assert depthwise.choose(alone, timed(7.5, 6.0)) == (through, (2, 8, 8, 1))
    # a site none of whose tiles matched cuDNN's output is not taken, nor one whose measurement
    # failed (then what it would spare is still counted where the plain site measured it)
    assert depthwise.choose(alone, timed(1.0, 50.0, None)) is None
    assert depthwise.choose(alone, [(through, False), timed(1.0, 6.0)[1]]) == (plain, (4, 8, 64, 4))
    assert depthwise.choose(alone, [(through, False), timed(1.0, 9.5)[1]]) is None
    assert depthwise.choose(alone, [timed(1.0, 6.0)[0], (plain, False)]) == (through, (2, 8, 8, 1))
    # one site (nothing read through): cuDNN's 10 alone
    assert depthwise.choose(alone, [(plain, depthwise.Timing((4, 8, 64, 4), (9.5,), 10.0, 2.0))]) is None
    assert depthwise.choose(alone, [(plain, depthwise.Timing((4, 8, 64, 4), (8.5,), 10.0, 2.0))]) == (plain, (4, 8, 64, 4))


# Which kernels have their columns a loop (the 5x5, the 3x3s), by formulation: option value
# True, "unrolled", "columns".
LOOPED = {"by-size": (True, False), "unrolled": (False, False), "columns": (True, True)}


@pytest.mark.parametrize("formulation", sorted(LOOPED))
def test_the_report_lists_each_site_once_with_what_took_it(monkeypatch, formulation):
    # The option's pass as the pipeline runs it, its measurement and compiles stood in for:
    # reading through measured faster for the first two convolutions' sites, the third's slower;
    # each kernel's variants and measurements in the tiles whose kernel columns are a loop where
    # the formulation loops it (by default the 5x5's, not the 3x3s').
    looped = lambda kernel: LOOPED[formulation][0 if kernel[0] == 5 else 1]
    model = Separable().eval()
    x = torch.randn(2, 8, 14, 13)
    timings = {True: depthwise.Timing((2, 8, 8, 1), (4.0, 5.0), 10.0, 1.0), False: depthwise.Timing((4, 8, 64, 4), (6.0, 7.0), 10.0, 1.0)}
    # (the baselines, what needs no variant, measured while the variants compile: before their end)
    events = []

    class Pending:
        def __init__(self, specs):
            self.specs = specs

        def finish(self):
            events.append("finished")
            assert all((len(spec[9]) == 5) == looped(spec[4]) for spec in self.specs), self.specs
            return {"compiled_ahead": len(self.specs)}

    monkeypatch.setattr(depthwise, "start_ahead", Pending)
    monkeypatch.setattr(depthwise, "baseline", lambda at: events.append(("baseline", at.relu_input)))
    asked = set()
    monkeypatch.setattr(depthwise, "timing", lambda at, column_loop: asked.add((tuple(_val(at.weight).shape[2:]), column_loop)) or timings[at.relu_input])
    got, report, ops = rewritten_through_inductor(model, x, lambda gm: depthwise.rewrite(gm, formulation))
    assert asked == {(kernel, looped(kernel)) for kernel in ((5, 5), (3, 3))}, asked
    shapes = report.pop("shapes")
    assert events == [("baseline", relu) for relu in (True, False, True, False, False)] + ["finished"], events
    assert set(report.pop("seconds")) == {"compile_ahead", "baselines", "measure_and_rewrite"}
    # five sites (the first two each read through and as given), each variant's two tiles
    assert report == {"replaced": 3, "slower": 0, "prologue": 2, "compiled_ahead": 10}, report
    assert [(s["relu_input"], s["taken"]) for s in shapes] == [(True, 1), (False, 0), (True, 1), (False, 0), (False, 1)], shapes
    first = shapes[0]
    assert (first["input"], first["kernel"], first["padding"], first["tile"]) == ([2, 8, 14, 13], [5, 5], [0, 3, 1, 2], [2, 8, 8, 1]), first
    assert (first["cudnn_us"], first["fastest_us"], first["tile_us"], first["write_us"]) == (10.0, 4.0, [4.0, 5.0], 1.0), first
    with torch.no_grad():
        for g, e in zip(got, model(x)):
            assert torch.allclose(g, e, atol=1e-5, rtol=1e-4)


def test_the_op_off_cuda_is_atens_convolution_channels_last():
    x, w, b = torch.randn(2, 12, 9, 7), torch.randn(12, 1, 3, 3), torch.randn(12)
    got = torch.ops.nimble.depthwise_conv2d(x, depthwise_kernel.taps_of(w), b, None, None, [3, 3], [1, 2], [1, 1, 0, 0], [1, 1], False, [4, 8, 64, 4])
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(got, torch.nn.functional.conv2d(x, w, b, [1, 2], [1, 0], [1, 1], 12), atol=1e-6)
    # through a per-channel factor and term, a ReLU and a padding of one row above and two below
    scale, shift = torch.rand(12) + 0.5, torch.randn(12)
    got = torch.ops.nimble.depthwise_conv2d(x, depthwise_kernel.taps_of(w), b, scale, shift, [3, 3], [1, 1], [1, 2, 0, 0], [1, 1], True, [4, 8, 64, 4])
    source = torch.relu(x * scale.view(1, 12, 1, 1) + shift.view(1, 12, 1, 1))
    expected = torch.nn.functional.conv2d(torch.nn.functional.pad(source, (0, 0, 1, 2)), w, b, 1, 0, 1, 12)
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-6)


KERNEL_CASES = [
    # shape, kernel, stride, padding, dilation, a factor, a term and a ReLU read through (else a
    # bias), tile (rows, columns, channels, warps)
    ((2, 12, 9, 11), 3, 1, 1, 1, True, (4, 8, 64, 4)),
    ((1, 40, 13, 13), 5, 2, 2, 1, False, (2, 4, 32, 4)),
    ((2, 8, 8, 7), 7, 1, 3, 1, True, (3, 4, 4, 1)),
    ((1, 4, 9, 9), 3, 1, 2, 2, False, (2, 8, 4, 1)),
    # a 7x7 at stride 2 over a height the rows do not divide, no padding, and a three-row tile
    ((1, 16, 12, 11), 7, 2, 0, 1, False, (3, 8, 64, 4)),
    # read through a ReLU and timm's uneven padding ([top, bottom, left, right]), as the rewrite
    # gives them for conv(pad(relu(x)))
    ((2, 8, 11, 12), 5, 2, [1, 2, 2, 1], 1, True, (2, 4, 8, 1)),
    ((1, 12, 9, 9), 3, 1, [0, 3, 1, 0], 2, False, (4, 8, 16, 2)),
    # channel counts loaded two at a time and one at a time
    ((1, 6, 9, 8), 3, 1, 1, 1, False, (2, 8, 8, 1)),
    ((1, 5, 7, 9), 5, 1, 2, 1, True, (4, 4, 4, 1)),
]

KERNEL_SCRIPT = """
import json, sys
import torch, torch.nn.functional as F
from nimble_rs.dynamo.passes.depthwise import tiles
from nimble_rs.dynamo.passes.depthwise_kernel import taps_of, triton_depthwise
given = json.loads(sys.argv[1])
# (with column_loop, every tile's kernel columns a loop)
loop = [1] if given["column_loop"] else []
results = []
for shape, k, stride, padding, dilation, relu, tile in given["cases"]:
    tile = tile + loop
    torch.manual_seed(0)
    x = torch.randn(shape)
    w = torch.randn(shape[1], 1, k, k)
    # a bias where there is no ReLU to read through
    b = None if relu else torch.randn(shape[1])
    # and a per-channel factor and term (a BatchNorm's) where there is one
    scale, shift = (torch.rand(shape[1]) + 0.5, torch.randn(shape[1])) if relu else (None, None)
    top, bottom, left, right = padding if isinstance(padding, list) else [padding] * 4
    source = x if scale is None else x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)
    source = F.pad(torch.relu(source) if relu else source, (left, right, top, bottom)).double()
    exact = F.conv2d(source, w.double(), None if b is None else b.double(), stride, 0, dilation, shape[1])
    got = triton_depthwise(x, taps_of(w), b, [k, k], [stride, stride], [top, bottom, left, right], [dilation, dilation], *tile, relu_input=relu, scale=scale, shift=shift)
    results.append({"shape": list(got.shape) == list(exact.shape), "channels_last": got.is_contiguous(memory_format=torch.channels_last), "error": ((got.double() - exact).abs().max() / exact.abs().max()).item()})
# a term without a factor and a factor without a term (one affine op before the ReLU), padded
for scale, shift in ((None, torch.randn(8)), (torch.rand(8) + 0.5, None)):
    x, w = torch.randn(1, 8, 9, 9), torch.randn(8, 1, 3, 3)
    source = x if scale is None else x * scale.view(1, -1, 1, 1)
    source = source if shift is None else source + shift.view(1, -1, 1, 1)
    exact = F.conv2d(F.pad(torch.relu(source), (1, 1, 1, 1)).double(), w.double(), None, 1, 0, 1, 8)
    got = triton_depthwise(x, taps_of(w), None, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 4, 8, 8, 1, *loop, relu_input=True, scale=scale, shift=shift)
    results.append({"shape": list(got.shape) == list(exact.shape), "channels_last": got.is_contiguous(memory_format=torch.channels_last), "error": ((got.double() - exact).abs().max() / exact.abs().max()).item()})
# every tile the backend measures, on a 5x5 and a 7x7
for k in (5, 7):
    x, w = torch.randn(1, 8, 10, 9), torch.randn(8, 1, k, k)
    exact = F.conv2d(x.double(), w.double(), None, 1, k // 2, 1, 8)
    for tile in tiles(k * k, bool(loop)):
        got = triton_depthwise(x, taps_of(w), None, [k, k], [1, 1], [k // 2, k // 2], [1, 1], *tile)
        results.append({"shape": list(got.shape) == list(exact.shape), "channels_last": True, "error": ((got.double() - exact).abs().max() / exact.abs().max()).item()})
print(json.dumps(results))
"""


@pytest.mark.parametrize("column_loop", [False, True], ids=["unrolled", "column-loop"])
def test_the_kernel_computes_the_convolution_in_the_interpreter(column_loop):
    pytest.importorskip("triton")
    from pathlib import Path

    package = str(Path(depthwise.__file__).resolve().parents[2])
    results = interpreted(KERNEL_SCRIPT, {"cases": KERNEL_CASES, "column_loop": column_loop}, path=package)
    assert len(results) == len(KERNEL_CASES) + 2 + len(depthwise.CONFIGS) + len(depthwise.LARGE_CONFIGS)
    for case, found in zip(KERNEL_CASES + ["term alone", "factor alone"] + ["tile"] * 99, results):
        assert found["shape"] and found["channels_last"], (case, found)
        assert found["error"] < 1e-6, (case, found)


def test_the_variants_to_compile_are_each_geometry_and_tile_once():
    from torch._subclasses.fake_tensor import FakeTensorMode

    class Twice(nn.Module):
        # two convolutions of one geometry (one compile per tile), one of another
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False)
            self.b = nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False)
            self.c = nn.Conv2d(8, 8, 7, stride=2, groups=8)

        def forward(self, x):
            return self.c(self.b(self.a(x)))

    found, looped, by_size = [], [], []

    def inner(gm, example_inputs, **kwargs):
        with torch.no_grad():
            found.extend(depthwise.variants(gm, "unrolled"))
            looped.extend(depthwise.variants(gm, "columns"))
            by_size.extend(depthwise.variants(gm))
        from torch._inductor.compile_fx import compile_fx_inner

        return compile_fx_inner(gm, example_inputs, **kwargs)

    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    # (caches off: a cached program would skip the inner compile)
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False), torch.no_grad():
        torch.compile(Twice().eval(), backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))(torch.randn(1, 8, 16, 16))
    geometries = [(bias, affine, size, stride, padding, relu, tile) for _, _, bias, affine, size, stride, padding, _, relu, tile, _ in found]
    assert geometries == [(False, (False, False), (5, 5), (1, 1), (2, 2), False, t) for t in depthwise.CONFIGS] + [(True, (False, False), (7, 7), (2, 2), (0, 0), False, t) for t in depthwise.LARGE_CONFIGS], geometries
    # (option value "columns": the same geometries in the tiles whose kernel columns are a loop)
    assert [spec[:9] + (spec[9][:4],) + spec[10:] for spec in looped] == found and all(spec[9][4] == 1 for spec in looped), looped
    # (by default, True: a kernel of more than 3x3's taps looped, as both are here)
    assert by_size == looped, by_size


def test_a_formulation_not_known_is_named():
    with pytest.raises(ValueError, match="depthwise formulation 'rows': expected one of"):
        depthwise.loops_columns(9, "rows")


def test_the_measurement_gives_the_kernel_the_prologues_vectors_and_finds_the_fastest_tile():
    # What timing passes the kernel, on the CPU: the kernel stood in for by the op's own
    # arithmetic (ATen's), the timer by fixed numbers (cuDNN's first, then each tile's).
    aten = torch.ops.aten
    graph = torch.fx.Graph()

    def node(name, value):
        made = graph.placeholder(name)
        made.meta["val"] = value
        return made

    x, w, s = node("x", torch.empty(2, 8, 9, 9)), node("w", torch.empty(8, 1, 3, 3)), node("s", torch.empty(8, 1, 1))
    scaled = graph.call_function(aten.mul.Tensor, (x, s))
    shifted = graph.call_function(aten.add.Tensor, (scaled, s))
    at = depthwise.Site(x, w, None, (1, 1), (1, 2, 0, 1), (1, 1), True, ((scaled, s), (shifted, s)))
    # (cuDNN's and the write's, the baseline, then each tile's)
    given, times = [], iter([10.0, 3.0, 8.0, 9.5])

    def kernel(xr, taps, bias, kernel_size, stride, padding, dilation, *tile, relu_input, scale, shift):
        given.append((tuple(scale.shape), tuple(shift.shape), relu_input, tuple(tile)))
        return torch.ops.nimble.depthwise_conv2d(xr, taps, bias, scale, shift, kernel_size, stride, padding, dilation, relu_input, list(tile))

    depthwise.MEASURED.clear()
    depthwise.BASELINES.clear()
    try:
        found = depthwise.timing(at, torch.device("cpu"), lambda run: (run(), next(times))[1], kernel)
        # each tile run once to check its output, once by the timer
        assert given == [((8,), (8,), True, tile) for tile in depthwise.CONFIGS for _ in range(2)], given
        # the faster tile, its output matching the convolution's
        assert found == depthwise.Timing(depthwise.CONFIGS[0], (8.0, 9.5), 10.0, 3.0), found
        assert depthwise.timing(at) is found and list(depthwise.MEASURED.values()) == [found]
        assert depthwise.baseline(at) == (10.0, 3.0) and list(depthwise.BASELINES.values()) == [(10.0, 3.0)]
        # a tile whose output is off by more than EXACT is not timed, nor taken
        depthwise.MEASURED.clear()
        depthwise.BASELINES.clear()
        times = iter([10.0, 3.0, 9.5])

        def off_in_the_first_tile(*args, **kwargs):
            got = kernel(*args, **kwargs)
            return got * (1 + 1e-4) if tuple(args[7:]) == depthwise.CONFIGS[0] else got

        found = depthwise.timing(at, torch.device("cpu"), lambda run: (run(), next(times))[1], off_in_the_first_tile)
        assert found == depthwise.Timing(depthwise.CONFIGS[1], (float("inf"), 9.5), 10.0, 3.0), found
    finally:
        depthwise.MEASURED.clear()
        depthwise.BASELINES.clear()


def test_cudnns_convolution_is_timed_as_the_graph_calls_it(monkeypatch):
    # cuDNN's benchmark mode searches an algorithm per call's shapes and padding: the baseline must
    # be the call the graph makes (its even padding passed to the convolution), under the same
    # key, not an input padded beforehand (another key, searched apart); only an uneven padding's
    # rest is made beforehand. Outputs as the whole padding gives them.
    calls = []
    conv2d = torch.nn.functional.conv2d

    def recorded(x, w, b, stride, padding, dilation, groups):
        calls.append((tuple(x.shape), tuple(padding), x.is_contiguous(memory_format=torch.channels_last)))
        return conv2d(x, w, b, stride, padding, dilation, groups)

    monkeypatch.setattr(torch.nn.functional, "conv2d", recorded)
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    xr, wr = torch.randn(1, 8, 9, 9).contiguous(memory_format=torch.channels_last), torch.randn(8, 1, 3, 3)
    for padding, shape, inside in (((1, 1, 1, 1), (1, 8, 9, 9), (1, 1)), ((1, 1, 0, 0), (1, 8, 9, 9), (1, 0)), ((1, 2, 0, 1), (1, 8, 10, 10), (1, 0)), ((0, 1, 0, 1), (1, 8, 10, 10), (0, 0))):
        at = depthwise.Site(x, w, None, (1, 1), padding, (1, 1), True)
        conv, read = depthwise._cudnn(at, xr, None, None, wr, None)
        calls.clear()
        got = conv()
        assert calls == [(shape, inside, True)] and tuple(read.shape) == shape, (padding, calls)
        top, bottom, left, right = padding
        expected = conv2d(torch.nn.functional.pad(xr.relu(), (left, right, top, bottom)), wr, None, 1, 0, 1, 8)
        torch.testing.assert_close(got, expected)
