"""How much memory cuDNN's benchmark search takes for each depthwise convolution of a model, under
the key the backend's graph calls it with and under the key of an input padded beforehand.

Option ``depthwise_kernels`` times cuDNN's convolution at each site while the kernel's variants
compile; since `c77a5b8` it calls it as the graph does (the even part of the padding passed to
the convolution, only an uneven remainder made beforehand), before that on an input padded
beforehand (padding 0): two keys in cuDNN's benchmark cache, each searched on its first call,
the search trying every algorithm with the workspace it asks for. NASNet-A large float32 batch
16 prepared with a peak of 1,180 MiB at `fe87850` against 767 at `fb141f8` (H200); this
measures, in one fresh process, each site's first call under either key: the most memory
allocated during the call beyond what was allocated before it and its output, and the call's
search time. The model's inputs are channels-last, as Inductor lays them out; timm's "same"
padding (Conv2dSame: ``pad_same`` then a convolution without padding) is split as the backend
splits it.

    python3 experiments/python/probes/cudnn_search_memory_probe.py --models-json MODELS.json \
        --models nasnet-a-large [--batch 16] [--dtype float32] [--order graph-first|padded-first]
"""

import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import sys  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared modules, one folder up
from baselines import load_reference_module
from workloads import model_and_inputs, probe_parser


def same_padding(size, kernel, stride, dilation):
    """timm's ``pad_same`` along one dimension: (before, after)."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def depthwise_sites(model, example):
    """Each distinct depthwise convolution: (input shape, kernel, stride, dilation, padding as
    (top, bottom, left, right)), in the order the model first runs them."""
    sites = {}
    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.groups > 1 and module.groups == module.in_channels == module.out_channels:
            def hook(mod, inputs):
                x = inputs[0]
                kh, kw = mod.kernel_size
                if type(mod).__name__ == "Conv2dSame":
                    top, bottom = same_padding(x.shape[2], kh, mod.stride[0], mod.dilation[0])
                    left, right = same_padding(x.shape[3], kw, mod.stride[1], mod.dilation[1])
                else:
                    if isinstance(mod.padding, str):
                        raise SystemExit(f"error: a convolution with padding {mod.padding!r}: expected numbers or timm's Conv2dSame")
                    top = bottom = mod.padding[0]
                    left = right = mod.padding[1]
                key = (tuple(x.shape), (kh, kw), tuple(mod.stride), tuple(mod.dilation), (top, bottom, left, right))
                sites.setdefault(key, None)
            hooks.append(module.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(example)
    for h in hooks:
        h.remove()
    return list(sites)


def first_call(x, weight, stride, padding, dilation):
    """The first call of one convolution (its search): MiB allocated beyond the base and the
    output, and seconds."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    out = F.conv2d(x, weight, None, stride, padding, dilation, x.shape[1])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    extra = torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()
    del out
    return extra / 2**20, seconds


def main():
    parser = probe_parser(__doc__)
    parser.add_argument("--order", choices=["graph-first", "padded-first"], default="graph-first", help="which key's search runs first at each site")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the probe measures cuDNN's search on a GPU")
    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    reference = load_reference_module()
    dtype = getattr(torch, args.dtype)
    torch.backends.cudnn.benchmark = True
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {args.dtype}, batch {args.batch}, {args.order}")
    for name in args.models.split(","):
        skipped = []
        made = model_and_inputs(name, zoo, reference, args.batch, dtype, skipped)
        if made is None:
            print(f"{name}: skipped ({skipped})")
            continue
        model, make_input = made
        model = model.cuda().eval().to(dtype)
        sites = depthwise_sites(model, make_input())
        del model
        torch.cuda.empty_cache()
        print(f"{name}: {len(sites)} distinct depthwise convolutions")
        print(f"{'input':24} {'k':5} {'s':3} {'pad t,b,l,r':12} {'graph key MiB':>14} {'s':>6} {'padded MiB':>11} {'s':>6}")
        worst = {"graph": 0.0, "padded": 0.0}
        for shape, kernel, stride, dilation, (top, bottom, left, right) in sites:
            x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
            weight = torch.randn(shape[1], 1, *kernel, device="cuda", dtype=dtype)
            rows, columns = min(top, bottom), min(left, right)
            graph_input = x
            if (top, bottom, left, right) != (rows, rows, columns, columns):
                graph_input = F.pad(x, (left - columns, right - columns, top - rows, bottom - rows)).contiguous(memory_format=torch.channels_last)
            padded = F.pad(x, (left, right, top, bottom)).contiguous(memory_format=torch.channels_last)
            calls = {
                "graph": lambda: first_call(graph_input, weight, stride, (rows, columns), dilation),
                "padded": lambda: first_call(padded, weight, stride, (0, 0), dilation),
            }
            order = ["graph", "padded"] if args.order == "graph-first" else ["padded", "graph"]
            found = {key: calls[key]() for key in order}
            for key in worst:
                worst[key] = max(worst[key], found[key][0])
            print(f"{str(list(shape)):24} {kernel[0]}x{kernel[1]:<3} {stride[0]:<3} {str((top, bottom, left, right)):12} "
                  f"{found['graph'][0]:14.1f} {found['graph'][1]:6.2f} {found['padded'][0]:11.1f} {found['padded'][1]:6.2f}", flush=True)
            del x, weight, graph_input, padded
        print(f"{name}: the largest search, graph key {worst['graph']:.1f} MiB, padded beforehand {worst['padded']:.1f} MiB")


if __name__ == "__main__":
    main()
