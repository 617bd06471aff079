"""The torch versions nimble_rs supports, stated once (``nimble_rs._version``) and agreed on by the
package's metadata, the set-up script and the README; a newer torch is warned about, not refused."""

import re
import warnings
from pathlib import Path

import pytest

import nimble_rs
from nimble_rs import _version
from nimble_rs._version import NEWEST_TESTED_TORCH, REQUIRED_TORCH, check_torch_version, engine_mismatch, release

REPO = Path(__file__).resolve().parents[2]


def test_the_supported_range_is_stated_once_and_everything_agrees():
    oldest = ".".join(REQUIRED_TORCH.split(".")[:2])
    package = (REPO / "nimble-py" / "pyproject.toml").read_text()
    assert f'dependencies = ["torch>={oldest}"]' in package, "nimble-py/pyproject.toml's torch range"
    engine = (REPO / "nimble-py" / "engine" / "pyproject.toml").read_text()
    assert f'"torch=={REQUIRED_TORCH}"' in engine, "the engine's pin"
    setup = (REPO / "scripts" / "setup-libtorch.sh").read_text()
    assert "NEWEST_TESTED_TORCH" in setup and f"torch=={REQUIRED_TORCH}" in setup
    assert not re.search(r"torch==2\.1[2-9]", setup), "the newest version is named in _version.py only"
    readme = (REPO / "README.md").read_text()
    assert f"torch {REQUIRED_TORCH} to {NEWEST_TESTED_TORCH}" in readme, "README's supported range"
    assert release(REQUIRED_TORCH) < release(NEWEST_TESTED_TORCH)
    assert nimble_rs.NEWEST_TESTED_TORCH == NEWEST_TESTED_TORCH


@pytest.mark.parametrize(
    "version, expected",
    [("2.15.0+cu132", (2, 15, 0)), ("2.16.0a0+git1234", (2, 16, 0)), ("2.11.0", (2, 11, 0)), ("3.0", (3, 0, 0)), ("2.13.1rc2", (2, 13, 1))],
)
def test_a_version_reads_as_its_release(version, expected):
    assert release(version) == expected


def test_a_newer_torch_is_warned_about_once_and_not_refused(monkeypatch):
    monkeypatch.setattr(_version, "_warned_newer", False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert not _version.warn_if_newer(NEWEST_TESTED_TORCH + "+cu132")
        assert not _version.warn_if_newer(REQUIRED_TORCH)
        assert not seen
        newer = f"{release(NEWEST_TESTED_TORCH)[0]}.{release(NEWEST_TESTED_TORCH)[1] + 1}.0"
        assert _version.warn_if_newer(newer) and _version.warn_if_newer(newer)
    assert len(seen) == 1, [str(w.message) for w in seen]
    assert f"torch {newer} is newer than the newest torch nimble_rs is tested with ({NEWEST_TESTED_TORCH})" in str(seen[0].message)


def test_the_engine_runs_with_its_own_torch_only():
    assert engine_mismatch("2.11.0+cu130") is None and engine_mismatch("2.11.0") is None
    check_torch_version("2.11.0+cu130")
    with pytest.raises(ImportError, match=r"built for torch 2\.11\.0, but this Python has torch 2\.10\.1"):
        check_torch_version("2.10.1+cpu")
    assert "this Python has torch 2.15.0" in engine_mismatch("2.15.0")

