"""Where torch.compile(backend="nimble") spends its compile time, against reduce-overhead's, in
one process: the seconds of the first three calls of each, and the backend's own phases
(planning and partitioning, Inductor's compile of each region and of the whole graph, the
captures and timings of the choice, the accuracy check), then a cProfile of the backend's first
call (Inductor's and Triton's functions by cumulative time).

    python3 experiments/python/backend_compile_profile.py [--model inception-v3|llama]
"""

import argparse
import cProfile
import io
import pstats
import time
from collections import defaultdict

import torch

from backend_overhead import model_and_input

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
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(3):
        run(x)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception-v3")
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    import torch._inductor

    import nimble_rs
    from nimble_rs.dynamo import compiled, pipeline, regions

    torch.backends.cudnn.benchmark = True
    model, x = model_and_input(args.model)
    with torch.no_grad():
        print(f"reduce-overhead first 3 calls {first_calls(torch.compile(model, mode='reduce-overhead'), x):7.1f} s")
        torch._dynamo.reset()
        timed(regions, "plan_regions", "plan (Rust registry) and regions")
        timed(torch._inductor, "compile", "torch._inductor.compile (each region)")
        timed(pipeline, "_compile_regions", "a program's regions, compiled")
        timed(compiled, "CapturedGraph", "capture (warm-ups and torch.cuda.graph)")
        timed(compiled, "time_samples_ms", "the choice's timings")
        profile = cProfile.Profile()
        profile.enable()
        seconds = first_calls(torch.compile(model, backend="nimble"), x)
        profile.disable()
    print(f"backend first 3 calls         {seconds:7.1f} s")
    for label, (calls, total) in PHASES.items():
        print(f"  {label:<44} {calls:4d} calls {total:7.1f} s")
    for report in nimble_rs.dynamo.reports():
        print("  report:", {k: report.get(k) for k in ("ops", "streams", "regions", "choice", "compile_seconds", "capture_seconds", "measured_ms", "measured_error")})
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text).sort_stats("cumulative")
    stats.print_stats(r"_inductor|triton|nimble_rs", args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
