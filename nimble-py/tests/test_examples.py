"""The package's examples (nimble-py/examples) run as far as the CPU allows: the backend and the
scheduler everywhere, nimble_rs.Nimble where there is CUDA."""

import importlib.util
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_inference_example_runs_on_the_cpu_with_the_same_report_on_every_tested_torch():
    # CI runs this on torch 2.11.0 and on the newest tested: the same kernels, streams and syncs
    # on both (2.14's new checks, read as kernels, had made 17 tasks writing the weights).
    torch._dynamo.reset()
    report = load("inference").main("cpu")
    seen = {key: report.get(key) for key in ("kernels", "streams", "syncs", "clobbered_inputs", "choice", "drift")}
    assert seen == {"kernels": 11, "streams": 3, "syncs": 4, "clobbered_inputs": None, "choice": "streams", "drift": None}, (torch.__version__, seen)


def test_the_training_example_trains_as_eager_does_on_the_cpu():
    torch._dynamo.reset()
    eager, compiled = load("training").main("cpu")
    assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(eager, compiled)), (eager, compiled)
    assert compiled[-1] < compiled[0], compiled
