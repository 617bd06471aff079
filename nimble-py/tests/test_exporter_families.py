"""The TorchScript exporter's families beyond classification (experiments/python/export_torchscript.py
--set transformers-families: decoder-only LMs, audio and speech encoders, vision towers and
encoder-decoders with decoder inputs; --set torchvision-families: segmentation, video, optical
flow and detection), each manifest entry with its family and the `--input` specifications
`nimble-bench coverage` passes on; exported and run on the CPU."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# The exporter writes TorchScript files for the engine and the CLI, both of torch 2.11.0.
pytestmark = pytest.mark.engine

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


def exported(directory, which, names):
    """Runs the exporter on the CPU for ``names`` of set ``which``; its manifest's entries by name."""
    done = subprocess.run(
        [sys.executable, str(EXPORTER), str(directory), "--set", which, "--only", ",".join(names), "--device", "cpu"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((directory / "manifest.json").read_text())
    return {m["name"]: m for m in manifest["models"]}


def run_twice(directory, entry):
    """The exported model run twice on inputs made from its manifest's specifications: its
    outputs (a tuple), finite and the same both times."""
    assert "error" not in entry, entry
    module = torch.jit.load(str(directory / entry["file"]))
    inputs = [tensor_of(text) for text in entry["inputs"]]
    with torch.no_grad():
        first, second = module(*inputs), module(*inputs)
    first, second = (first, second) if isinstance(first, tuple) else ((first,), (second,))
    assert all(torch.isfinite(a).all() and torch.equal(a, b) for a, b in zip(first, second)), entry["name"]
    return first


def test_every_family_the_issue_names_has_models():
    families = {}
    for name, family, *_ in exporter().FAMILIES:
        families.setdefault(family, []).append(name)
    assert set(families) == {"decoder", "audio", "speech", "vision-tower", "encoder-decoder"}, families
    assert all(len(names) >= 1 for names in families.values()) and len(families["decoder"]) >= 3, families


def test_a_speech_encoder_and_an_encoder_decoder_export_with_their_family_and_inputs(tmp_path):
    entries = exported(tmp_path, "transformers-families", ["whisper-encoder", "whisper"])
    assert set(entries) == {"whisper-encoder", "whisper"}, entries
    assert entries["whisper-encoder"]["family"] == "speech" and entries["whisper"]["family"] == "encoder-decoder"
    assert len(entries["whisper-encoder"]["inputs"]) == 1 and len(entries["whisper"]["inputs"]) == 2, entries
    for entry in entries.values():
        first, = run_twice(tmp_path, entry)
        assert first.dim() == 3, entry


def test_torchvision_families_are_listed_from_torchvision_itself():
    import torchvision

    families = exporter().TORCHVISION_FAMILIES
    assert set(families) == {"segmentation", "video", "optical-flow", "detection"}, families
    for family, module in families.items():
        assert torchvision.models.list_models(module=getattr(torchvision.models, module)), family


def test_one_model_of_each_torchvision_family_exports_and_runs_from_its_manifest(tmp_path):
    # The video model is MViT-v2-S, the one whose forward builds index tensors on the host.
    names = {"lraspp_mobilenet_v3_large": "segmentation", "mvit_v2_s": "video", "raft_small": "optical-flow", "ssdlite320_mobilenet_v3_large": "detection"}
    entries = exported(tmp_path, "torchvision-families", list(names))
    assert {name: entry.get("family") for name, entry in entries.items()} == names, entries
    assert entries["mvit_v2_s"]["inputs"] == ["1x3x16x224x224:float32"], entries["mvit_v2_s"]
    assert len(entries["raft_small"]["inputs"]) == 2, entries["raft_small"]
    outputs = {name: run_twice(tmp_path, entry) for name, entry in entries.items()}
    boxes, scores, labels = outputs["ssdlite320_mobilenet_v3_large"]
    assert boxes.shape[1:] == (4,) and scores.shape == labels.shape


def test_mask_rcnn_pastes_its_masks_as_torchvision_does():
    # torchvision's traced mask pasting makes tensors on the CPU (on a GPU the export failed); the
    # exporter's own loop must paste exactly as torchvision's eager postprocessing does: boxes
    # inside, across and outside the image, and one of width and height 1.
    from torchvision.models.detection.roi_heads import paste_masks_in_image

    torch.manual_seed(0)
    masks = torch.rand(5, 1, 28, 28)
    boxes = torch.tensor([[10.0, 12.0, 60.0, 40.0], [-20.0, -5.0, 30.0, 90.0], [70.0, 50.0, 140.0, 130.0], [33.0, 33.0, 33.4, 33.2], [200.0, 200.0, 260.0, 240.0]])
    expected = paste_masks_in_image(masks, boxes, (100, 120))
    from torchvision.models.detection import roi_heads

    torchvisions = roi_heads._onnx_paste_masks_in_image_loop
    with exporter().masks_pasted_on_their_device():
        assert roi_heads._onnx_paste_masks_in_image_loop is not torchvisions
        with torch.no_grad():
            traced = torch.jit.trace(lambda m, b: paste_masks_in_image(m, b, (100, 120)), (masks, boxes), check_trace=False)
    assert roi_heads._onnx_paste_masks_in_image_loop is torchvisions
    assert torch.equal(traced(masks, boxes), expected)
    moved = boxes + torch.tensor([5.0, -3.0, 5.0, -3.0])
    assert torch.equal(traced(masks, moved), paste_masks_in_image(masks, moved, (100, 120))), "the trace must follow the boxes"


def test_mask_rcnn_exports_on_the_cpu_with_its_boxes(tmp_path):
    entries = exported(tmp_path, "torchvision-families", ["maskrcnn_resnet50_fpn"])
    boxes, scores, labels = run_twice(tmp_path, entries["maskrcnn_resnet50_fpn"])
    assert entries["maskrcnn_resnet50_fpn"]["family"] == "detection"
    assert boxes.shape[1:] == (4,) and scores.shape == labels.shape
