"""Where a call of torch.compile(backend="nimble") spends its host time, against reduce-overhead:
the median of CUDA-event timings of the whole call, of the backend's own entry (the captured
graph's input checks, copy and replay) and of the replay alone, then a cProfile of calls.

    python3 experiments/python/backend_overhead.py [--model llama|qwen2|mistral|inception-v3|inception-v4|googlenet|bert-base|TORCHVISION-NAME] [--batch 1] [--calls 200] [--timeline 20]

With --timeline N, N more calls of each system are split at their graph launch (CUDA events and
the host's clock just before and after it, no profiler): the host's time from the call to the
launch and in the launch call, the device's time from the call's start to the launch, in the graph
and after it (medians over the calls).
"""

import argparse
import cProfile
import pstats
import sys

import torch


def model_and_input(name, batch):
    if name in ("llama", "qwen2", "mistral"):
        from workloads import decoder

        model, make_input = decoder(name, batch)
        return model.cuda().eval().to(torch.bfloat16), make_input()
    import torchvision

    if name == "googlenet":
        model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)
        return model.cuda().eval(), torch.randn(batch, 3, 224, 224, device="cuda")
    if name in ("bert-base", "inception-v4"):
        from workloads import batched, coverage_model

        model, one = coverage_model(name)
        return model.cuda().eval(), batched(one(), batch, torch.float32)
    if name == "inception-v3":
        model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
        return model.cuda().eval(), torch.randn(batch, 3, 299, 299, device="cuda")
    # Any other torchvision classifier by its name (resnet50, mobilenet-v2, efficientnet-b0), at 224x224.
    builder = getattr(torchvision.models, name.replace("-", "_"), None)
    if builder is None:
        raise SystemExit(f"unknown model {name!r}: expected llama, qwen2, mistral, inception-v3, inception-v4, googlenet, bert-base or a torchvision classifier (resnet50, efficientnet-b0)")
    return builder(weights=None).cuda().eval(), torch.randn(batch, 3, 224, 224, device="cuda")


def median_ms(call, calls):
    """The backend's own timing method: each call from an idle device, CUDA events, median."""
    from nimble_rs.dynamo.common.timing import time_quartiles_ms

    return time_quartiles_ms(call, calls)[1]


def timeline(label, call, calls):
    """Where one call's time goes, medians over `calls` calls each from an idle device: CUDA
    events at the call's start, just before and just after its graph launch (torch.cuda.CUDAGraph.replay,
    which reduce-overhead's graph trees and the backend both call) and at its end, and the host's
    clock at the same points, read just after each event is recorded (``baselines.stamp``). No
    profiler: CUPTI's tracing slows graph launches many times over."""
    from baselines import between_us, stamp
    from nimble_rs.dynamo.common.timing import quartiles

    original = torch.cuda.CUDAGraph.replay
    points = []

    def replay(graph):
        before = stamp()
        original(graph)
        points.append((before, stamp()))

    torch.cuda.CUDAGraph.replay = replay
    try:
        for _ in range(5):
            call()
        rows = {"host: call to launch": [], "host: launch call": [], "device: start to launch": [], "device: graph": [], "device: after graph": [], "device: whole call": []}
        for _ in range(calls):
            points.clear()
            torch.cuda.synchronize()
            start = stamp()
            call()
            end = stamp()
            whole = between_us(start, end)
            if len(points) != 1:
                print(f"   ({label}: {len(points)} graph launches in one call; not split)")
                return
            before, after = points[0]
            rows["host: call to launch"].append((before[1] - start[1]) * 1e6)
            rows["host: launch call"].append((after[1] - before[1]) * 1e6)
            rows["device: start to launch"].append(between_us(start, before))
            rows["device: graph"].append(between_us(before, after))
            rows["device: after graph"].append(between_us(after, end))
            rows["device: whole call"].append(whole)
    finally:
        torch.cuda.CUDAGraph.replay = original
    print(f"-- where a call of {label} goes: medians of {calls} calls (us)")
    for key, values in rows.items():
        low, median, high = quartiles(values)
        print(f"   {key:<24} {median:9.1f}   (quartiles {low:.1f}-{high:.1f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--timeline", type=int, default=0, help="split this many more calls of each system at their graph launch (0: none)")
    args = parser.parse_args()
    import nimble_rs
    torch.backends.cudnn.benchmark = True
    model, x = model_and_input(args.model, args.batch)
    print(f"== {args.model}, batch {args.batch}", flush=True)
    captured = []

    def first_call(compiled, flat):
        """The backend's callable and its flat arguments at its first call (nimble_rs.dynamo.watch_calls)."""
        if not captured:
            captured.append((compiled, flat))

    with torch.no_grad():
        compiled = torch.compile(model, mode="reduce-overhead")
        print(f"reduce-overhead call      {median_ms(lambda: compiled(x), args.calls):.3f} ms")
        if args.timeline:
            timeline("reduce-overhead", lambda: compiled(x), args.timeline)
        torch._dynamo.reset()
        stop_watching = nimble_rs.dynamo.watch_calls(first_call)
        fast = torch.compile(model, backend="nimble")
        for _ in range(3):
            fast(x)
        stop_watching()
        print(f"backend call              {median_ms(lambda: fast(x), args.calls):.3f} ms")
        entry, flat = captured[0]
        print(f"backend entry (flat args) {median_ms(lambda: entry(*flat), args.calls):.3f} ms  ({len(flat)} args)")
        graph = entry.last
        print(f"accepts + copy + replay   {median_ms(lambda: graph(flat) if graph.accepts(flat) else None, args.calls):.3f} ms")
        print(f"replay alone              {median_ms(graph.graph.replay, args.calls):.3f} ms")
        print(f"report: {nimble_rs.dynamo.reports()[-1]}")
        if args.timeline:
            timeline("the backend", lambda: fast(x), args.timeline)
            timeline("the backend's entry", lambda: entry(*flat), args.timeline)
            timeline("the backend's replay alone", lambda: graph.graph.replay(), args.timeline)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            fast(x)
        torch.cuda.synchronize()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
