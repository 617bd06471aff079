"""PyTorch baselines for the inference comparison: PyTorch eager, TorchScript and
torch.compile(mode="reduce-overhead") on the zoo's models, measured the way nimble-bench measures
(cuDNN benchmark on, fresh standard-normal inputs, warm-ups, then each call timed with CUDA
events on the current stream, median).

The model list is nimble-bench's own (`nimble-bench models --json`, passed with --models-json),
so both sides run the same models at the same input sizes. Models come from the reference
packages the zoo was checked against (see ../reference/export_reference.py): torchvision, and for
NASNet-A `pretrainedmodels` (or timm for NASNet-A large). DARTS and AmoebaNet have no package and
are reported as skipped, as is any model whose package is missing.

    python3 experiments/python/baselines.py --models-json MODELS.json --out OUT.json \
        [--models a,b|all] [--systems eager,torchscript,compile] [--warmup 50] [--iters 100] \
        [--commit SHA]
"""

import argparse
import datetime
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch


def load_reference_module():
    """export_reference.py's `reference(name)`, which builds the reference models."""
    path = Path(__file__).resolve().parent.parent / "reference" / "export_reference.py"
    spec = importlib.util.spec_from_file_location("export_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(name, reference):
    """The model, or (None, why) when no package here provides it."""
    made = reference.reference(name)
    if made is not None:
        return made[0], None
    if name == "nasnet-a-large":
        try:
            import timm

            return timm.create_model("nasnetalarge", pretrained=False, num_classes=1000), None
        except Exception as error:  # timm missing or without the model
            return None, f"neither pretrainedmodels nor timm's nasnetalarge available ({error})"
    if name in ("darts", "amoebanet"):
        return None, "the DARTS authors' definitions are not a package"
    return None, "its reference package is not installed here"


def summary(samples_us):
    return {
        "median_us": statistics.median(samples_us),
        "mean_us": statistics.fmean(samples_us),
        "stdev_us": statistics.stdev(samples_us) if len(samples_us) > 1 else 0.0,
        "min_us": min(samples_us),
        "max_us": max(samples_us),
        "samples_us": samples_us,
    }


def measure(run, shape, warmup, iterations):
    """Latency samples (µs) of `run` on fresh inputs, each timed with CUDA events."""
    for _ in range(warmup):
        run(torch.randn(shape, device="cuda"))
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iterations):
        x = torch.randn(shape, device="cuda")
        torch.cuda.synchronize()
        start.record()
        run(x)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0)
    return samples


def prepared(system, model, shape):
    """A function of the input for `system`, and the seconds it took to make it."""
    started = time.time()
    example = torch.randn(shape, device="cuda")
    if system == "eager":
        run = model
    elif system == "torchscript":
        run = torch.jit.freeze(torch.jit.trace(model, example).eval())
    elif system == "compile":
        run = torch.compile(model, mode="reduce-overhead")
    else:
        raise SystemExit(f"unknown system {system!r}; expected eager, torchscript or compile")
    for _ in range(3):  # tracing, compiling, capturing happen here, not in the warm-ups' count
        run(example)
    torch.cuda.synchronize()
    return run, time.time() - started


def first_output(value):
    return value[0] if isinstance(value, (tuple, list)) else value


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=True)
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-json", required=True, help="nimble-bench models --json output")
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="all")
    parser.add_argument("--systems", default="eager,torchscript,compile")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--commit", default=os.environ.get("NIMBLE_COMMIT", "unknown"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the baselines are measured on a GPU")

    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    names = list(zoo) if args.models == "all" else [n.strip() for n in args.models.split(",")]
    unknown = [n for n in names if n not in zoo]
    if unknown:
        raise SystemExit(f"error: unknown models {unknown}; the zoo has {sorted(zoo)}")
    systems = [s.strip() for s in args.systems.split(",")]

    torch.backends.cudnn.benchmark = True
    reference = load_reference_module()
    rows, skipped = [], []
    for name in names:
        model, why = build(name, reference)
        if model is None:
            skipped.append({"model": name, "reason": why})
            print(f"{name}: skipped ({why})", file=sys.stderr, flush=True)
            continue
        model = model.cuda().eval()
        shape = [1] + zoo[name]["input_shape"]
        with torch.no_grad():
            x = torch.randn(shape, device="cuda")
            expected = first_output(model(x)).float()
            for system in systems:
                run, seconds = prepared(system, model, shape)
                got = first_output(run(x)).float()
                error = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()
                samples = measure(run, shape, args.warmup, args.iters)
                row = {"model": name, "system": system, "latency": summary(samples), "prepare_seconds": seconds, "relative_error": error}
                rows.append(row)
                print(f"  {name:<16} {system:<12} {row['latency']['median_us'] / 1000:8.3f} ms  (prepare {seconds:.1f} s, rel.err {error:.1e})", file=sys.stderr, flush=True)
                del run
                torch._dynamo.reset()
        del model
        torch.cuda.empty_cache()

    record = {
        "experiment": "pytorch-baselines",
        "provenance": {
            "gpu": torch.cuda.get_device_name(0),
            "driver_version": driver_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "python": sys.version.split()[0],
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": args.commit,
            "warmup": args.warmup,
            "iterations": args.iters,
            "method": "batch 1, float32 (PyTorch defaults: TF32 for cuDNN convolutions), cuDNN benchmark on, fresh randn inputs, CUDA events around each call, median; TorchScript: torch.jit.trace then torch.jit.freeze; compile: torch.compile(mode='reduce-overhead')",
        },
        "rows": rows,
        "skipped": skipped,
    }
    tmp = Path(args.out).with_suffix(".partial")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(args.out)
    print(f"{'model':<16} " + " ".join(f"{s:>12}" for s in systems) + "   (ms, median)")
    for name in names:
        cells = []
        for system in systems:
            hit = [r for r in rows if r["model"] == name and r["system"] == system]
            cells.append(f"{hit[0]['latency']['median_us'] / 1000:12.3f}" if hit else f"{'-':>12}")
        print(f"{name:<16} " + " ".join(cells))


if __name__ == "__main__":
    main()
