"""Kernel-timed task graphs of the coverage set, for the research loop (issue 18).

Runs on the GPU machine after `export_torchscript.py DIR`: for every model of DIR's manifest, one
`nimble-bench infer --torchscript FILE --input ... --mode graph,nimble --optimize on --exact-check
--floor-graphs GRAPHS` process with a time limit (checked against eager in exact float32, as the
coverage experiment checks, then timed with libtorch's defaults). Each process times the one-stream graph and
Nimble (the paper's method), then profiles the one-stream replay and writes the model's task
graph with each op's kernel time (GRAPHS/NAME.graph.json). This script gathers every process's
record into GRAPHS/measured.json, in the shape of a `schedulers` record (rows `single` for the
one-stream graph and `nimble`), so `nimble-bench schedulers --simulate --graphs GRAPHS --measured
GRAPHS/measured.json` checks the simulator against these measurements. Models that fail or time
out are listed with their error; the record is rewritten after every model.

    python3 coverage_graphs.py DIR NIMBLE_BENCH GRAPHS [--budget SECONDS] [--timeout SECONDS]
"""

import argparse
import json
import os
import subprocess
import sys
import time


def row(algorithm, infer_row):
    return {"algorithm": algorithm, "latency": {"median_us": infer_row["latency"]["median_us"]}}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="the exporter's directory (manifest.json and the .pt files)")
    parser.add_argument("nimble_bench", help="the nimble-bench executable")
    parser.add_argument("graphs", help="where the graphs, the records and measured.json go")
    parser.add_argument("--budget", type=float, default=520.0, help="seconds for all models; the rest are left out")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per model")
    args = parser.parse_args()
    started = time.time()
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    records = os.path.join(args.graphs, "records")
    os.makedirs(records, exist_ok=True)
    out = {"experiment": "kernel-timed task graphs of the coverage set", "exporter": {k: manifest[k] for k in ("torch", "device", "batch")},
           "method": "each model in its own process: nimble-bench infer --torchscript FILE --input ... --mode graph,nimble --optimize on --exact-check --floor-graphs DIR "
                     "(the paper's method for the latencies; then the one-stream graph replayed under the Kineto profiler, each op's duration_us from its own kernels)",
           "models": [], "failed": [], "left_out": []}
    for entry in manifest["models"]:
        name = entry["name"]
        left = args.budget - (time.time() - started)
        if entry.get("error") or left < 20:
            (out["failed"] if entry.get("error") else out["left_out"]).append({"model": name, "error": entry.get("error", "no time left in this part")})
            continue
        record = os.path.join(records, f"{name}.json")
        command = [args.nimble_bench, "infer", "--torchscript", os.path.join(args.dir, entry["file"])]
        for spec in entry.get("inputs", []):
            command += ["--input", spec]
        command += ["--mode", "graph,nimble", "--optimize", "on", "--exact-check", "--floor-graphs", args.graphs, "--out", record]
        t0 = time.time()
        try:
            with open(os.path.join(records, f"{name}.log"), "w") as log:
                status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=min(args.timeout, left)).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
        seconds = round(time.time() - t0, 1)
        if status == "timeout" and left < args.timeout:
            # Stopped by the part's budget, not by its own time limit: for a later part.
            out["left_out"].append({"model": name, "error": f"the part's budget ran out after {seconds} s"})
            print(f"{name}: left out (the part's budget ran out after {seconds} s)", flush=True)
        elif status != 0 or not os.path.exists(record):
            with open(os.path.join(records, f"{name}.log")) as log:
                errors = [line.strip() for line in log if line.startswith("error")]
            out["failed"].append({"model": name, "error": f"status {status}: {errors[-1] if errors else ''}", "process_s": seconds})
            print(f"{name}: failed (status {status}) after {seconds} s", flush=True)
        else:
            with open(record) as f:
                infer = json.load(f)
            by_mode = {r["mode"]: r for r in infer["rows"]}
            nimble = by_mode["nimble"]
            floor = nimble.get("floor") or {}
            out["provenance"] = infer["provenance"]
            out["libtorch"] = infer.get("libtorch")
            out["precision"] = infer.get("precision")
            out["models"].append({"model": name, "source": entry.get("source"), "rows": [row("single", by_mode["graph"]), row("nimble", nimble)],
                                  "floor_us": floor.get("floor_us"), "over_floor": floor.get("over_floor"), "tasks": floor.get("tasks"),
                                  "streams": (nimble.get("prepare") or {}).get("streams"), "process_s": seconds})
            print(f"{name}: one stream {by_mode['graph']['latency']['median_us']:.1f} us, Nimble {nimble['latency']['median_us']:.1f} us, "
                  f"floor {floor.get('floor_us', float('nan')):.1f} us ({seconds} s)", flush=True)
        with open(os.path.join(args.graphs, "measured.json.partial"), "w") as f:
            json.dump(out, f, indent=1)
        os.replace(os.path.join(args.graphs, "measured.json.partial"), os.path.join(args.graphs, "measured.json"))
    print(f"{len(out['models'])} graphs, {len(out['failed'])} failed, {len(out['left_out'])} left out, {time.time() - started:.0f} s", flush=True)
    return 0 if not out["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
