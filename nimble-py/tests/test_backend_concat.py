"""Option ``concat_in_place`` on the CPU: which concatenations it writes in place and which it
leaves to Inductor's pointwise kernel, and the outputs against eager. Inductor computes a
concatenation pointwise only on a GPU, unless ``force_pointwise_cat`` is set: the tests set it so
that the option's choice is reached here (test_backend_gpu_concat.py runs it on a GPU)."""

import pytest
import torch
from torch import nn

import nimble_rs
from models import relative_error


class Block(nn.Module):
    """An Inception-style block: four branches of convolution, BatchNorm and ReLU joined along
    the channels, the join read by a convolution."""

    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleList([nn.Sequential(nn.Conv2d(8, c, 1), nn.BatchNorm2d(c), nn.ReLU()) for c in (4, 6, 8, 10)])
        self.out = nn.Conv2d(28, 8, 1)

    def forward(self, x):
        return self.out(torch.cat([b(x) for b in self.branches], 1))


class Rotary(nn.Module):
    """A rotary embedding's halves joined and read only by pointwise ops."""

    def forward(self, x):
        half = x.shape[-1] // 2
        return x * 0.5 + torch.cat([-x[..., half:], x[..., :half]], -1) * 2.0


def compiled_report(model, x, **options):
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    with torch.no_grad():
        got = torch.compile(model, backend="nimble", options=options)(x)
        assert relative_error(got, model(x)) < 1e-5
    return nimble_rs.dynamo.reports()[before]


def calibrated(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return model.eval()


@pytest.fixture
def any_size(monkeypatch):
    # The tests' joins are small (concat.MIN_BYTES keeps those as Inductor lowers them).
    from nimble_rs.dynamo.passes import concat

    monkeypatch.setattr(concat, "MIN_BYTES", 0)


def test_a_join_is_written_in_place_by_default_and_as_inductor_lowers_it_when_off(any_size):
    x = torch.randn(2, 8, 10, 10)
    report = compiled_report(calibrated(Block()), x, inductor_config={"force_pointwise_cat": True})
    assert report["concat_in_place"] == {"in_place": 1}, report
    report = compiled_report(calibrated(Block()), x, concat_in_place=False, inductor_config={"force_pointwise_cat": True})
    assert "concat_in_place" not in report, report


def entered(monkeypatch, model, x, **options):
    """How many compiles of ``model`` the option's lowering was entered for (Inductor's FX graph
    cache is off for those), and the report."""
    from nimble_rs.dynamo.passes import concat

    seen = []
    original = concat.in_place
    monkeypatch.setattr(concat, "in_place", lambda counts: seen.append(counts) or original(counts))
    report = compiled_report(model, x, **options)
    return len(seen), report


def test_a_join_read_pointwise_leaves_the_compile_as_it_is(any_size, monkeypatch):
    # Nothing for the option to change: Inductor's lowering and its FX graph cache untouched.
    from torch._inductor import lowering

    times, report = entered(monkeypatch, Rotary().eval(), torch.randn(2, 5, 16), inductor_config={"force_pointwise_cat": True})
    assert times == 0 and "concat_in_place" not in report, report
    assert lowering.pointwise_cat.__module__ == "torch._inductor.lowering"
    # (The same hook is entered for a join it can change.)
    assert entered(monkeypatch, calibrated(Block()), torch.randn(2, 8, 10, 10), inductor_config={"force_pointwise_cat": True})[0] == 1


def test_a_dynamic_batch_is_sized_without_a_recompile(any_size):
    # The join's size is read from its shape's hint: no guard on the batch.
    model = calibrated(Block())
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble", dynamic=True, options={"inductor_config": {"force_pointwise_cat": True}})
    with torch.no_grad():
        for batch in (2, 3, 5):
            x = torch.randn(batch, 8, 10, 10)
            assert relative_error(fast(x), model(x)) < 1e-5
    assert [r.get("concat_in_place") for r in nimble_rs.dynamo.reports()[before:]] == [{"in_place": 1}]


def test_on_the_cpu_a_join_leaves_the_compile_as_it_is(any_size, monkeypatch):
    # Inductor lowers a CPU join in place itself: nothing to change, the FX graph cache kept.
    times, report = entered(monkeypatch, calibrated(Block()), torch.randn(2, 8, 10, 10))
    assert times == 0 and "concat_in_place" not in report, report


def test_a_training_graph_leaves_the_compile_as_it_is(any_size, monkeypatch):
    # Measured in inference only: a training forward and backward compile as Inductor chooses.
    from nimble_rs.dynamo.passes import concat

    seen = []
    original = concat.in_place
    monkeypatch.setattr(concat, "in_place", lambda counts: seen.append(counts) or original(counts))
    model = Block()
    torch._dynamo.reset()
    x = torch.randn(2, 8, 10, 10)
    torch.compile(model, backend="nimble", options={"inductor_config": {"force_pointwise_cat": True}})(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model(x).sum().backward()
    # (The convolutions' biases before a training BatchNorm have gradients of float noise.)
    got = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert seen == [] and relative_error(torch.cat([e.flatten() for e in expected]), got) < 1e-5


def test_a_small_join_leaves_the_compile_as_it_is():
    # A join of 2x28x10x10 floats (22 kB) is below concat.MIN_BYTES.
    report = compiled_report(calibrated(Block()), torch.randn(2, 8, 10, 10), inductor_config={"force_pointwise_cat": True})
    assert "concat_in_place" not in report, report


@pytest.mark.parametrize("model, shape, expected", [
    (calibrated(Block()), (2, 8, 10, 10), False),  # 22 kB
    (calibrated(Block()), (2, 8, 120, 120), True),  # 3.2 MB
    (Rotary().eval(), (2, 5, 16), False),
    (Rotary().eval(), (2, 5000, 128), False),  # 5.1 MB, read pointwise
])
def test_which_graphs_have_a_join_the_option_changes(model, shape, expected):
    from torch.fx.experimental.proxy_tensor import make_fx

    from nimble_rs.dynamo.passes import concat

    with torch.no_grad():
        gm = make_fx(model, pre_dispatch=False)(torch.randn(*shape))
    assert concat.joins_for_users(gm) is expected


def test_a_small_join_is_counted_where_a_large_one_is_written_in_place(monkeypatch):
    # Both joins reach Inductor's lowering (a graph with one large join); the small one keeps it.
    from nimble_rs.dynamo.passes import concat

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.small, self.large = Block(), Block()

        def forward(self, x, y):
            return self.small(x).sum() + self.large(y).sum()

    monkeypatch.setattr(concat, "MIN_BYTES", 2 * 28 * 10 * 10 * 4 + 1)
    model = calibrated(Two())
    x, y = torch.randn(2, 8, 10, 10), torch.randn(2, 8, 12, 12)
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    with torch.no_grad():
        got = torch.compile(model, backend="nimble", options={"inductor_config": {"force_pointwise_cat": True}})(x, y)
        assert relative_error(got, model(x, y)) < 1e-5
    assert nimble_rs.dynamo.reports()[before]["concat_in_place"] == {"in_place": 1, "small": 1}


def test_without_inductors_hooks_it_says_so_once_and_compiles_as_inductor_chooses(monkeypatch, any_size):
    from nimble_rs.dynamo.common import announce

    from nimble_rs.dynamo.passes import concat

    announce._WARNED.clear()
    monkeypatch.setattr(concat, "available", lambda: False)
    with pytest.warns(RuntimeWarning, match="option concat_in_place needs Inductor's cat lowering"):
        report = compiled_report(calibrated(Block()), torch.randn(2, 8, 10, 10), concat_in_place=True, inductor_config={"force_pointwise_cat": True})
    assert "concat_in_place" not in report, report


def allocations(model, x, **settings):
    """The buffers Inductor's program for ``model`` allocates, (shape, strides) each, compiled
    with ``concat.in_place`` and Inductor's ``settings``; its output checked against eager."""
    import inspect
    import re

    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    from nimble_rs.dynamo.passes import concat


    from nimble_rs.dynamo.program import kernels_plan

    sources = []

    def inner(gm, example_inputs, **kwargs):
        with concat.in_place({}):
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        sources.append(inspect.getsource(kernels_plan.inductor_module(compiled)))
        return compiled

    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False, force_pointwise_cat=True, **settings), torch.no_grad():
        got = torch.compile(model, backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))(x)
        assert relative_error(got, model(x)) < 1e-5
    return re.findall(r"= empty_strided_\w+\(\(([\d, ]+)\), \(([\d, ]+)\)", sources[0])


@pytest.mark.parametrize("layout_optimization", [True, False])
def test_the_join_is_laid_out_as_its_convolution_reads_it(layout_optimization):
    # Inductor lays convolutions out channels-last (layout_optimization): the join is written
    # channels-last, not contiguous and then copied for the convolution that reads it.
    found = allocations(calibrated(Block()), torch.randn(2, 8, 10, 10), layout_optimization=layout_optimization)
    joins = [strides for shape, strides in found if shape == "2, 28, 10, 10"]
    assert joins == (["2800, 1, 280, 28"] if layout_optimization else ["2800, 100, 10, 1"]), found


def test_the_lowering_is_restored_after_each_compile(any_size):
    from torch._inductor import lowering

    original = lowering.pointwise_cat
    compiled_report(calibrated(Block()), torch.randn(2, 8, 10, 10), concat_in_place=True, inductor_config={"force_pointwise_cat": True})
    assert lowering.pointwise_cat is original
