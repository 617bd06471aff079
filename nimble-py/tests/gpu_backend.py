"""What the backend's GPU test files share: the fixture that skips them without CUDA (fails them
with NIMBLE_REQUIRE_GPU=1) and sets each test up alone, TF32 off, and the helpers that compile a
model and read the last report."""

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.common import announce
from nimble_rs.dynamo.runtime import compiled as compiled_graphs
from conftest import require_cuda

# TF32 off for eager and for Inductor's kernels: the graph must then compute what eager does
# up to reassociation inside fused kernels.
TOLERANCE = 1e-4


@pytest.fixture(autouse=True)
def gpu():
    require_cuda()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    torch._dynamo.reset()
    # Each test on its own: warnings said once, and shapes counted (with the code Dynamo
    # compiled, which the reset above starts again; by the ops for graphs given by hand).
    announce._WARNED.clear()
    compiled_graphs._SHAPES.clear()


def compiled(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="nimble", options=options)


def last_report(kind="inference"):
    return [r for r in nimble_rs.dynamo.reports() if r["graph"] == kind][-1]
