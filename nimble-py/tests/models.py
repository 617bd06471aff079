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


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))
