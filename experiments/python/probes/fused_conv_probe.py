"""What cuDNN's fused convolution + bias + ReLU (``torch.cudnn_convolution_relu``, BatchNorm folded
into the weights and bias) would save against what Inductor runs for each convolution of a model
in inference (cuDNN's convolution, then a Triton kernel for BatchNorm and ReLU), channels-last,
each timed alone in a CUDA graph of repeats: the sum over the model's convolutions of each, and
each fused output's distance from the unfused one.

    python3 experiments/python/probes/fused_conv_probe.py [--model inception_v4] [--batch 16] [--size 299]

(with nimble_rs installed, whose ``timing.graph_us`` times each; on the device, ``install_nimble_rs``
of scripts/device/setup.sh)

A probe: every convolution is taken as followed by BatchNorm and ReLU (true of timm's Inception
models), and the folded weights are made once, outside the timing (per call they would take the
place of Inductor's copy of each weight into channels-last).
"""

import argparse

import torch
import torch.nn.functional as F
from nimble_rs.dynamo.common.timing import graph_us


def convolutions(model_name: str, batch: int, size: int, chosen=lambda m: isinstance(m, torch.nn.Conv2d)):
    """(name, input shape, module) of each 2-D convolution of the timm model (or each module
    ``chosen`` picks), in the order one inference call on the GPU runs them (cuDNN's benchmark
    mode on)."""
    import timm

    torch.backends.cudnn.benchmark = True
    model = timm.create_model(model_name, pretrained=False).cuda().eval()
    convs = []
    hooks = [m.register_forward_pre_hook(lambda m, inputs, name=name: convs.append((name, tuple(inputs[0].shape), m))) for name, m in model.named_modules() if chosen(m)]
    with torch.no_grad():
        model(torch.randn(batch, 3, size, size, device="cuda"))
    for h in hooks:
        h.remove()
    return convs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="inception_v4")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=299)
    args = parser.parse_args()
    convs = convolutions(args.model, args.batch, args.size)
    pointwise = torch.compile(lambda y, s, b: torch.relu(y * s + b))
    totals = {"conv": 0.0, "conv + bn-relu": 0.0, "fused": 0.0}
    worst = 0.0
    print(f"{args.model}, batch {args.batch}, {len(convs)} convolutions; us each: conv alone, conv + BatchNorm-ReLU (Inductor's kernel), cuDNN fused; fused/unfused; relative max-abs difference")
    with torch.no_grad():
        for name, shape, conv in convs:
            x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
            w = conv.weight.detach().contiguous(memory_format=torch.channels_last)
            out = w.shape[0]
            scale = torch.rand(out, device="cuda") + 0.5
            shift = torch.randn(out, device="cuda")
            folded = (w * scale.view(-1, 1, 1, 1)).contiguous(memory_format=torch.channels_last)
            geometry = (conv.stride, conv.padding, conv.dilation, conv.groups)

            def alone():
                return F.conv2d(x, w, None, *geometry)

            def unfused():
                return pointwise(F.conv2d(x, w, None, *geometry), scale.view(1, -1, 1, 1), shift.view(1, -1, 1, 1))

            def fused():
                return torch.cudnn_convolution_relu(x, folded, shift, *geometry)

            a, b = unfused(), fused()
            difference = ((a - b).abs().max() / a.abs().max().clamp_min(1e-30)).item()
            worst = max(worst, difference)
            times = [graph_us(f, repeats=20, samples=30) for f in (alone, unfused, fused)]
            for key, value in zip(totals, times):
                totals[key] += value
            print(f"{name:<28} {str(list(shape)):<22} k{conv.kernel_size[0]}x{conv.kernel_size[1]} -> {out:<5} {times[0]:8.1f} {times[1]:8.1f} {times[2]:8.1f}  {times[2] / times[1]:5.2f}  {difference:.1e}")
    print(f"total us: conv alone {totals['conv']:.0f}, conv + bn-relu {totals['conv + bn-relu']:.0f}, fused {totals['fused']:.0f} ({totals['fused'] / totals['conv + bn-relu']:.2f} of unfused); largest difference {worst:.1e}")


if __name__ == "__main__":
    main()
