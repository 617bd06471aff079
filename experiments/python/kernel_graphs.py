"""Fused-kernel task graphs of the same-process models: each model compiled by Inductor
(torch.compile's default backend), one task per kernel Inductor generates, each with its
measured time on this GPU (nimble_rs.dynamo.kernel_graphs), written as DIR/MODEL-DTYPE.graph.json
with DIR/provenance.json, for `nimble-bench schedulers --simulate --graphs DIR` without a GPU.

    python3 experiments/python/kernel_graphs.py --models-json MODELS.json --out-dir DIR \
        [--models inception-v3,llama] [--dtype float32|bfloat16] [--batch 1] [--repeats 20] [--commit SHA] \
        [--time-reduce-overhead]

Each graph's entry in provenance.json has its busy time (the kernels' summed device time), its
critical path (the heaviest chain of dependent kernels): no schedule of these kernels on any
number of streams finishes sooner than the critical path, since a kernel run beside others takes
at least its time alone; its occupied time (each kernel's time by the share of the GPU's block
slots its grid fills: kernels that fill the GPU each leave nothing to run beside them) and the
simulator's makespans on one stream and on nimble's plan. With --time-reduce-overhead, the model's latency under
torch.compile(mode="reduce-overhead") is measured in the same process (the paper's method; before the profiler), and
the entry says how far below it streams could take these kernels at best (critical path / latency).
With --time-backend, torch.compile(backend="nimble") compiles the model in the same process, before
the profiler runs (which leaves later in-graph timings slower), and its
choice's in-graph timings (each captured program replayed alone: Inductor's kernels as one region
on one stream, and each plan on streams; the medians its report's ``measured_ms`` holds) are kept
beside the graphs, paired in order where the backend compiled as many graphs: what the simulator's
one-stream and plan makespans are held against. Each task's ``launches`` (grid, block, registers,
shared memory, occupancy) come from the same profile as its duration.
"""

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import torch

from baselines import build, driver_version, load_reference_module, measure
from workloads import COVERAGE_MODELS, DECODERS, batched, coverage_model, decoder

METHOD = (
    "the model in eval mode under no_grad, cast to the dtype, batch as given; compiled by torch.compile (Inductor, "
    "default mode) with the FX graph cache off; tasks: Inductor's kernels in launch order (Triton kernels by name, "
    "extern calls by their ATen op), edges from the buffers each kernel reads and writes (views contracted); after "
    "three untimed calls, the Kineto profiler over --repeats calls: duration_us = a Triton kernel's total device time "
    "over the calls and its launches, an extern call's = the device time of its ATen op's kernels, k-th call matched "
    "to the k-th extern of that op; kernels and sm_share per task from the profiler's trace (each kernel's grid "
    "against the GPU's resident-block capacity, sm_limits in the graph's attrs, weighted by time); occupied_us = the "
    "sum of duration_us x sm_share (the GPU's block slots the kernels fill, end to end); simulated_us: the simulator "
    "(kernel-timed calibration) on one stream and on nimble's plan; cuDNN benchmark on"
)


def critical_path_us(graph):
    """The heaviest chain of dependent kernels (missing durations count as 0): the scheduler's
    own (nimble-graph's critical path, as `nimble_rs.simulate` reports it)."""
    import nimble_rs

    return nimble_rs.simulate(graph, "single")["critical_path_us"]


def occupied_us(graph):
    """The GPU's block slots the kernels fill, end to end: each kernel's time by its share of
    them (one where a task has no share). Kernels that each fill the GPU cannot run side by side,
    so where this is near the kernels' summed time, streams have little left to overlap."""
    return sum(n.get("duration_us", 0.0) * n.get("attrs", {}).get("sm_share", 1.0) for n in graph["nodes"])


def simulated_us(graph):
    """The simulator's makespans of the graph on one stream and on nimble's plan."""
    import nimble_rs

    nimble = nimble_rs.simulate(graph, "nimble")
    return {"single": nimble["single_makespan_us"], "nimble": nimble["makespan_us"], "calibration": nimble["calibration"]}


def reduce_overhead_ms(model, x, warmups=50, timed=100):
    """torch.compile(mode="reduce-overhead")'s latency on this model: the paper's method (50
    warm-up calls, the median of 100 CUDA-event timings, each call from an idle device), a fresh
    random input each call."""
    compiled = torch.compile(model, mode="reduce-overhead")
    fresh = (lambda: (torch.randn_like(x),)) if x.is_floating_point() else (lambda: (x.clone(),))
    with torch.no_grad():
        samples = measure(compiled, fresh, warmups, timed, "cuda")
    torch._dynamo.reset()
    return statistics.median(samples) / 1000.0


BACKEND_KEEP = ("kernels", "streams", "syncs", "choice", "measured_ms", "measured_spread", "timed_again", "hoisted_kernels", "weight_stream_kernels", "drift", "unplanned")


def backend_timings(model, x):
    """The backend's reports for ``model`` compiled with its defaults (three calls: compiled,
    planned, captured, chosen by timing each program in its graph), what they measured kept."""
    import nimble_rs

    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    run = torch.compile(model, backend="nimble")
    fresh = (lambda: torch.randn_like(x)) if x.is_floating_point() else (lambda: x.clone())
    with torch.no_grad():
        for _ in range(3):
            run(fresh())
    reports = nimble_rs.dynamo.reports()[before:]
    torch._dynamo.reset()
    return [{k: r[k] for k in BACKEND_KEEP if k in r} for r in reports if r.get("graph") == "inference"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-json", required=True, help="nimble-bench models --json output")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--time-reduce-overhead", action="store_true", help="time torch.compile(mode=\"reduce-overhead\") too")
    parser.add_argument("--time-backend", action="store_true", help="keep the backend's in-graph timings of one region and its plans beside the graphs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: kernel durations are measured on a GPU")
    from nimble_rs.dynamo.research.kernels import kernel_graphs, write_kernel_graphs

    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    reference = load_reference_module()
    out = Path(args.out_dir)
    written, skipped = [], []
    run = {
        "gpu": torch.cuda.get_device_name(0),
        "driver_version": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit,
        "dtype": args.dtype,
        "batch": args.batch,
        "repeats": args.repeats,
    }
    if args.time_backend:
        run["backend_timed"] = "before the profiler"
    provenance_path = out / "provenance.json"
    # Several runs into one directory: their graphs listed together.
    earlier = json.loads(provenance_path.read_text()) if provenance_path.exists() else None

    def record():
        provenance = {"experiment": "fused-kernel model graphs", "method": METHOD, "provenance": run, "graphs": written, "skipped": skipped}
        if earlier is not None:
            provenance["graphs"] = earlier.get("graphs", []) + written
            provenance["skipped"] = earlier.get("skipped", []) + skipped
            provenance["runs"] = earlier.get("runs", [earlier["provenance"]]) + [run]
        out.mkdir(parents=True, exist_ok=True)
        provenance_path.write_text(json.dumps(provenance, indent=2) + "\n")

    def load(name, skipped):
        """The model ``name`` on the GPU in the dtype, and its input; None if it cannot be built."""
        if name in zoo:
            model = build(name, reference, skipped)
            if model is None:
                return None
            x = torch.randn([args.batch] + zoo[name]["input_shape"], device="cuda", dtype=dtype)
        elif name in DECODERS:
            model, make_input = decoder(name, args.batch)
            x = make_input()
        elif name in COVERAGE_MODELS:
            model, one = coverage_model(name)
            x = batched(one(), args.batch, dtype)
        else:
            raise SystemExit(f"error: unknown model {name!r}")
        return model.cuda().eval().to(dtype), x

    names = [n.strip() for n in args.models.split(",")]
    # Every model's backend is timed before the profiler first runs in this process (after
    # Kineto's profile, in-graph timings of one run read 11% (one stream) and 23% (streams)
    # above a process never profiled: GoogLeNet float32 b1, one H200, one commit, one day), and
    # reduce-overhead's latency too.
    backend, reduce_overhead = {}, {}
    for name in names if args.time_backend or args.time_reduce_overhead else []:
        loaded = load(name, [])
        if loaded is None:
            continue
        if args.time_backend:
            try:
                backend[name] = ("timed", backend_timings(*loaded))
            except Exception as e:  # the graphs are still written; the timing's failure is said
                backend[name] = ("failed", f"{type(e).__name__}: {e}")
                print(f"{name}: backend failed: {backend[name][1]}", file=sys.stderr, flush=True)
        if args.time_reduce_overhead:
            reduce_overhead[name] = reduce_overhead_ms(*loaded)
        del loaded
        torch.cuda.empty_cache()
    for name in names:
        loaded = load(name, skipped)
        if loaded is None:
            continue
        model, x = loaded
        outcome, timings = backend.get(name, (None, None))
        backend_failure = timings if outcome == "failed" else None
        timings = timings if outcome == "timed" else None
        try:
            with torch.no_grad():
                graphs = kernel_graphs(model, x, repeats=args.repeats)
            paths = write_kernel_graphs(graphs, str(out), f"{name}-{args.dtype}" + (f"-b{args.batch}" if args.batch != 1 else ""))
        except Exception as e:  # one model failing must not lose the others
            skipped.append({"model": name, "reason": f"{type(e).__name__}: {e}"})
            print(f"{name}: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            continue
        entries = []
        for graph, path in zip(graphs, paths):
            timed = sum(1 for n in graph["nodes"] if "duration_us" in n)
            total = sum(n.get("duration_us", 0.0) for n in graph["nodes"])
            critical = critical_path_us(graph)
            missing = graph.get("attrs", {}).get("durations_missing", "")
            occupied, simulated = occupied_us(graph), simulated_us(graph)
            entries.append({"file": Path(path).name, "kernels": len(graph["nodes"]), "timed": timed, "busy_us": total, "critical_path_us": critical, "occupied_us": occupied, "simulated_us": simulated})
            print(
                f"{Path(path).name:<40} {len(graph['nodes']):5d} kernels, {timed:5d} timed, {total:9.1f} us busy, critical path {critical:9.1f} us, "
                f"occupied {occupied:9.1f} us, simulated {simulated['single']:.1f} -> {simulated['nimble']:.1f} us ({simulated['calibration']}) {missing}",
                flush=True,
            )
        written.extend(entries)
        record()  # a run cut short keeps every graph it wrote
        if args.time_backend and name in backend:
            if backend_failure is not None:
                for entry in entries:
                    entry["backend_failed"] = backend_failure
            if timings is not None and len(timings) == len(entries):
                for entry, report in zip(entries, timings):
                    entry["backend"] = report
                    measured = report.get("measured_ms", {})
                    print(f"{entry['file']:<40} in the backend's graph: " + ", ".join(f"{k} {v:.4f} ms" for k, v in measured.items()) + f" (chose {report.get('choice')})", flush=True)
            elif timings is not None:
                for entry in entries:
                    entry["backend_unpaired"] = f"the backend compiled {len(timings)} graphs, Inductor {len(entries)}"
                    entry["backend_reports"] = timings
            record()
        if name in reduce_overhead and len(entries) == 1:
            latency_ms = reduce_overhead[name]
            entry = entries[0]
            entry["reduce_overhead_ms"] = latency_ms
            entry["best_schedule_vs_reduce_overhead"] = entry["critical_path_us"] / (latency_ms * 1000.0)
            entry["occupied_vs_reduce_overhead"] = entry["occupied_us"] / (latency_ms * 1000.0)
            print(f"{entry['file']:<40} reduce-overhead {latency_ms:.3f} ms: best schedule {entry['best_schedule_vs_reduce_overhead']:.2f}x of it, occupied {entry['occupied_vs_reduce_overhead']:.2f}x", flush=True)
            record()
        del model
        torch.cuda.empty_cache()
    record()


if __name__ == "__main__":
    main()
