"""Where torch.compile(backend="nimble") spends its compile time, against reduce-overhead's, in
one process: the seconds of the first three calls of each (both compilers warmed up on a small
model first, each compiling from empty caches, as experiments/python/same_process.py does), the
backend's own phases (granularity "kernels": Inductor's compile, reading its program, the plan,
the plan's programs, the captures, the choice's timings and the rest of the choice: eager's
references and the accuracy check), then, in a second compile from empty caches, a cProfile of
the backend's first calls (the backend's, Inductor's and Triton's functions by cumulative time):
the profiler slows Python about twofold, so the seconds compared are timed without it.

    python3 experiments/python/backend_compile_profile.py [--model inception-v3|bert-base|llama|...] [--batch 1] [--options '{"depthwise_kernels": true}']
        [--models-json FILE --dtype bfloat16] [--no-cprofile]

With --options, the backend is compiled with those options (torch.compile(..., options=...)), and
option depthwise_kernels' phases are timed too (its variants compiled ahead, each site measured).
With --models-json (`nimble-bench models --json`), the model is built as the same-process records
build it (any model of that manifest, such as nasnet-a-large, or of same_process.py's own; its
BatchNorm statistics calibrated), in --dtype; without it, as backend_overhead.py builds it, in
float32 (the decoders in bfloat16). The backend's inner compile (compile_kernels: Inductor's
compile and the backend's passes and plans) is timed as a whole too: the first calls less it
and the captures are Dynamo's and AOTAutograd's tracing and the first replays. --no-cprofile
leaves out the second, profiled compile.
"""

import argparse
import json
import cProfile
import io
import pstats
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch._inductor.utils import fresh_cache

from backend_overhead import model_and_input
from workloads import warm_up_compilers

# The backend's phases timed (nimble_rs.dynamo.PHASES names them), as this script labels them.
LABELS = {
    "compile": "the backend's inner compile (compile_kernels)",
    "inductor": "Inductor's compile (compile_fx_inner)",
    "read": "reading Inductor's program",
    "separate": "weight copies' buffers apart",
    "plan": "the plan (Rust registry, checker)",
    "program": "the plan's program",
    "critical path": "the critical-path plan and program",
    "captured": "captures (warm-ups, torch.cuda.graph)",
    "timing": "the choice's timings",
    "choice": "the whole choice",
    "depthwise ahead": "depthwise variants' workers started",
    "depthwise baseline": "depthwise cuDNN and writes measured",
    "depthwise timing": "depthwise sites measured",
}
PHASES = defaultdict(lambda: [0, 0.0])


def phase_timer():
    """A watcher of the backend's phases (nimble_rs.dynamo.watch) adding each labelled phase's
    calls and seconds to PHASES (phases nest: each is timed whole)."""
    started = []

    def watcher(name, moment, _detail):
        if moment == "start":
            started.append(time.perf_counter())
            return
        seconds = time.perf_counter() - started.pop()
        if name in LABELS:
            PHASES[LABELS[name]][0] += 1
            PHASES[LABELS[name]][1] += seconds

    return watcher


def first_calls(run, x):
    """Seconds of ``run``'s first three calls on ``x`` (where it compiles and captures), from
    empty compile caches."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    with fresh_cache(delete=False):
        for _ in range(3):
            run(x)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def built(args):
    """(model, input) as the same-process records build them (--models-json) or as
    backend_overhead.py does, and the dtype the model runs in."""
    if args.models_json is None:
        model, x = model_and_input(args.model, args.batch)
        return model, x, next(model.parameters()).dtype
    from baselines import load_reference_module
    from workloads import record_model

    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    dtype, skipped = getattr(torch, args.dtype), []
    made = record_model(args.model, zoo, load_reference_module(), args.batch, dtype, skipped)
    if made is None:
        raise SystemExit(f"model {args.model} not built here: {skipped}")
    model, make_input = made
    return model, make_input(), dtype


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception-v3")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--options", type=json.loads, default={}, help="the backend's options, as JSON")
    parser.add_argument("--models-json", help="nimble-bench models --json output: the model built as the same-process records build it")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32", help="with --models-json, the model's and input's dtype")
    parser.add_argument("--no-cprofile", action="store_true", help="without the second, profiled compile")
    args = parser.parse_args()
    if args.models_json is None and args.dtype != "float32":
        raise SystemExit(f"--dtype {args.dtype}: needs --models-json (without it the model runs as backend_overhead.py builds it)")
    import torch._inductor.compile_fx

    import nimble_rs
    from nimble_rs.dynamo.passes import depthwise

    torch.backends.cudnn.benchmark = True
    model, x, dtype = built(args)
    print(f"== {args.model}, batch {args.batch}, {str(dtype).replace('torch.', '')}" + (f", options {json.dumps(args.options)}" if args.options else ""), flush=True)
    with torch.no_grad():
        print(f"compilers warmed up on a small model     {warm_up_compilers(['compile', 'backend'], dtype):7.1f} s")
        print(f"reduce-overhead first 3 calls            {first_calls(torch.compile(model, mode='reduce-overhead'), x):7.1f} s", flush=True)
        stop_watching = nimble_rs.dynamo.watch(phase_timer())
        before = len(nimble_rs.dynamo.reports())
        seconds = first_calls(torch.compile(model, backend="nimble", options=args.options), x)
        stop_watching()
        print(f"backend first 3 calls                    {seconds:7.1f} s")
        for label in LABELS.values():
            if label in PHASES:
                calls, total = PHASES[label]
                print(f"  {label:<44} {calls:4d} calls {total:7.2f} s")
        for report in nimble_rs.dynamo.reports()[before:]:
            print("  report:", {k: report.get(k) for k in ("kernels", "streams", "regions", "choice", "compile_seconds", "inductor_seconds", "capture_seconds", "measured_ms", "timed_again")})
            if isinstance(report.get("depthwise_kernels"), dict):
                print("  depthwise_kernels:", {k: v for k, v in report["depthwise_kernels"].items() if k != "shapes"})
        if args.no_cprofile:
            return
        # The function breakdown from a second compile, under the profiler (not timed above).
        torch._dynamo.reset()
        profile = cProfile.Profile()
        profile.enable()
        depthwise.MEASURED.clear()
        depthwise.BASELINES.clear()
        profiled = first_calls(torch.compile(model, backend="nimble", options=args.options), x)
        profile.disable()
    print(f"backend first 3 calls under cProfile     {profiled:7.1f} s (a second compile; the profiler's own cost included)", flush=True)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text).sort_stats("cumulative")
    stats.print_stats(r"_inductor|triton|nimble_rs", args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
