"""The torch versions nimble_rs is tested with, stated once.

- ``REQUIRED_TORCH``: the torch the libtorch engine (`nimble_rs_engine`, behind
  `nimble_rs.Nimble`'s own path) is built for. It links the torch of the Python it runs in, so any
  other version would mix two libtorch ABIs: with another torch, `Nimble` runs the model through
  the backend instead (`nimble.py`).
- ``NEWEST_TESTED_TORCH``: the newest torch release CI runs the backend's tests on
  (`scripts/setup-libtorch.sh` reads it from this line). Moving to a new release is this one
  line, plus whatever the release breaks.

Every torch from ``REQUIRED_TORCH`` to ``NEWEST_TESTED_TORCH`` is supported by the backend; a newer
one is warned about once, at the first compile, and not refused.
"""

import warnings

REQUIRED_TORCH = "2.11.0"
NEWEST_TESTED_TORCH = "2.15.0"


def release(version: str) -> tuple:
    """``"2.15.0+cu132"`` as ``(2, 15, 0)``: the release, without a local build suffix or a
    pre-release tag (``2.16.0a0`` is 2.16.0)."""
    numbers = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        numbers.append(int(digits or 0))
    return tuple(numbers + [0] * (3 - len(numbers)))


def engine_mismatch(found: str):
    """Why the engine cannot run in a Python with torch ``found`` (``torch.__version__``), or
    None where it can (``REQUIRED_TORCH``; any local build suffix, such as ``+cu130``, is
    allowed)."""
    if found.split("+")[0] == REQUIRED_TORCH:
        return None
    return f"nimble_rs.Nimble's engine was built for torch {REQUIRED_TORCH}, but this Python has torch {found}"


def check_torch_version(found: str) -> None:
    """Raises ImportError unless the engine can run with torch ``found`` (``engine_mismatch``)."""
    reason = engine_mismatch(found)
    if reason is not None:
        raise ImportError(
            f"{reason}; install torch=={REQUIRED_TORCH} (or rebuild nimble-rs-engine against torch {found}); "
            f"torch.compile(model, backend=\"nimble\") works with this torch"
        )


_warned_newer = False


def warn_if_newer(found: str) -> bool:
    """Warns once per process where torch ``found`` is newer than ``NEWEST_TESTED_TORCH``: the
    backend reads what Inductor generates, which changes between releases. Returns whether it is
    newer (refused never: what the backend then does not understand is announced as it meets it)."""
    global _warned_newer
    newer = release(found) > release(NEWEST_TESTED_TORCH)
    if newer and not _warned_newer:
        _warned_newer = True
        warnings.warn(
            f"nimble backend: torch {found} is newer than the newest torch nimble_rs is tested with "
            f"({NEWEST_TESTED_TORCH}); any part of Inductor's output it does not understand is announced, "
            "and that graph runs as Inductor compiled it",
            RuntimeWarning,
            stacklevel=3,
        )
    return newer
