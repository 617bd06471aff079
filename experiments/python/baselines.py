"""PyTorch baselines for the inference comparison: PyTorch eager, TorchScript and
torch.compile(mode="reduce-overhead") on the zoo's models, measured the way nimble-bench measures
(cuDNN benchmark on, fresh standard-normal inputs, warm-ups, then each call timed with CUDA
events on the current stream, median). With --training, the training comparison instead: one
CIFAR-10 training step (forward, cross-entropy, backward, SGD with momentum) eagerly
(`train-eager`) and captured whole with torch.cuda.graph (`train-graph`), at each batch size.

The model list is nimble-bench's own (`nimble-bench models --json`, passed with --models-json),
so both sides run the same models at the same input sizes. Models come from the reference
packages the zoo was checked against (see ../reference/export_reference.py): torchvision, and for
NASNet-A `pretrainedmodels` (or timm for NASNet-A large). DARTS and AmoebaNet have no package and
are reported as skipped, as is any model whose package is missing.

    python3 experiments/python/baselines.py --models-json MODELS.json --out OUT.json \
        [--models a,b|all] [--systems eager,torchscript,compile] [--warmup 50] [--iters 100] \
        [--commit SHA] [--training --batches 32,64,128] [--device cuda|cpu]

`--device cpu` is a smoke test of the script itself (times with the host clock; no graphs).
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


def why_not_built(name, reference):
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


def build(name, reference, skipped):
    """The model, or None when no package here provides it, the reason then added to `skipped`
    and printed."""
    model, why = why_not_built(name, reference)
    if model is None:
        skipped.append({"model": name, "reason": why})
        print(f"{name}: skipped ({why})", file=sys.stderr, flush=True)
    return model


def summary(samples_us):
    return {
        "median_us": statistics.median(samples_us),
        "mean_us": statistics.fmean(samples_us),
        "stdev_us": statistics.stdev(samples_us) if len(samples_us) > 1 else 0.0,
        "min_us": min(samples_us),
        "max_us": max(samples_us),
        "samples_us": samples_us,
    }


def timed(device, call, repeats=1):
    """The microseconds one `call` takes from an idle device: CUDA events on the current stream
    around `repeats` calls back to back, their mean (one call: the paper's method), or the host
    clock on the CPU. The experiments' one CUDA-event timer (the backend times its own choice
    with ``nimble_rs.dynamo.common.timing``); ``timed_in_a_queue`` times calls issued without
    waiting."""
    if device == "cpu":
        started = time.perf_counter()
        for _ in range(repeats):
            call()
        return (time.perf_counter() - started) * 1e6 / repeats
    torch.cuda.synchronize()
    start = stamp()
    for _ in range(repeats):
        call()
    return between_us(start, stamp()) / repeats


def stamp():
    """A point in time on both clocks: a CUDA event recorded on the current stream, and the
    host's clock (``time.perf_counter``, seconds) read just after; what every timing here is
    made of."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event, time.perf_counter()


def between_us(first, last):
    """The device's microseconds from stamp ``first`` to stamp ``last`` (waited for)."""
    last[0].synchronize()
    return first[0].elapsed_time(last[0]) * 1000.0


def timed_in_a_queue(calls):
    """The microseconds each of ``calls`` takes when they are issued back to back without waiting
    for the device, each between CUDA events of its own on the current stream, one wait at the
    end: a step's time within a run of steps, as a training loop issues them."""
    stamps = []
    for call in calls:
        start = stamp()
        call()
        stamps.append((start, stamp()))
    torch.cuda.synchronize()
    return [between_us(start, end) for start, end in stamps]


def measure(run, make_inputs, warmup, iterations, device):
    """Latency samples (µs) of `run` on fresh inputs from `make_inputs`."""
    for _ in range(warmup):
        run(*make_inputs())
    samples = []
    for _ in range(iterations):
        inputs = make_inputs()
        samples.append(timed(device, lambda: run(*inputs)))
    return samples


def timed_rounds(runs, make_inputs, warmup, iterations, rounds):
    """Per system, its latency samples (µs) over every round and each round's median, or the
    exception it raised: in each round every system is warmed up and timed in turn (`measure`,
    on fresh inputs from `make_inputs`), the order rotated by one each round, so that a drift of
    the machine falls on every system alike and the spread of the round medians is the noise."""
    names = list(runs)
    results = {name: ([], []) for name in names}
    for index in range(rounds):
        turn = index % max(len(names), 1)
        for name in names[turn:] + names[:turn]:
            if isinstance(results[name], Exception):
                continue
            try:
                samples = measure(runs[name], make_inputs, warmup, iterations, "cuda")
            except Exception as e:  # noqa: BLE001 - recorded as the system's failure
                results[name] = e
                continue
            results[name][0].extend(samples)
            results[name][1].append(statistics.median(samples))
    return results


def round_ratios(latency, base):
    """`latency`'s round medians over `base`'s, round by round, lowest to highest ("0.88 0.91"),
    or "-" for rows timed without rounds: the noise of a comparison's verdict."""
    pairs = zip(latency.get("round_medians_us", []), base.get("round_medians_us", []))
    return " ".join(f"{r:.2f}" for r in sorted(a / b for a, b in pairs if b > 0)) or "-"


def prepared(system, model, shape, device):
    """A function of the input for `system`, and the seconds it took to make it."""
    started = time.time()
    example = torch.randn(shape, device=device)
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
    if device == "cuda":
        torch.cuda.synchronize()
    return run, time.time() - started


CIFAR_MODELS = {"resnet50": "resnet50", "mobilenet-v2": "mobilenet_v2", "efficientnet-b0": "efficientnet_b0"}


def relative_norm(got, expected):
    """The norm of the differences of paired tensors over the norm of the expected ones, all the
    tensors taken as one vector (pairs whose expected tensor is None are skipped)."""
    squared = scale = 0.0
    for a, b in zip(got, expected):
        if b is None:
            continue
        squared += float((a.double() - b.double()).pow(2).sum())
        scale += float(b.double().pow(2).sum())
    return (squared / max(scale, 1e-30)) ** 0.5


def sgd(parameters, lr=0.01):
    """The optimizer of every training comparison, as the Rust side's training step has it:
    SGD with momentum 0.9 and weight decay 5e-4 (learning rate 0.01 unless given)."""
    return torch.optim.SGD(parameters, lr=lr, momentum=0.9, weight_decay=5e-4)


def sgd_step(forward, optimizer, x, y):
    """One training step of every comparison: gradients set to None, cross-entropy of
    ``forward(x)`` against ``y``, backward, the optimizer's step. Returns the loss (not synced)."""
    import torch.nn.functional as F

    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(forward(x), y)
    loss.backward()
    optimizer.step()
    return loss


def training_step(system, model, batch, device):
    """A function (x, y) -> None taking one SGD step of `model`, eagerly or as one CUDA graph."""
    import torch.nn.functional as F

    optimizer = sgd(model.parameters())

    def eager(x, y):
        sgd_step(model, optimizer, x, y)

    if system == "train-eager":
        return eager
    if system != "train-graph":
        raise SystemExit(f"unknown training system {system!r}; expected train-eager or train-graph")
    if device != "cuda":
        raise SystemExit("train-graph captures a CUDA graph: it needs --device cuda")
    return captured_step(eager, lambda x, y: F.cross_entropy(model(x), y), optimizer, batch, device, warmups=3)


def captured_step(eager, loss_of, optimizer, batch, device, warmups, side=None):
    """PyTorch's whole-network capture: `warmups` eager steps on a side stream, then the step
    (loss, backward, optimizer) captured with torch.cuda.graph; returns replay(x, y)."""
    static_x = torch.randn(batch, 3, 32, 32, device=device)
    static_y = torch.randint(10, (batch,), device=device)
    side = side or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            eager(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss_of(static_x, static_y).backward()
        optimizer.step()

    def replay(x, y):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return replay


def measure_training(names, systems, batches, args):
    import torchvision.models as tv

    rows, skipped = [], []
    for batch in batches:
        for name in names:
            if name not in CIFAR_MODELS:
                skipped.append({"model": name, "reason": "not a training model (CIFAR-10 variants: resnet50, mobilenet-v2, efficientnet-b0)"})
                continue
            for system in systems:
                torch.manual_seed(0)
                model = getattr(tv, CIFAR_MODELS[name])(num_classes=10).to(args.device).train()
                started = time.time()
                step = training_step(system, model, batch, args.device)
                seconds = time.time() - started
                make = lambda: (torch.randn(batch, 3, 32, 32, device=args.device), torch.randint(10, (batch,), device=args.device))
                samples = measure(step, make, args.warmup, args.iters, args.device)
                row = {"model": name, "batch": batch, "system": system, "step": summary(samples), "prepare_seconds": seconds}
                rows.append(row)
                print(f"  {name:<16} b{batch:<4} {system:<12} {row['step']['median_us'] / 1000:8.3f} ms", file=sys.stderr, flush=True)
                del step, model
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    return rows, skipped


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
    parser.add_argument("--training", action="store_true", help="the training comparison (systems train-eager, train-graph)")
    parser.add_argument("--batches", default="32,64,128", help="with --training: comma-separated batch sizes")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the baselines are measured on a GPU (--device cpu only smoke-tests this script)")

    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    names = list(zoo) if args.models == "all" else [n.strip() for n in args.models.split(",")]
    unknown = [n for n in names if n not in zoo]
    if unknown:
        raise SystemExit(f"error: unknown models {unknown}; the zoo has {sorted(zoo)}")
    systems = [s.strip() for s in args.systems.split(",")]

    torch.backends.cudnn.benchmark = True
    if args.training:
        batches = [int(b) for b in args.batches.split(",")]
        rows, skipped = measure_training(names, systems, batches, args)
        write_record(args, "pytorch-training-baselines", rows, skipped, "CIFAR-10 shapes, SGD lr 0.01 momentum 0.9 weight decay 5e-4 (PyTorch's default foreach implementation), fresh randn inputs and random labels every step, CUDA events around each step, median; train-graph: the whole step captured with torch.cuda.graph after three warm-up steps on a side stream")
        for batch in batches:
            for name in names:
                cells = [next((f"{r['step']['median_us'] / 1000:12.3f}" for r in rows if r["model"] == name and r["batch"] == batch and r["system"] == s), f"{'-':>12}") for s in systems]
                print(f"{name:<16} {batch:>5} " + " ".join(cells))
        return
    reference = load_reference_module()
    rows, skipped = [], []
    for name in names:
        model = build(name, reference, skipped)
        if model is None:
            continue
        model = model.to(args.device).eval()
        shape = [1] + zoo[name]["input_shape"]
        with torch.no_grad():
            x = torch.randn(shape, device=args.device)
            expected = first_output(model(x)).float()
            for system in systems:
                run, seconds = prepared(system, model, shape, args.device)
                got = first_output(run(x)).float()
                error = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()
                samples = measure(run, lambda: (torch.randn(shape, device=args.device),), args.warmup, args.iters, args.device)
                row = {"model": name, "system": system, "latency": summary(samples), "prepare_seconds": seconds, "relative_error": error}
                rows.append(row)
                print(f"  {name:<16} {system:<12} {row['latency']['median_us'] / 1000:8.3f} ms  (prepare {seconds:.1f} s, rel.err {error:.1e})", file=sys.stderr, flush=True)
                del run
                torch._dynamo.reset()
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()

    write_record(args, "pytorch-baselines", rows, skipped, "batch 1, float32 (PyTorch defaults: TF32 for cuDNN convolutions), cuDNN benchmark on, fresh randn inputs, CUDA events around each call, median; TorchScript: torch.jit.trace then torch.jit.freeze; compile: torch.compile(mode='reduce-overhead')")
    print(f"{'model':<16} " + " ".join(f"{s:>12}" for s in systems) + "   (ms, median)")
    for name in names:
        cells = []
        for system in systems:
            hit = [r for r in rows if r["model"] == name and r["system"] == system]
            cells.append(f"{hit[0]['latency']['median_us'] / 1000:12.3f}" if hit else f"{'-':>12}")
        print(f"{name:<16} " + " ".join(cells))


def write_record(args, experiment, rows, skipped, method):
    """The record with its provenance, written through a temporary file."""
    record = {
        "experiment": experiment,
        "provenance": {
            "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (smoke test)",
            "driver_version": driver_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "python": sys.version.split()[0],
            # The GPU's hardware work queues the process asked for (8 when unset): a multi-stream
            # graph's calls were measured faster with 32 (docs/python.md).
            "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": args.commit,
            "warmup": args.warmup,
            "iterations": args.iters,
            "method": method,
        },
        "rows": rows,
        "skipped": skipped,
    }
    tmp = Path(args.out).with_suffix(".partial")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
