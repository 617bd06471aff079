"""Where torch.compile(backend="nimble") spends its compile time, against reduce-overhead's, in
one process: the seconds of the first three calls of each (both compilers warmed up on a small
model first, each compiling from empty caches, as experiments/python/same_process.py does), the
backend's own phases (granularity "kernels": Inductor's compile, reading its program, the plan,
the plan's programs, the captures, the choice's timings and the rest of the choice: eager's
references and the accuracy check), then, in a second compile from empty caches, a cProfile of
the backend's first calls (the backend's, Inductor's and Triton's functions by cumulative time):
the profiler slows Python about twofold, so the seconds compared are timed without it.

    python3 experiments/python/backend_compile_profile.py [--model inception-v3|bert-base|llama|...] [--batch 1] [--options '{"depthwise_kernels": true}']

With --options, the backend is compiled with those options (torch.compile(..., options=...)), and
option depthwise_kernels' phases are timed too (its variants compiled ahead, each site measured).
"""

import argparse
import json
import cProfile
import io
import pstats
import time
from collections import defaultdict

import torch
from torch._inductor.utils import fresh_cache

from backend_overhead import model_and_input
from same_process import warm_up_compilers

PHASES = defaultdict(lambda: [0, 0.0])


def timed(owner, name, label):
    """Replaces ``owner.name`` by a wrapper that adds its calls and seconds to PHASES[label]."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            PHASES[label][0] += 1
            PHASES[label][1] += time.perf_counter() - started

    setattr(owner, name, wrapper)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception-v3")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--options", type=json.loads, default={}, help="the backend's options, as JSON")
    args = parser.parse_args()
    import torch._inductor.compile_fx

    import nimble_rs
    from nimble_rs.dynamo import compiled, depthwise, kernels_plan, pipeline

    torch.backends.cudnn.benchmark = True
    model, x = model_and_input(args.model, args.batch)
    print(f"== {args.model}, batch {args.batch}" + (f", options {json.dumps(args.options)}" if args.options else ""), flush=True)
    with torch.no_grad():
        print(f"compilers warmed up on a small model     {warm_up_compilers(['compile', 'backend'], torch.float32):7.1f} s")
        print(f"reduce-overhead first 3 calls            {first_calls(torch.compile(model, mode='reduce-overhead'), x):7.1f} s", flush=True)
        # Looked up by name at each compile (compile_kernels imports it when called).
        timed(torch._inductor.compile_fx, "compile_fx_inner", "Inductor's compile (compile_fx_inner)")
        timed(pipeline, "WrapperProgram", "reading Inductor's program")
        timed(pipeline, "_separated", "weight copies' buffers apart")
        timed(kernels_plan, "plan", "the plan (Rust registry, checker)")
        timed(kernels_plan, "PlannedProgram", "the plan's program")
        timed(pipeline, "_critical_path_program", "the critical-path plan and program")
        timed(compiled, "CapturedGraph", "captures (warm-ups, torch.cuda.graph)")
        timed(compiled, "time_samples_ms", "the choice's timings")
        timed(compiled.NimbleCompiled, "_choose", "the whole choice")
        timed(depthwise, "start_ahead", "depthwise variants' workers started")
        timed(depthwise, "baseline", "depthwise cuDNN and writes measured")
        timed(depthwise, "timing", "depthwise sites measured")
        before = len(nimble_rs.dynamo.reports())
        seconds = first_calls(torch.compile(model, backend="nimble", options=args.options), x)
        print(f"backend first 3 calls                    {seconds:7.1f} s")
        for label, (calls, total) in PHASES.items():
            print(f"  {label:<44} {calls:4d} calls {total:7.2f} s")
        for report in nimble_rs.dynamo.reports()[before:]:
            print("  report:", {k: report.get(k) for k in ("kernels", "streams", "regions", "choice", "compile_seconds", "capture_seconds", "measured_ms", "timed_again")})
            if isinstance(report.get("depthwise_kernels"), dict):
                print("  depthwise_kernels:", {k: v for k, v in report["depthwise_kernels"].items() if k != "shapes"})
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
