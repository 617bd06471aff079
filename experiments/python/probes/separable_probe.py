"""NASNet-A large's separable convolutions as one Triton kernel each (``separable_kernels``)
against the kernels Inductor runs for them. A probe, float32, channels-last, inference:

for each distinct separable convolution of the timm model (a depthwise convolution, the 1x1
convolution after it, the BatchNorm after that and the ReLU where one follows), timed alone
as 20 calls in one CUDA graph (median of 30 replays):

- ``inductor``: what the compiled model runs: for timm's "same" padding at stride 2, a Triton
  kernel writing the ReLU'd input padded (Inductor's); cuDNN's depthwise convolution; cuDNN's
  1x1 convolution; a Triton kernel applying the BatchNorm as a scale and shift (and the ReLU).
  A ReLU'd input with symmetric padding is taken as already written (Inductor writes it once
  for all its readers), which counts nothing of it against Inductor;
- ``fused``: ``triton_separable`` over the unpadded input (the ReLU on reading where Inductor
  padded), the BatchNorm folded into the 1x1's weights, in each tile shape of ``CONFIGS``;
  its best per convolution (``best``).

Each output's largest difference from the same computation in float64, relative to its largest
magnitude; the totals count each convolution as often as the model runs it.

    python3 experiments/python/probes/separable_probe.py [--model nasnetalarge] [--size 331] [--batch 16] [--precision tf32]

(with nimble_rs installed, for its CUDA-graph timer).
"""

import argparse
import signal
import time

import torch
import torch.nn.functional as F
from nimble_rs.dynamo.common.timing import graph_us
from depthwise_kernels import depthwise_taps
from separable_kernels import fold, same_padding, triton_separable

# (pixels, output channels, input channels per step, warps) of each program.
CONFIGS = [(32, 64, 32, 4), (64, 64, 32, 8), (32, 128, 32, 4), (64, 128, 32, 8), (128, 64, 16, 8), (32, 256, 16, 8), (16, 512, 16, 8), (32, 512, 32, 8)]


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def separables(model_name: str, batch: int, size: int):
    """(name, input shape, SeparableConv2d, ReLU before, ReLU after) of each separable
    convolution of the timm model, in the order one call runs them."""
    from fused_conv_probe import convolutions

    found = convolutions(model_name, batch, size, chosen=lambda m: type(m).__name__ == "SeparableConv2d")
    # timm's BranchSeparables: ReLU, separable_1, BatchNorm, ReLU, separable_2, BatchNorm; so a
    # ReLU comes both before and after the first, neither around the second.
    return [(name, shape, m, name.endswith("separable_1"), name.endswith("separable_1")) for name, shape, m in found]


def padding_of(conv, height: int, width: int):
    """(top, bottom, left, right) and whether it is timm's dynamic "same" padding (a padded copy
    in the compiled model)."""
    kh, kw = conv.kernel_size
    if type(conv).__name__ == "Conv2dSame":
        top, bottom = same_padding(height, kh, conv.stride[0], conv.dilation[0])
        left, right = same_padding(width, kw, conv.stride[1], conv.dilation[1])
        return (top, bottom, left, right), True
    ph, pw = conv.padding
    return (ph, ph, pw, pw), False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="nasnetalarge")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=331)
    parser.add_argument("--precision", default="tf32", choices=["tf32", "ieee"])
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, precision {args.precision}", flush=True)
    found = separables(args.model, args.batch, args.size)
    labels = [f"{m}x{n}x{k}/{w}" for m, n, k, w in CONFIGS]
    print(f"== {args.model} b{args.batch}: {len(found)} separable convolutions; us each: inductor (padded copy, depthwise, 1x1, BatchNorm), fused per tile shape ({', '.join(labels)}), best; best/inductor; difference from float64: inductor, fused (largest of its tiles)", flush=True)
    # One Inductor kernel per shape, as the compiled model has (not a dynamic-shape kernel, and
    # not eager's ops once Dynamo's limit of recompilations is reached).
    torch._dynamo.config.recompile_limit = 1000
    affine = torch.compile(lambda y, s, b: y * s + b, dynamic=False)
    affine_relu = torch.compile(lambda y, s, b: torch.relu(y * s + b), dynamic=False)
    pad_relu = torch.compile(lambda x, pads: F.pad(torch.relu(x), pads), dynamic=False)
    pad = torch.compile(lambda x, pads: F.pad(x, pads), dynamic=False)
    seen, totals, worst = {}, {"inductor": 0.0, "best": 0.0, "depthwise": 0.0, "pointwise": 0.0, "copy": 0.0, "batchnorm": 0.0}, {"inductor": 0.0, "fused": 0.0}
    started = time.perf_counter()
    # Stopped by ``timeout``, the totals so far are still printed (of the convolutions reached).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        timed(found, labels, affine, affine_relu, pad_relu, pad, args.precision, seen, totals, worst)
    except KeyboardInterrupt:
        print("(stopped: the totals below count the convolutions reached)", flush=True)
    print(f"total us ({len(seen)} distinct, {len(found)} in all, {time.perf_counter() - started:.0f} s): inductor {totals['inductor']:.0f} (copies {totals['copy']:.0f}, depthwise {totals['depthwise']:.0f}, 1x1 {totals['pointwise']:.0f}, BatchNorm {totals['batchnorm']:.0f}), fused at its best per convolution {totals['best']:.0f} ({totals['best'] / max(totals['inductor'], 1e-9):.2f}); largest difference from float64: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()), flush=True)


def _interrupt(*_):
    raise KeyboardInterrupt


def timed(found, labels, affine, affine_relu, pad_relu, pad, precision, seen, totals, worst):
    """Times each distinct separable convolution into ``seen`` and adds every one's times to
    ``totals`` as it is reached."""
    with torch.no_grad():
        for name, shape, sep, relu_in, relu_out in found:
            dw, pw = sep.depthwise_conv2d, sep.pointwise_conv2d
            padding, dynamic = padding_of(dw, shape[2], shape[3])
            key = (shape, tuple(dw.weight.shape), tuple(pw.weight.shape), tuple(dw.stride), padding, dynamic, relu_in, relu_out)
            if key not in seen:
                torch.manual_seed(len(seen))
                x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
                # The input as the depthwise convolution reads it (ReLU'd where one comes before).
                xr = (torch.relu(x) if relu_in else x).contiguous(memory_format=torch.channels_last)
                wd = dw.weight.detach().contiguous(memory_format=torch.channels_last)
                wp = pw.weight.detach().contiguous(memory_format=torch.channels_last)
                co = wp.shape[0]
                scale, shift = torch.rand(co, device="cuda") + 0.5, torch.randn(co, device="cuda")
                s4, b4 = scale.view(1, -1, 1, 1), shift.view(1, -1, 1, 1)
                top, bottom, left, right = padding
                post = affine_relu if relu_out else affine

                def copy():
                    return (pad_relu if relu_in else pad)(x, [left, right, top, bottom])

                if dynamic:
                    padded = copy()

                    def depthwise():
                        return F.conv2d(padded, wd, None, dw.stride, 0, dw.dilation, dw.groups)
                else:
                    def depthwise():
                        return F.conv2d(xr, wd, None, dw.stride, (top, left), dw.dilation, dw.groups)

                middle = depthwise()

                def pointwise():
                    return F.conv2d(middle, wp)

                product = pointwise()

                def batchnorm():
                    return post(product, s4, b4)

                def inductor():
                    if dynamic:
                        copy()
                    return post(F.conv2d(depthwise(), wp), s4, b4)

                taps = depthwise_taps(wd.contiguous())
                weight_t, bias = fold(wp, scale, shift)
                source, relu_read = (x, relu_in) if dynamic else (xr, False)
                runs = {}
                for (bm, bn, bk, nw), label in zip(CONFIGS, labels):
                    runs[label] = lambda bm=bm, bn=bn, bk=bk, nw=nw: triton_separable(source, taps, weight_t, bias, dw.kernel_size, dw.stride, padding, dw.dilation, relu_read, relu_out, bm, bn, bk, nw, precision)
                exact = torch.relu(x.double()) if relu_in else x.double()
                exact = F.conv2d(F.pad(exact, [left, right, top, bottom]), wd.double(), None, dw.stride, 0, dw.dilation, dw.groups)
                exact = F.conv2d(exact, wp.double()) * s4.double() + b4.double()
                exact = torch.relu(exact) if relu_out else exact
                errors = {"inductor": relative(inductor(), exact), "fused": max(relative(run(), exact) for run in runs.values())}
                times = {label: graph_us(run, repeats=20, samples=30) for label, run in runs.items()}
                times["best"] = min(times.values())
                times["inductor"] = graph_us(inductor, repeats=20, samples=30)
                times["depthwise"] = graph_us(depthwise, repeats=20, samples=30)
                times["pointwise"] = graph_us(pointwise, repeats=20, samples=30)
                times["batchnorm"] = graph_us(batchnorm, repeats=20, samples=30)
                times["copy"] = graph_us(copy, repeats=20, samples=30) if dynamic else 0.0
                seen[key] = times
                for which in errors:
                    worst[which] = max(worst[which], errors[which])
                geometry = f"k{dw.kernel_size[0]} s{dw.stride[0]} {'same' if dynamic else 'pad'}{list(padding)} ->{co}"
                print(f"{name[-34:]:<34} {str(list(shape)):<20} {geometry:<26} {times['inductor']:7.1f} ({times['copy']:.1f} {times['depthwise']:.1f} {times['pointwise']:.1f} {times['batchnorm']:.1f}) " + " ".join(f"{times[label]:7.1f}" for label in labels) + f" {times['best']:7.1f}  {times['best'] / times['inductor']:5.2f}  {errors['inductor']:.1e} {errors['fused']:.1e}", flush=True)
            for which in totals:
                totals[which] += seen[key][which]


if __name__ == "__main__":
    main()
