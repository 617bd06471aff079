"""Depthwise convolutions run other than by cuDNN (``depthwise_kernels``) against cuDNN's
depthwise kernels. A probe, for a timm model in inference at a batch, float32:

- each distinct depthwise convolution alone, channels-last as Inductor runs it: cuDNN (ATen,
  benchmark mode on) and the Triton kernels of the families in ``--kernels`` (default ``rows``;
  the other two measured slower than cuDNN): the row kernel in each tile shape of ``CONFIGS``,
  the tiled kernel in each of ``TILED``, the rows kernel in each of ``ROWS`` (those two with their
  weights laid out tap by tap beforehand, as a weight copy would) and, with
  ``--decomposed``, the decomposition compiled by Inductor; each timed as 20 calls in one CUDA
  graph (median of 30 replays); the largest difference from float64 of each, relative to the
  output's largest magnitude; the totals count each convolution as often as the model runs it;
- with ``--whole``: the model compiled as ``mode="reduce-overhead"`` compiles it (Inductor with
  its CUDA graphs), with and without the decomposition in AOTAutograd's table: compile
  seconds, latency (cuDNN benchmark on, 50 warm-ups, median of 100 CUDA-event timings of one
  call, fresh inputs) and the largest difference from eager.

    python3 experiments/python/probes/depthwise_probe.py --model nasnetalarge --size 331 [--batch 16] [--kernels row,tiled,rows] [--decomposed] [--whole]

(with nimble_rs installed, for its CUDA-graph timer).
"""

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared modules, one folder up
from baselines import timed as cuda_us  # noqa: E402 - after the path
from depthwise_kernels import decompose, depthwise_taps, triton_depthwise, triton_depthwise_rows, triton_depthwise_tiled
from nimble_rs.dynamo.common.timing import graph_us


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


CONFIGS = [(8, 32, 4), (16, 32, 4), (8, 64, 4), (4, 64, 4), (16, 64, 8), (32, 32, 8), (4, 128, 4), (2, 128, 4)]
# The tiled kernel's (rows, columns, channels, warps).
TILED = [(4, 8, 32, 4), (8, 8, 32, 4), (4, 4, 64, 4), (2, 8, 64, 4), (4, 8, 64, 8), (8, 8, 16, 4), (2, 4, 128, 4), (1, 8, 128, 4)]
# The rows kernel's (rows, columns, channels, warps): none spills at NASNet-A large's 5x5 stride 1
# over 168 channels (ptxas for sm_90: 64-178 registers).
ROWS = [(4, 8, 64, 4), (8, 8, 64, 4), (2, 16, 64, 4), (4, 8, 32, 4), (2, 8, 64, 4), (4, 16, 32, 4), (8, 16, 32, 4)]


def per_convolution(model_name, batch, size, decomposed, kernels):
    from fused_conv_probe import convolutions

    convs = convolutions(model_name, batch, size)
    depthwise = [(n, s, c) for n, s, c in convs if c.groups > 1 and c.groups == c.in_channels == c.out_channels]
    rows = [f"triton {w}x{c}/{nw}" for w, c, nw in CONFIGS] if "row" in kernels else []
    tiles = [f"tiled {h}x{w}x{c}/{nw}" for h, w, c, nw in TILED] if "tiled" in kernels else []
    slides = [f"rows {r}x{w}x{c}/{nw}" for r, w, c, nw in ROWS] if "rows" in kernels else []
    families = {"triton": rows, "tiled": tiles, "rows": slides}
    families = {family: labels for family, labels in families.items() if labels}
    systems = ["cudnn"] + rows + tiles + slides + (["decomposed"] if decomposed else [])
    print(f"== {model_name} b{batch}: {len(convs)} convolutions, {len(depthwise)} depthwise; us each: " + ", ".join(systems) + "; " + ", ".join(f"best {family}/cuDNN" for family in families) + "; difference from float64: cuDNN, " + ", ".join(families) + " (largest of their tiles)" + (", decomposed" if decomposed else ""), flush=True)
    bests = [f"best {family}" for family in families]
    seen, totals, worst = {}, dict.fromkeys(systems + bests, 0.0), {"cudnn": 0.0, **dict.fromkeys(families, 0.0), **({"decomposed": 0.0} if decomposed else {})}
    with torch.no_grad():
        for name, shape, conv in depthwise:
            geometry = (list(conv.stride), list(conv.padding), list(conv.dilation))
            key = (shape, tuple(conv.weight.shape), *map(tuple, geometry))
            if key not in seen:
                x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
                w = conv.weight.detach().contiguous(memory_format=torch.channels_last)
                exact = F.conv2d(x.double(), w.double(), None, *geometry, conv.groups)
                runs = {"cudnn": lambda: F.conv2d(x, w, None, *geometry, conv.groups)}
                for (bw, bc, nw), label in zip(CONFIGS, rows):
                    runs[label] = lambda bw=bw, bc=bc, nw=nw: triton_depthwise(x, w, *geometry, block_w=bw, block_c=bc, num_warps=nw)
                taps = depthwise_taps(w)
                for (bh, bw, bc, nw), label in zip(TILED, tiles):
                    runs[label] = lambda bh=bh, bw=bw, bc=bc, nw=nw: triton_depthwise_tiled(x, taps, list(conv.kernel_size), *geometry, block_h=bh, block_w=bw, block_c=bc, num_warps=nw)
                for (r, bw, bc, nw), label in zip(ROWS, slides):
                    runs[label] = lambda r=r, bw=bw, bc=bc, nw=nw: triton_depthwise_rows(x, taps, list(conv.kernel_size), *geometry, rows=r, block_w=bw, block_c=bc, num_warps=nw)
                if decomposed:
                    runs["decomposed"] = torch.compile(lambda x, w: decompose(x, w, None, *geometry, False, [0, 0], conv.groups), dynamic=False)
                    runs["decomposed"] = functools.partial(runs["decomposed"], x, w)
                errors = {"cudnn": relative(runs["cudnn"](), exact), **{family: max(relative(runs[label](), exact) for label in labels) for family, labels in families.items()}}
                if decomposed:
                    errors["decomposed"] = relative(runs["decomposed"](), exact)
                times = {label: graph_us(run, repeats=20, samples=30) for label, run in runs.items()}
                for family, labels in families.items():
                    times[f"best {family}"] = min(times[label] for label in labels)
                seen[key] = times
                for which in errors:
                    worst[which] = max(worst[which], errors[which])
                print(f"{name[-40:]:<40} {str(list(shape)):<20} k{conv.kernel_size[0]}x{conv.kernel_size[1]} s{conv.stride[0]} " + " ".join(f"{times[s]:7.1f}" for s in systems) + "  " + " ".join(f"{times[best] / times['cudnn']:5.2f}" for best in bests) + "  " + " ".join(f"{errors[k]:.1e}" for k in errors), flush=True)
                torch._dynamo.reset()
            for which in totals:
                totals[which] += seen[key][which]
    print(f"total us ({len(seen)} distinct): " + ", ".join(f"{k} {v:.0f} ({v / max(totals['cudnn'], 1e-9):.2f})" for k, v in totals.items()) + "; largest difference from float64: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()), flush=True)
    return totals


def latency_ms(call, inputs, warmups=50, timed=100):
    for i in range(warmups):
        call(inputs[i % len(inputs)])
    samples = []
    for i in range(timed):
        x = inputs[i % len(inputs)]
        samples.append(cuda_us("cuda", lambda: call(x)) / 1000.0)
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
    parser.add_argument("--decomposed", action="store_true", help="also time the decomposition compiled by Inductor")
    parser.add_argument("--kernels", default="rows", help="the Triton kernels timed, by family (row, tiled, rows), comma-separated")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    per_convolution(args.model, args.batch, args.size, args.decomposed, args.kernels.split(","))
    if args.whole:
        whole(args.model, args.batch, args.size)


if __name__ == "__main__":
    main()
