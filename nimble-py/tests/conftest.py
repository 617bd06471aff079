"""What the GPU test files share: skip without CUDA, or fail under NIMBLE_REQUIRE_GPU=1."""

import os

import pytest
import torch


def require_cuda() -> None:
    """Skips the test without a CUDA device; with NIMBLE_REQUIRE_GPU=1 fails it instead."""
    if not torch.cuda.is_available():
        if os.environ.get("NIMBLE_REQUIRE_GPU") == "1":
            pytest.fail("NIMBLE_REQUIRE_GPU=1, but torch sees no CUDA device")
        pytest.skip("no CUDA device (NIMBLE_REQUIRE_GPU=1 makes this a failure)")
