"""Convolution, BatchNorm and ReLU as one kernel without touching the weights: cuDNN's graph API
(through NVIDIA's cudnn-frontend Python package) fuses the convolution with a per-channel scale,
a bias and a ReLU in its epilogue, so the convolution's arithmetic (TF32 on the weights as they
are) is eager's and only the BatchNorm moves into the kernel. A probe, for each convolution of a
model in inference, channels-last, each timed alone in a CUDA graph of repeats:

- conv alone (cuDNN through ATen), conv + BatchNorm-ReLU (then a compiled pointwise kernel, as
  Inductor runs it), the weights folded into cuDNN's fused conv+bias+ReLU (option
  ``fuse_convolutions`` today) and cuDNN's graph conv -> scale -> bias -> ReLU;
- each fused output's largest difference from eager's conv + BatchNorm + ReLU (TF32 on, as
  eager runs), relative to that output's largest magnitude, and eager's own difference from the
  same chain in float64 (TF32's error);
- cuDNN's first plan and the fastest of its plans (each built and timed), and the better of
  that and the unfused pair (what a per-shape choice would run);
- the seconds cuDNN took to build each graph's plans.

    python3 experiments/python/probes/cudnn_graph_probe.py [--model inception_v4] [--batch 16] [--size 299] [--limit N]

(with nimble_rs and nvidia-cudnn-frontend installed).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from nimble_rs.dynamo.common.timing import graph_us


class GraphConv:
    """One cuDNN graph: relu(conv(x, w) * scale + bias), float32 in and out, TF32 allowed."""

    def __init__(self, cudnn, handle, x, w, scale, bias, stride, padding, dilation, plans=8):
        started = time.perf_counter()
        self.cudnn, self.handle = cudnn, handle
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        self.x, self.w = g.tensor_like(x), g.tensor_like(w)
        self.s, self.b = g.tensor_like(scale), g.tensor_like(bias)
        y = g.conv_fprop(image=self.x, weight=self.w, padding=list(padding), stride=list(stride), dilation=list(dilation), compute_data_type=cudnn.data_type.FLOAT)
        y = g.scale(input=y, scale=self.s)
        y = g.bias(input=y, bias=self.b)
        self.y = g.relu(input=y)
        self.y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        self.graph = g
        # Every plan cuDNN offers (up to ``plans``) that builds, each timed later (``autotune``).
        self.plans = []
        for index in range(min(g.get_execution_plan_count(), plans)):
            try:
                g.build_plan_at_index(index)
            except Exception:  # noqa: BLE001 - a plan that does not build is not a candidate
                continue
            self.plans.append((index, g.get_workspace_size_plan_at_index(index)))
        if not self.plans:
            raise RuntimeError("no plan builds")
        self.workspace = torch.empty(max(max(w for _, w in self.plans), 1), dtype=torch.uint8, device="cuda")
        self.index = self.plans[0][0]
        self.seconds = time.perf_counter() - started

    def __call__(self, x, w, scale, bias, out, index=None):
        self.cudnn.set_stream(self.handle, torch.cuda.current_stream().cuda_stream)
        self.graph.execute_plan_at_index({self.x: x, self.w: w, self.s: scale, self.b: bias, self.y: out}, self.workspace, index=self.index if index is None else index, handle=self.handle)
        return out

    def autotune(self, timer, *args):
        """Times every built plan; keeps the fastest. Returns (first plan's us, fastest us)."""
        times = {index: timer(lambda index=index: self(*args, index=index)) for index, _ in self.plans}
        first = times[self.plans[0][0]]
        self.index = min(times, key=times.get)
        return first, times[self.index]


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="inception_v4")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=299)
    parser.add_argument("--limit", type=int, default=0, help="the first N convolutions only")
    args = parser.parse_args()
    import cudnn
    from fused_conv_probe import convolutions

    print(f"cudnn-frontend {cudnn.__version__}, cuDNN backend {cudnn.backend_version()}, torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()})")
    convs = convolutions(args.model, args.batch, args.size)
    if args.limit:
        convs = convs[: args.limit]
    handle = cudnn.create_handle()
    pointwise = torch.compile(lambda y, s, b: torch.relu(y * s + b))
    keys = ("conv", "conv + bn-relu", "folded", "graph first", "graph", "best")
    totals = dict.fromkeys(keys, 0.0)
    worst = {"folded": 0.0, "graph": 0.0, "tf32": 0.0}
    failed, built = 0, 0.0
    seen = {}  # a shape met before: its times again, not measured twice
    print(f"{args.model}, batch {args.batch}, {len(convs)} convolutions; us each: " + ", ".join(keys) + "; graph/unfused; relative max-abs difference from eager: folded, graph (eager from float64); build s")
    with torch.no_grad():
        for name, shape, conv in convs:
            if conv.groups != 1:
                continue
            key = (shape, tuple(conv.weight.shape), conv.stride, conv.padding, conv.dilation)
            if key in seen:
                for name_ in keys:
                    totals[name_] += seen[key][name_]
                print(f"{name:<28} {str(list(shape)):<22} as above")
                continue
            x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
            w = conv.weight.detach().contiguous(memory_format=torch.channels_last)
            k = w.shape[0]
            scale = (torch.rand(k, device="cuda") + 0.5).view(1, k, 1, 1)
            shift = torch.randn(k, device="cuda").view(1, k, 1, 1)
            folded = (w * scale.view(-1, 1, 1, 1)).contiguous(memory_format=torch.channels_last)
            geometry = (conv.stride, conv.padding, conv.dilation, conv.groups)
            eager = torch.relu(F.conv2d(x, w, None, *geometry) * scale + shift)
            exact = torch.relu(F.conv2d(x.double(), w.double(), None, *geometry) * scale.double() + shift.double())
            out = torch.empty_like(eager).contiguous(memory_format=torch.channels_last)
            try:
                fused = GraphConv(cudnn, handle, x, w, scale, shift, conv.stride, conv.padding, conv.dilation)
            except Exception as error:  # noqa: BLE001 - a probe: count and go on
                failed += 1
                print(f"{name:<28} {str(list(shape)):<22} graph not built: {type(error).__name__}: {str(error)[:160]}")
                continue
            built += fused.seconds

            runs = {
                "conv": lambda: F.conv2d(x, w, None, *geometry),
                "conv + bn-relu": lambda: pointwise(F.conv2d(x, w, None, *geometry), scale, shift),
                "folded": lambda: torch.cudnn_convolution_relu(x, folded, shift.view(-1), *geometry),
            }
            timer = lambda f: graph_us(f, repeats=20, samples=30)
            times = {which: timer(f) for which, f in runs.items()}
            times["graph first"], times["graph"] = fused.autotune(timer, x, w, scale, shift, out)
            times["best"] = min(times["graph"], times["conv + bn-relu"])
            differences = {"folded": relative(runs["folded"](), eager), "graph": relative(fused(x, w, scale, shift, out), eager), "tf32": relative(eager, exact)}
            for which, value in differences.items():
                worst[which] = max(worst[which], value)
            seen[key] = times
            for name_ in keys:
                totals[name_] += times[name_]
            print(f"{name:<28} {str(list(shape)):<22} k{conv.kernel_size[0]}x{conv.kernel_size[1]} -> {k:<5} " + " ".join(f"{times[name_]:8.1f}" for name_ in keys) + f"  {times['graph'] / times['conv + bn-relu']:5.2f}  {differences['folded']:.1e} {differences['graph']:.1e} ({differences['tf32']:.1e})  {fused.seconds:.2f} plans {len(fused.plans)} kept {fused.index}")
    print(
        "total us: " + ", ".join(f"{key} {totals[key]:.0f}" for key in keys) + f"; of unfused: graph {totals['graph'] / max(totals['conv + bn-relu'], 1e-9):.2f}, best {totals['best'] / max(totals['conv + bn-relu'], 1e-9):.2f}, folded {totals['folded'] / max(totals['conv + bn-relu'], 1e-9):.2f}; "
        f"largest difference from eager: folded {worst['folded']:.1e}, graph {worst['graph']:.1e} (eager from float64 {worst['tf32']:.1e}); graphs not built {failed}; build seconds {built:.1f}"
    )


if __name__ == "__main__":
    main()
