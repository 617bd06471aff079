"""What the test files share: skip GPU tests without CUDA (or fail under NIMBLE_REQUIRE_GPU=1),
and the engine's tests (marked ``engine``) where the libtorch engine cannot run: on a torch other
than the one it is built for (CI runs the rest on the newest tested torch too), or without it
installed. Under NIMBLE_REQUIRE_ENGINE=1 (the engine's own venv in CI) they fail instead."""

import importlib.util
import os

import pytest
import torch


def require_cuda() -> None:
    """Skips the test without a CUDA device; with NIMBLE_REQUIRE_GPU=1 fails it instead."""
    if not torch.cuda.is_available():
        if os.environ.get("NIMBLE_REQUIRE_GPU") == "1":
            pytest.fail("NIMBLE_REQUIRE_GPU=1, but torch sees no CUDA device")
        pytest.skip("no CUDA device (NIMBLE_REQUIRE_GPU=1 makes this a failure)")


def engine_missing():
    """Why nimble_rs.Nimble's libtorch engine cannot run here, or None."""
    from nimble_rs._version import engine_mismatch

    reason = engine_mismatch(torch.__version__)
    if reason is None and importlib.util.find_spec("nimble_rs_engine") is None:
        reason = "nimble-rs-engine is not installed"
    return reason


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: needs nimble_rs.Nimble's libtorch engine (torch 2.11.0)")


def pytest_collection_modifyitems(config, items):
    engine_tests = [item for item in items if item.get_closest_marker("engine")]
    reason = engine_missing() if engine_tests else None
    if reason is None:
        return
    if os.environ.get("NIMBLE_REQUIRE_ENGINE") == "1":
        raise pytest.UsageError(f"NIMBLE_REQUIRE_ENGINE=1, but {reason}")
    print(f"\nconftest: {len(engine_tests)} tests of the engine skipped: {reason}")
    skip = pytest.mark.skip(reason=f"{reason} (NIMBLE_REQUIRE_ENGINE=1 makes this a failure)")
    for item in engine_tests:
        item.add_marker(skip)


def triton_of_the_engines_torch():
    """A mark for tests that hook Triton's compile cache (the depthwise kernels compiled ahead):
    checked with the Triton torch 2.11.0 ships (3.6). With a newer torch's Triton (3.9 with
    2.15) the launches' cache keys miss the variants compiled ahead: not ported yet, so these
    skip there, saying so. (The kernels themselves run in either Triton's interpreter.)"""
    from nimble_rs._version import REQUIRED_TORCH, release

    found = torch.__version__
    return pytest.mark.skipif(
        release(found) != release(REQUIRED_TORCH),
        reason=f"our Triton kernels are checked with torch {REQUIRED_TORCH}'s Triton; torch {found}'s is not supported yet",
    )
