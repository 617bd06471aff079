"""What each convolution of a model costs in either memory layout: every Conv2d of the model at
the batch given, run as Inductor runs it (no bias: Inductor peels it off on a GPU) once with
NCHW (contiguous) input and weight and once channels-last (Inductor's layout for every
convolution when its layout optimization is on, the default), cuDNN's benchmark mode on and
PyTorch's default precision (TF32 for convolutions). A probe for a per-convolution layout
choice, not a record of the backend: each convolution's time is the median of 10 replays of
a CUDA graph of 20 calls (``--timing graph``, the device's time alone) or of 10 CUDA-event
timings of 20 back-to-back eager calls (``--timing eager``, the first records' method: where
a convolution takes less device time than an eager call's host work, about 10-20 us, that
host work is what it measures); the totals count each convolution as often as the model runs
it. Also times the classifier's fp32 matrix product at that batch (aten::addmm, as
Inductor calls it, against the same product transposed).

    python3 experiments/python/probes/conv_layout_probe.py --models-json MODELS.json --models googlenet,inception-v3 \
        [--batch 16] [--dtype float32] [--top 8] [--timing graph|eager]
"""

import json
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared modules, one folder up
from baselines import load_reference_module, timed
from workloads import model_and_inputs, probe_parser


def convolutions(model, example):
    """Each Conv2d's (input shape, weight shape, stride, padding, dilation, groups), with how
    often one forward runs it."""
    seen = Counter()
    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            def hook(mod, inputs, output):
                seen[(tuple(inputs[0].shape), tuple(mod.weight.shape), mod.stride, mod.padding, mod.dilation, mod.groups)] += 1
            hooks.append(module.register_forward_hook(hook))
    with torch.no_grad():
        model(example)
    for h in hooks:
        h.remove()
    return seen


TIMING = ["graph"]


def kernel_us(call, repeats=20, timings=10):
    """The median microseconds of one call, timed as ``repeats`` calls, captured in one CUDA
    graph (``TIMING`` "graph") or back-to-back (``TIMING`` "eager")."""
    if TIMING[0] == "graph":
        from nimble_rs.dynamo.common.timing import graph_us

        return graph_us(call, repeats=repeats, samples=timings)
    for _ in range(5):
        call()
    samples = [timed("cuda", call, repeats) for _ in range(timings)]
    return sorted(samples)[len(samples) // 2]


def conv_times(key, dtype):
    shape, wshape, stride, padding, dilation, groups = key
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(wshape, device="cuda", dtype=dtype)
    times = {}
    for layout, fmt in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
        with torch.no_grad():
            times[layout] = kernel_us(lambda: F.conv2d(xl, wl, None, stride, padding, dilation, groups))
    return times


def main():
    parser = probe_parser(__doc__)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--timing", choices=["graph", "eager"], default="graph")
    args = parser.parse_args()
    TIMING[0] = args.timing
    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    reference = load_reference_module()
    summary = []
    for name in args.models.split(","):
        made = model_and_inputs(name, zoo, reference, args.batch, dtype, [])
        if made is None:
            continue
        model, make = made
        example = make()
        model = model.cuda().eval().to(dtype)
        seen = convolutions(model, example)
        rows = []
        for key, count in seen.items():
            t = conv_times(key, dtype)
            rows.append((key, count, t["nchw"], t["nhwc"]))
        nhwc = sum(c * b for _, c, _, b in rows)
        nchw = sum(c * a for _, c, a, _ in rows)
        best = sum(c * min(a, b) for _, c, a, b in rows)
        faster = sum(c for _, c, a, b in rows if a < b)
        print(f"== {name} {args.dtype} b{args.batch} (timing: {args.timing}): {sum(seen.values())} convolutions ({len(rows)} distinct); all channels-last {nhwc:.0f} us, all NCHW {nchw:.0f} us, each in its faster layout {best:.0f} us; NCHW faster for {faster}", flush=True)
        print(f"   {'input':<22} {'weight':<20} {'stride':<7} {'groups':>6} {'n':>3} {'nchw us':>9} {'nhwc us':>9} {'saved us':>9}")
        for key, count, a, b in sorted(rows, key=lambda r: -(r[1] * (r[3] - r[2])))[: args.top]:
            shape, wshape, stride, padding, dilation, groups = key
            print(f"   {str(list(shape)):<22} {str(list(wshape)):<20} {str(stride[0]):<7} {groups:>6} {count:>3} {a:9.1f} {b:9.1f} {count * (b - a):9.1f}", flush=True)
        # The classifier: the last Linear (Inception-v3's first is its auxiliary head's).
        head = ([m for m in model.modules() if isinstance(m, torch.nn.Linear)] or [None])[-1]
        if head is not None:
            x = torch.randn(args.batch, head.in_features, device="cuda", dtype=dtype)
            w, bias = head.weight.detach(), head.bias.detach()
            with torch.no_grad():
                addmm = kernel_us(lambda: torch.addmm(bias, x, w.t()))
                transposed = kernel_us(lambda: torch.addmm(bias[:, None], w, x.t()))
                error = ((torch.addmm(bias[:, None], w, x.t()).t() - torch.addmm(bias, x, w.t())).abs().max() / torch.addmm(bias, x, w.t()).abs().max()).item()
            print(f"   classifier {args.batch}x{head.in_features} @ {head.in_features}x{head.out_features}: addmm {addmm:.1f} us, transposed {transposed:.1f} us (relative max difference {error:.1e})", flush=True)
        summary.append((name, nhwc, nchw, best, faster, sum(seen.values())))
        del model
        torch.cuda.empty_cache()
    print(f"\n{'model':<16} {'convs':>5} {'nhwc us':>9} {'nchw us':>9} {'best us':>9} {'best/nhwc':>9} {'nchw faster':>11}")
    for name, nhwc, nchw, best, faster, n in summary:
        print(f"{name:<16} {n:>5} {nhwc:9.0f} {nchw:9.0f} {best:9.0f} {best / nhwc:9.2f} {faster:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
