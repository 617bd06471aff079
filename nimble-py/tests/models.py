"""Small modules the tests run through nimble_rs."""

import torch
from torch import nn


class Branches(nn.Module):
    """Two independent convolution branches (Inception-style), so the task graph has width 2
    and Nimble gives them streams of their own; BatchNorm for the rewrites to fold."""

    def __init__(self):
        super().__init__()
        self.left = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.right = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return self.bn(self.left(x)).relu() + self.right(x).sigmoid()


class Structured(nn.Module):
    """Returns a dict and a list, as transformers' models nest their outputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        y = self.fc(x)
        return {"relu": y.relu(), "tanh": y.tanh()}, [y * 2.0, x]


class TwoInputs(nn.Module):
    """Token ids (int64) and float features."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)

    def forward(self, ids, features):
        return self.embed(ids) + features


class Tied(nn.Module):
    """Two layers sharing one weight matrix (as language models tie embeddings and heads)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 6, bias=False)
        self.second = nn.Linear(6, 6, bias=False)
        self.second.weight = self.first.weight

    def forward(self, x):
        return self.second(self.first(x).relu())


class HostRead(nn.Module):
    """Reads a value on the host in its forward (a real host synchronization on CUDA)."""

    def forward(self, x):
        return x * float(x.sum().item())


class Repeats(nn.Module):
    """Repeats rows of p by a count read from q's shape (torchvision's MViT-v1-B builds its
    positional encoding so), or by one computed from the input's data; by the function or the
    tensor's method."""

    def __init__(self, from_data=False, method=False):
        super().__init__()
        self.from_data, self.method = from_data, method
        self.p, self.q = nn.Parameter(torch.randn(4, 8)), nn.Parameter(torch.randn(3, 8))

    def forward(self, x):
        if self.from_data:
            count = (x[:, 0] > 0).sum() // 4 + 1
        else:
            rows, columns = self.q.shape
            count = rows * columns // 8
        repeated = self.p.repeat_interleave(count, dim=0) if self.method else torch.repeat_interleave(self.p, count, dim=0)
        return repeated.sum(0) + x.sum(0)


class Inception(nn.Module):
    """Four branches of different depth joined by a concatenation, twice."""

    def __init__(self, channels=4):
        super().__init__()
        c = channels
        self.b1 = nn.Conv2d(c, c, 1)
        self.b2 = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
        self.b3 = nn.Sequential(nn.Conv2d(c, c, 1), nn.Tanh(), nn.Conv2d(c, c, 5, padding=2), nn.Sigmoid())
        self.pool = nn.MaxPool2d(3, 1, 1)
        self.mix = nn.Conv2d(4 * c, c, 1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        for _ in range(2):
            x = self.bn(self.mix(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.pool(x)], 1))).relu()
        return x


class Attention(nn.Module):
    """One attention block called with keyword arguments and an attention mask, as transformers'
    models are (``model(**inputs)``)."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm = nn.LayerNorm(d)

    def forward(self, hidden_states, attention_mask=None):
        b, t, d = hidden_states.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q(hidden_states)), split(self.k(hidden_states)), split(self.v(hidden_states))
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return {"last_hidden_state": self.norm(hidden_states + self.o(y.transpose(1, 2).reshape(b, t, d)))}


class Branchy(nn.Module):
    """A data-dependent Python branch: Dynamo breaks the graph at the condition."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        y = self.a(x)
        if y.sum() > 0:
            return self.b(y).relu()
        return self.b(-y).sigmoid()


class WeightNormed(nn.Module):
    """Branches of weight-normalised linears: each weight is computed from parameters alone
    (the kernels option hoist_weight_kernels runs outside the program), and Inductor gives the
    next branch's weight the last one's buffer."""

    def __init__(self, features=16, branches=3):
        super().__init__()
        self.v = nn.ParameterList([nn.Parameter(torch.randn(features, features)) for _ in range(branches)])
        self.g = nn.ParameterList([nn.Parameter(torch.rand(features, 1) + 0.5) for _ in range(branches)])

    def forward(self, x):
        return torch.cat([torch.relu(x @ (v * (g / v.norm(dim=1, keepdim=True))).t()) for v, g in zip(self.v, self.g)], 1)


class Decaying(nn.Module):
    """A weight scaled by a buffer the forward then changes in place: the scaled weight is
    computed from parameters and buffers alone, but not from unchanging ones."""

    def __init__(self, features=16):
        super().__init__()
        self.w = nn.Parameter(torch.randn(features, features))
        self.u = nn.Parameter(torch.randn(features, features))
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x):
        y = torch.cat([x @ (self.w * self.scale).t(), x @ (self.u * 2).t()], 1)
        self.scale.mul_(0.5)
        return y


class Counter(nn.Module):
    """Mutates a buffer in place and reads it again: AOTAutograd writes the input back with
    ``copy_``, which the task graph must order after every read."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(4))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        self.seen.add_(x.sum(0))
        return self.fc(x) * self.seen


class ScalesItsInput(nn.Module):
    """Writes the user's input in place (through a view) before reading it: AOTAutograd copies the
    new value back into the input at the graph's end."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x[:, :2].mul_(2.0)
        return self.fc(x)


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


def train_beside_eager(eager, fast, fast_model, make_input, steps=3, state_rtol=1e-5):
    """Steps ``eager`` and ``fast`` (compiled from ``fast_model``, a copy of it) by SGD with
    momentum on the same inputs: after each step every gradient matches eager's (an absolute
    floor for zero gradients computed as rounding noise, such as a convolution's bias before
    BatchNorm), and at the end the state (parameters, BatchNorm statistics)."""
    output = lambda y: y["last_hidden_state"] if isinstance(y, dict) else y
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, fast_model)]
    for _ in range(steps):
        x = make_input()
        for run, optimizer in zip((eager, fast), optimizers):
            optimizer.zero_grad()
            output(run(x)).square().mean().backward()
            optimizer.step()
        for a, b in zip(eager.parameters(), fast_model.parameters()):
            assert torch.allclose(b.grad, a.grad, rtol=1e-4, atol=1e-6), (a.grad, b.grad)
    for a, b in zip(eager.state_dict().values(), fast_model.state_dict().values()):
        assert torch.allclose(b.float(), a.float(), rtol=state_rtol, atol=1e-6)


def inductor_programs(model, *inputs, train=False, within=None):
    """Inductor's compiled graphs for ``model`` (through ``compile_fx``, as the backend gets
    them), each with its static input indices; with ``train``, a forward and a backward (of a
    loss made from the output). ``within``: a context the compile runs in."""
    import contextlib
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    found = []

    def inner(gm, example_inputs, **kwargs):
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        found.append((compiled, kwargs.get("static_input_idxs") or []))
        return compiled

    def backend(gm, example_inputs):
        with torch._functorch.config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs, inner_compile=inner)

    torch._dynamo.reset()
    with within if within is not None else contextlib.nullcontext():
        if train:
            out = torch.compile(model, backend=backend)(*inputs)
            out.square().mean().backward()
            return found
        with torch.no_grad():
            torch.compile(model, backend=backend)(*inputs)
    return found


def rewritten_through_inductor(model, x, rewrite):
    """The model compiled by Inductor with ``rewrite`` (a pass over a graph, returning its
    counts) applied to its inference graph before Inductor compiles it (caches off: a cached
    program would skip the rewrite); its output on ``x``, the rewrite's counts and the graph's
    ops after it."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    counts, ops = [], []

    def inner(gm, example_inputs, **kwargs):
        counts.append(rewrite(gm))
        ops.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return compile_fx_inner(gm, example_inputs, **kwargs)

    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False), torch.no_grad():
        got = torch.compile(model, backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))(x)
    return got, counts[0], ops


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))
