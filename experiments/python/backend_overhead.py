"""Where a call of torch.compile(backend="nimble") spends its host time, against reduce-overhead:
the median of CUDA-event timings of the whole call, of the backend's own entry (the captured
graph's input checks, copy and replay) and of the replay alone, then a cProfile of calls.

    python3 experiments/python/backend_overhead.py [--model llama|qwen2|mistral|inception-v3|inception-v4|googlenet|bert-base|TORCHVISION-NAME] [--batch 1] [--calls 200] [--timeline 20]

With --timeline N, N calls of each system are also traced (the Kineto profiler, each call from an
idle device) and split on the trace's one clock: the host's time from the call to its first graph
launch, the launch call itself, the device's first work after the call began, the span from the
first to the last kernel and the device's idle time inside that span (medians over the calls).
"""

import argparse
import cProfile
import pstats
import sys

import torch


def model_and_input(name, batch):
    if name in ("llama", "qwen2", "mistral"):
        from same_process import decoder

        model, make_input = decoder(name, batch)
        return model.cuda().eval().to(torch.bfloat16), make_input()
    import torchvision

    if name == "googlenet":
        model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)
        return model.cuda().eval(), torch.randn(batch, 3, 224, 224, device="cuda")
    if name in ("bert-base", "inception-v4"):
        from same_process import batched, coverage_model

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
    from nimble_rs.dynamo.runner import time_quartiles_ms

    return time_quartiles_ms(call, calls)[1]


def _intervals_union(intervals):
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def timeline(label, call, calls):
    """Medians, over `calls` traced calls, of where one call's time goes (microseconds)."""
    import json
    import statistics
    import tempfile

    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as traced:
        for index in range(calls):
            torch.cuda.synchronize()
            with record_function(f"overhead_call_{index}"):
                call()
            torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        traced.export_chrome_trace(trace.name)
        events = json.load(open(trace.name))["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("overhead_call_"))
    device = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "GraphLaunch" in str(e.get("name", ""))]
    rows = {"host before launch": [], "launch call": [], "first device work": [], "device span": [], "device idle in span": [], "call to last kernel": [], "kernels": []}
    for index, (begin, end) in enumerate(marks):
        limit = marks[index + 1][0] if index + 1 < len(marks) else float("inf")
        work = [w for w in device if begin <= w[0] < limit]
        launched = [l for l in launches if begin <= l[0] <= end]
        if not work:
            continue
        first, last = min(w[0] for w in work), max(w[1] for w in work)
        if launched:
            rows["host before launch"].append(launched[0][0] - begin)
            rows["launch call"].append(sum(l[1] - l[0] for l in launched))
        rows["first device work"].append(first - begin)
        rows["device span"].append(last - first)
        rows["device idle in span"].append((last - first) - _intervals_union(work))
        rows["call to last kernel"].append(last - begin)
        rows["kernels"].append(len(work))
    print(f"-- timeline of {label}: medians of {len(rows['device span'])} traced calls (us)")
    for key, values in rows.items():
        if values:
            print(f"   {key:<22} {statistics.median(values):9.1f}   (min {min(values):.1f}, max {max(values):.1f})")
        else:
            print(f"   {key:<22}   none in the trace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--timeline", type=int, default=0, help="trace this many calls of each system (0: none)")
    args = parser.parse_args()
    import nimble_rs
    from nimble_rs.dynamo import pipeline

    torch.backends.cudnn.benchmark = True
    model, x = model_and_input(args.model, args.batch)
    print(f"== {args.model}, batch {args.batch}", flush=True)
    captured = []
    original = pipeline.NimbleCompiled.__call__

    def spy(self, *a):
        if not captured:
            captured.append((self, a))
        return original(self, *a)

    with torch.no_grad():
        compiled = torch.compile(model, mode="reduce-overhead")
        print(f"reduce-overhead call      {median_ms(lambda: compiled(x), args.calls):.3f} ms")
        if args.timeline:
            timeline("reduce-overhead", lambda: compiled(x), args.timeline)
        torch._dynamo.reset()
        pipeline.NimbleCompiled.__call__ = spy
        fast = torch.compile(model, backend="nimble")
        for _ in range(3):
            fast(x)
        pipeline.NimbleCompiled.__call__ = original
        print(f"backend call              {median_ms(lambda: fast(x), args.calls):.3f} ms")
        entry, flat = captured[0]
        print(f"backend entry (flat args) {median_ms(lambda: entry(*flat), args.calls):.3f} ms  ({len(flat)} args)")
        graph = entry.last
        print(f"accepts + copy + replay   {median_ms(lambda: graph(flat) if graph.accepts(flat) else None, args.calls):.3f} ms")
        print(f"replay alone              {median_ms(graph.graph.replay, args.calls):.3f} ms")
        print(f"report: {nimble_rs.dynamo.reports()[-1]}")
        if args.timeline:
            timeline("the backend", lambda: fast(x), args.timeline)
            timeline("the backend's replay alone", graph.graph.replay, args.timeline)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            fast(x)
        torch.cuda.synchronize()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
