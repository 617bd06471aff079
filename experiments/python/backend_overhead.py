"""Where a call of torch.compile(backend="nimble") spends its host time, against reduce-overhead:
the median of CUDA-event timings of the whole call, of the backend's own entry (the captured
graph's input checks, copy and replay) and of the replay alone, then a cProfile of calls.

    python3 experiments/python/backend_overhead.py [--model llama|qwen2|mistral|inception-v3|inception-v4|googlenet|bert-base|TORCHVISION-NAME] [--batch 1] [--calls 200]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1)
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
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            fast(x)
        torch.cuda.synchronize()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
