"""Nimble-rs for PyTorch: ahead-of-time scheduled, multi-stream CUDA graphs.

    import torch, torchvision, nimble_rs
    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False).cuda().eval()
    x = torch.randn(1, 3, 299, 299, device="cuda")
    fast = nimble_rs.Nimble(model)
    report = fast.prepare(x)          # trace, schedule on streams, capture one CUDA graph
    y = fast(x)                       # replay

Or as a ``torch.compile`` backend, Inductor's fused kernels on Nimble's streams::

    fast = torch.compile(model, backend="nimble")   # or backend=nimble_rs.backend

The scheduler is usable on its own, with task graphs as dicts: ``algorithms()``,
``assign(graph, "nimble")``, ``simulate(graph, "nimble", "graph")``.
"""

# The scheduling extension links no libtorch, so this works with any torch; nimble_rs.Nimble
# takes its engine's path with torch 2.11.0 and the backend's with any other (nimble.py).
from ._version import NEWEST_TESTED_TORCH, REQUIRED_TORCH

from . import errors  # noqa: E402
from .errors import (  # noqa: E402
    DynamicModelError,
    HostSyncError,
    InductorDriftWarning,
    NimbleError,
    NimbleInputError,
    NoCudaError,
    NotPreparedError,
)
from .dynamo import backend  # noqa: E402
from .nimble import Nimble  # noqa: E402
from .scheduling import algorithms, assign, simulate  # noqa: E402

__all__ = [
    "Nimble",
    "backend",
    "algorithms",
    "assign",
    "simulate",
    "errors",
    "NimbleError",
    "NimbleInputError",
    "HostSyncError",
    "DynamicModelError",
    "NoCudaError",
    "NotPreparedError",
    "InductorDriftWarning",
    "REQUIRED_TORCH",
    "NEWEST_TESTED_TORCH",
]
