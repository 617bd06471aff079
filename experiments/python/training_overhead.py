"""Where a training step through torch.compile(backend="nimble") spends its host time, against
reduce-overhead: the step's CUDA-event median (as training_backend.py times it), the host time
of each phase of a step issued from an idle device (forward call, loss and backward, optimizer
step, zero_grad), the autograd profiler's operators by their own host time, and a cProfile of
steps. Each system on its own copy of the same initial weights.

    python3 experiments/python/training_overhead.py [--model resnet50|mobilenet-v2|encoder] [--batch 32] [--steps 100]
"""

import argparse
import copy
import cProfile
import pstats
import sys
import time

import torch
import torch.nn.functional as F
from torch._inductor.utils import fresh_cache

from baselines import timed
from training_backend import build, no_dropout, stepper


def phases(run, optimizer, make_batch, batch, steps):
    """Median host seconds of each phase of a step issued from an idle device."""
    times = {"forward": [], "loss+backward": [], "optimizer.step": [], "zero_grad": []}
    for _ in range(steps):
        x, y = make_batch(batch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = run(x)
        t1 = time.perf_counter()
        F.cross_entropy(out, y).backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        for name, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[name].append(seconds)
    return {name: sorted(v)[len(v) // 2] * 1e3 for name, v in times.items()}


def step_median_ms(step, make_batch, batch, steps):
    samples = []
    for _ in range(steps):
        x, y = make_batch(batch)
        samples.append(timed("cuda", lambda: step(x, y)) / 1000.0)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) // 4], samples[(3 * len(samples)) // 4]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    initial, make_batch = build(args.model)
    initial = no_dropout(initial).cuda().train()
    for system in ("compile", "backend"):
        model = copy.deepcopy(initial)
        if system == "compile":
            run = torch.compile(model, mode="reduce-overhead")
        else:
            import nimble_rs  # noqa: F401 - registers the backend

            run = torch.compile(model, backend="nimble")
        step = stepper(run, model)
        optimizer = step.optimizer

        with fresh_cache(delete=False):
            for _ in range(3):
                step(*make_batch(args.batch))
        for _ in range(30):
            step(*make_batch(args.batch))
        median, low, high = step_median_ms(step, make_batch, args.batch, args.steps)
        print(f"== {system}: {args.model} batch {args.batch}: step {median:.3f} ms (quartiles {low:.3f}-{high:.3f}), CUDA events")
        # The step leaves its gradients set; a backward under them would accumulate into them
        # (the backend then copies that call's gradients instead of lending them).
        optimizer.zero_grad(set_to_none=True)
        host = phases(run, optimizer, make_batch, args.batch, args.steps)
        print("   host ms from an idle device: " + ", ".join(f"{k} {v:.3f}" for k, v in host.items()) + f", sum {sum(host.values()):.3f}")
        if system == "backend":
            for report in nimble_rs.dynamo.reports():
                keys = ("graph", "kernels", "streams", "syncs", "choice", "measured_ms", "uncaptured_calls", "uncapturable", "captured_shapes")
                print("   report:", {k: report[k] for k in keys if k in report})
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step(*make_batch(args.batch))
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(50):
            step(*make_batch(args.batch))
        torch.cuda.synchronize()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(22)
        del run, step, optimizer, model
        torch._dynamo.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
