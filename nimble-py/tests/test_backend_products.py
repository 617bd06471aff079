"""Option ``transpose_products``'s rewrite (``nimble_rs.dynamo.passes.products``) on the CPU: which
matrix products become the transposed product, its arithmetic against eager, and what is left
as it was. The backend measures and applies it on a GPU only (test_backend_gpu_products.py runs
it there)."""

import pytest
import torch
from torch import nn

from nimble_rs.dynamo.passes import products
from models import relative_error, rewritten_through_inductor

aten = torch.ops.aten


def transposed_through_inductor(model, x, pays):
    """The model compiled by Inductor with the rewrite applied to its inference graph, its
    output on ``x``, the rewrite's counts and the graph's ops after it."""
    return rewritten_through_inductor(model, x, lambda gm: products.transpose_products(gm, pays))


def asked(answer):
    """A ``pays`` answering ``answer``, and the list of what it was asked: (x's shape, w's
    shape, whether a bias)."""
    seen = []

    def pays(x, w, bias):
        seen.append((tuple(x.shape), tuple(w.shape), bias is not None))
        return answer

    return pays, seen


class Products(nn.Module):
    """A classifier's products (with and without a bias) and ones the rewrite leaves: more
    rows than columns, and a bias per output element rather than per column."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(64, 100)
        self.head = nn.Linear(100, 300, bias=False)
        self.tall = nn.Linear(300, 8)
        self.full_bias = nn.Parameter(torch.randn(4, 8))
        self.square = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        y = self.head(torch.relu(self.hidden(x.flatten(1))))
        z = self.tall(y)
        return y, torch.addmm(self.full_bias, z, self.square)


def test_products_of_few_rows_are_transposed_and_compute_what_eager_does():
    model = Products().eval()
    x = torch.randn(4, 4, 16)
    pays, seen = asked(True)
    got, counts, ops = transposed_through_inductor(model, x, pays)
    with torch.no_grad():
        expected = model(x)
    # The hidden layer (a bias), the head (none) and the layer into 8 columns (still more than
    # its 4 rows); not the product whose bias has one value per output element.
    assert counts == {"transposed": 3, "slower_transposed": 0}, counts
    assert seen == [((4, 64), (64, 100), True), ((4, 100), (100, 300), False), ((4, 300), (300, 8), True)], seen
    assert ops.count(aten.addmm.default) == 1 and ops.count(aten.mm.default) == 3, ops
    for g, e in zip(got, expected):
        assert g.is_contiguous() and g.shape == e.shape
        assert relative_error(g, e) < 1e-5


def test_a_product_measured_slower_transposed_is_left_as_it_is():
    model = Products().eval()
    x = torch.randn(4, 4, 16)
    pays, seen = asked(False)
    got, counts, ops = transposed_through_inductor(model, x, pays)
    assert counts == {"transposed": 0, "slower_transposed": 3} and len(seen) == 3, counts
    assert ops.count(aten.addmm.default) == 3 and ops.count(aten.mm.default) == 1, ops
    with torch.no_grad():
        assert all(relative_error(g, e) < 1e-5 for g, e in zip(got, model(x)))


@pytest.mark.parametrize("rows", [300, products.MAX_ROWS + 1])
def test_products_of_many_rows_are_not_candidates(rows):
    # 300 rows into 100 columns (more rows than columns), and more rows than MAX_ROWS into 300.
    model = nn.Linear(64, 100 if rows == 300 else 300).eval()
    pays, seen = asked(True)
    got, counts, _ = transposed_through_inductor(model, torch.randn(rows, 64), pays)
    assert counts == {"transposed": 0, "slower_transposed": 0} and seen == [], (counts, seen)


class Broadcast(nn.Module):
    """A product whose left operand is one row broadcast to four: not a candidate."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 300))

    def forward(self, x):
        return torch.mm(x[:1].expand(4, 16), self.w) + x.sum()


def test_a_broadcast_operand_is_not_a_candidate():
    model, x = Broadcast().eval(), torch.randn(4, 16)
    pays, seen = asked(True)
    got, counts, _ = transposed_through_inductor(model, x, pays)
    with torch.no_grad():
        assert relative_error(got, model(x)) < 1e-5
    assert seen == [] and counts == {"transposed": 0, "slower_transposed": 0}, (seen, counts)


def test_the_backend_transposes_on_a_gpu_only():
    # On the CPU the option changes nothing (cuBLAS's kernels are what it measures) and adds no
    # report key.
    import nimble_rs

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 100)).eval()
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    x = torch.randn(2, 64)
    with torch.no_grad():
        got = torch.compile(model, backend="nimble", options={"transpose_products": True})(x)
        assert relative_error(got, model(x)) < 1e-5
    assert "transposed_products" not in nimble_rs.dynamo.reports()[before]


def rewritten_saying(monkeypatch, name, broken):
    """The classifier through ``products.rewrite`` with ``products.NAME`` replaced by
    ``broken``: its counts, ops and the messages said, its output checked against eager."""
    import warnings

    from nimble_rs.dynamo.common import announce

    announce._WARNED.clear()
    monkeypatch.setattr(products, name, broken)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 100)).eval()
    x = torch.randn(2, 64)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got, reports, ops = rewritten_through_inductor(model, x, products.rewrite)
    with torch.no_grad():
        assert relative_error(got, model(x)) < 1e-5
    return reports, ops, [str(w.message) for w in said if "nimble backend" in str(w.message)]


def test_a_failing_measurement_leaves_that_product_and_says_so(monkeypatch):
    def broken(x, w, bias):
        raise RuntimeError("CUBLAS_STATUS_ALLOC_FAILED")

    reports, _, said = rewritten_saying(monkeypatch, "pays_on_gpu", broken)
    assert reports == {"transposed": 0, "slower_transposed": 0, "unmeasured": 1}, reports
    assert said == ["nimble backend: the product of [2, 64] by [64, 100] could not be measured transposed (RuntimeError: CUBLAS_STATUS_ALLOC_FAILED); it runs as Inductor compiles it"], said


def test_a_pass_that_fails_leaves_the_graph_and_says_so(monkeypatch):
    def broken(gm, pays):
        raise RuntimeError("a graph the pass does not read")

    reports, ops, said = rewritten_saying(monkeypatch, "transpose_products", broken)
    assert reports == {"failed": "RuntimeError: a graph the pass does not read"} and aten.addmm.default in ops, reports
    assert said == ["nimble backend: option transpose_products stopped (RuntimeError: a graph the pass does not read); the products it had not reached run as Inductor compiles them"], said
