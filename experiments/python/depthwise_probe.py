"""Depthwise convolutions as Inductor's pointwise kernels against cuDNN's depthwise kernels
(``nimble_rs.dynamo.depthwise``). A probe, for a timm model in inference at a batch, float32:

- each distinct depthwise convolution alone, channels-last as Inductor runs it: cuDNN (ATen,
  benchmark mode on) and the decomposition compiled by Inductor, each timed as 20 calls in one
  CUDA graph (median of 30 replays); each one's largest difference from float64, relative to
  the output's largest magnitude; the totals count each convolution as often as the model runs it;
- with ``--whole``: the model compiled as ``mode="reduce-overhead"`` compiles it (Inductor with
  its CUDA graphs), with and without the decomposition in AOTAutograd's table: compile
  seconds, latency (cuDNN benchmark on, 50 warm-ups, median of 100 CUDA-event timings of one
  call, fresh inputs) and the largest difference from eager.

    python3 experiments/python/depthwise_probe.py --model nasnetalarge --size 331 [--batch 16] [--whole]

(with nimble_rs installed).
"""

import argparse
import functools
import statistics
import time

import torch
import torch.nn.functional as F
from nimble_rs.dynamo.depthwise import decompose
from nimble_rs.dynamo.runner import graph_us


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def per_convolution(model_name, batch, size):
    from fused_conv_probe import convolutions

    convs = convolutions(model_name, batch, size)
    depthwise = [(n, s, c) for n, s, c in convs if c.groups > 1 and c.groups == c.in_channels == c.out_channels]
    print(f"== {model_name} b{batch}: {len(convs)} convolutions, {len(depthwise)} depthwise; us each: cuDNN, decomposed; decomposed/cuDNN; difference from float64: cuDNN, decomposed; compile s", flush=True)
    seen, totals, worst = {}, {"cudnn": 0.0, "decomposed": 0.0}, {"cudnn": 0.0, "decomposed": 0.0}
    with torch.no_grad():
        for name, shape, conv in depthwise:
            geometry = (list(conv.stride), list(conv.padding), list(conv.dilation))
            key = (shape, tuple(conv.weight.shape), *map(tuple, geometry))
            if key not in seen:
                x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
                w = conv.weight.detach().contiguous(memory_format=torch.channels_last)
                started = time.perf_counter()
                compiled = torch.compile(lambda x, w: decompose(x, w, None, *geometry, False, [0, 0], conv.groups), dynamic=False)
                out = compiled(x, w)
                seconds = time.perf_counter() - started
                exact = F.conv2d(x.double(), w.double(), None, *geometry, conv.groups)
                times = {
                    "cudnn": graph_us(lambda: F.conv2d(x, w, None, *geometry, conv.groups), repeats=20, samples=30),
                    "decomposed": graph_us(lambda: compiled(x, w), repeats=20, samples=30),
                }
                errors = {"cudnn": relative(F.conv2d(x, w, None, *geometry, conv.groups), exact), "decomposed": relative(out, exact)}
                seen[key] = times
                for which in worst:
                    worst[which] = max(worst[which], errors[which])
                print(f"{name:<40} {str(list(shape)):<20} k{conv.kernel_size[0]}x{conv.kernel_size[1]} s{conv.stride[0]} {times['cudnn']:8.1f} {times['decomposed']:8.1f}  {times['decomposed'] / times['cudnn']:5.2f}  {errors['cudnn']:.1e} {errors['decomposed']:.1e}  {seconds:.1f}", flush=True)
                torch._dynamo.reset()
            for which in totals:
                totals[which] += seen[key][which]
    print(f"total us: cuDNN {totals['cudnn']:.0f}, decomposed {totals['decomposed']:.0f} ({totals['decomposed'] / max(totals['cudnn'], 1e-9):.2f}); {len(seen)} distinct; largest difference from float64: cuDNN {worst['cudnn']:.1e}, decomposed {worst['decomposed']:.1e}", flush=True)
    return totals


def latency_ms(call, inputs, warmups=50, timed=100):
    for i in range(warmups):
        call(inputs[i % len(inputs)])
    samples = []
    for i in range(timed):
        x = inputs[i % len(inputs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(x)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    samples.sort()
    return statistics.median(samples), samples[len(samples) // 4], samples[3 * len(samples) // 4]


def whole(model_name, batch, size):
    import timm
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    model = timm.create_model(model_name, pretrained=False).cuda().eval()
    inputs = [torch.randn(batch, 3, size, size, device="cuda") for _ in range(8)]
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs[:2]]
        eager_ms = latency_ms(model, inputs)
    print(f"== {model_name} b{batch} whole model: eager {eager_ms[0]:.3f} ms", flush=True)
    rows = {}
    for label, table in (("reduce-overhead", None), ("reduce-overhead + decomposed", {**select_decomp_table(), torch.ops.aten.convolution.default: decompose})):
        torch._dynamo.reset()
        backend = functools.partial(compile_fx, config_patches={"triton.cudagraphs": True}, decompositions=table)
        compiled = torch.compile(model, backend=backend)
        with torch.no_grad():
            started = time.perf_counter()
            compiled(inputs[0])
            torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            error = max(relative(compiled(x).clone(), e) for x, e in zip(inputs[:2], eager))
            ms = latency_ms(compiled, inputs)
        rows[label] = ms
        print(f"{label:<30} {ms[0]:8.3f} ms (quartiles {ms[1]:.3f}-{ms[2]:.3f})  compile {seconds:6.1f} s  difference from eager {error:.1e}", flush=True)
        del compiled
    base = rows["reduce-overhead"][0]
    print(f"decomposed / reduce-overhead: {rows['reduce-overhead + decomposed'][0] / base:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="nasnetalarge")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=331)
    parser.add_argument("--whole", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    per_convolution(args.model, args.batch, args.size)
    if args.whole:
        whole(args.model, args.batch, args.size)


if __name__ == "__main__":
    main()
