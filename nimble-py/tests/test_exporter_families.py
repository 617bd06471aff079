"""The TorchScript exporter's transformers families (experiments/python/export_torchscript.py
--set transformers-families): decoder-only LMs, audio and speech encoders, vision towers and
encoder-decoders with decoder inputs, each manifest entry with its family and the `--input`
specifications `nimble-bench coverage` passes on; exported and run on the CPU."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch

EXPORTER = Path(__file__).resolve().parents[2] / "experiments" / "python" / "export_torchscript.py"


def exporter():
    loaded = importlib.util.spec_from_file_location("export_torchscript", EXPORTER)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def tensor_of(text):
    """A random tensor for an `--input` specification: SHAPE:DTYPE[:LOW:HIGH]."""
    parts = text.split(":")
    shape = [int(d) for d in parts[0].split("x")]
    if parts[1] == "int64":
        return torch.randint(int(parts[2]), int(parts[3]), shape)
    return torch.randn(shape)


def test_every_family_the_issue_names_has_models():
    families = {}
    for name, family, *_ in exporter().FAMILIES:
        families.setdefault(family, []).append(name)
    assert set(families) == {"decoder", "audio", "speech", "vision-tower", "encoder-decoder"}, families
    assert all(len(names) >= 1 for names in families.values()) and len(families["decoder"]) >= 3, families


def test_a_speech_encoder_and_an_encoder_decoder_export_with_their_family_and_inputs(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXPORTER), str(tmp_path), "--set", "transformers-families", "--only", "whisper-encoder,whisper", "--device", "cpu"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    entries = {m["name"]: m for m in manifest["models"]}
    assert set(entries) == {"whisper-encoder", "whisper"}, entries
    assert entries["whisper-encoder"]["family"] == "speech" and entries["whisper"]["family"] == "encoder-decoder"
    assert len(entries["whisper-encoder"]["inputs"]) == 1 and len(entries["whisper"]["inputs"]) == 2, entries
    for entry in entries.values():
        assert "error" not in entry, entry
        module = torch.jit.load(str(tmp_path / entry["file"]))
        inputs = [tensor_of(text) for text in entry["inputs"]]
        with torch.no_grad():
            first, second = module(*inputs), module(*inputs)
        assert first.dim() == 3 and torch.isfinite(first).all() and torch.equal(first, second), entry
