"""Option ``merge_convolutions`` on the CPU: which sibling convolutions become one, outputs
against eager, weights read on every call, and training graphs left as they are."""

import copy

import torch
from torch import nn

import nimble_rs
from models import Inception, relative_error

torch.manual_seed(0)


def compiled_report(model, *inputs, **options):
    """The model's output through the backend with ``options`` and its first graph's report."""
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    with torch.no_grad():
        got = torch.compile(model, backend="nimble", options=options)(*inputs)
    return got, nimble_rs.dynamo.reports()[before]


def test_sibling_convolutions_become_one_and_match_eager():
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    plain, plain_report = compiled_report(model, x)
    got, report = compiled_report(model, x, merge_convolutions=True)
    with torch.no_grad():
        expected = model(x)
    # Each of the two blocks: its three 1x1 branch convolutions, one convolution now.
    assert report["merged_convolutions"] == [3, 3], report
    assert "merged_convolutions" not in plain_report
    assert relative_error(got, expected) < 1e-5 and relative_error(plain, expected) < 1e-5


class Siblings(nn.Module):
    """Convolutions on one input that may and may not be merged."""

    def __init__(self, c=6):
        super().__init__()
        self.a = nn.Conv2d(c, 4, 3, padding=1)
        self.b = nn.Conv2d(c, 5, 3, padding=1)
        self.strided = nn.Conv2d(c, 4, 3, padding=1, stride=2)  # another stride
        self.wide = nn.Conv2d(c, 4, 5, padding=2)  # another kernel size
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.depthwise2 = nn.Conv2d(c, c, 3, padding=1, groups=c)  # groups: never merged
        self.plain = nn.Conv2d(c, 3, 3, padding=1, bias=False)  # no bias: not with a, b
        self.plain2 = nn.Conv2d(c, 2, 3, padding=1, bias=False)
        self.up = nn.ConvTranspose2d(c, 2, 3, padding=1)
        self.out = nn.Conv2d(c, 4, 3, padding=1)  # a graph output as it is: kept

    def forward(self, x):
        y = x.relu()
        inner = torch.cat([self.a(y), self.b(y), self.wide(y), self.depthwise(y), self.depthwise2(y), self.plain(y), self.plain2(y), self.up(y)], 1)
        return inner.sigmoid(), self.strided(y).tanh(), self.out(y)


def test_only_convolutions_alike_on_one_input_are_merged():
    model, x = Siblings().eval(), torch.randn(2, 6, 9, 9)
    got, report = compiled_report(model, x, merge_convolutions=True)
    # a with b, plain with plain2; none of the others.
    assert sorted(report["merged_convolutions"]) == [2, 2], report
    with torch.no_grad():
        expected = model(x)
    for g, e in zip(got, expected):
        assert relative_error(g, e) < 1e-5


def test_merged_weights_are_read_on_every_call():
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="nimble", options={"merge_convolutions": True})
    with torch.no_grad():
        fast(x)
        # A weight changed in place after compiling: the next call uses it, as eager does.
        model.b2[0].weight.mul_(-2.0)
        model.b1.bias.add_(1.0)
        assert relative_error(fast(x), model(x)) < 1e-5


def test_training_graphs_are_not_merged_and_train_like_eager():
    from models import train_beside_eager

    eager = Inception(channels=8).train()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble", options={"merge_convolutions": True})
    train_beside_eager(eager, fast, model, lambda: torch.randn(2, 8, 10, 10), steps=2)
    reports = nimble_rs.dynamo.reports()[before:]
    assert {r["graph"] for r in reports} == {"forward", "backward"} and not any("merged_convolutions" in r for r in reports), reports


def test_a_dynamic_batch_merges_once_and_matches_eager_at_every_size():
    model = Inception(channels=8).eval()
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble", options={"merge_convolutions": True}, dynamic=True)
    with torch.no_grad():
        for batch in (2, 3, 5):
            x = torch.randn(batch, 8, 12, 12)
            assert relative_error(fast(x), model(x)) < 1e-5
    assert [r.get("merged_convolutions") for r in nimble_rs.dynamo.reports()[before:]] == [[3, 3]]
