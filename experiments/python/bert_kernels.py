"""Diagnostic: where BERT-base's (1x128, float32) GPU time goes, kernel by kernel, under PyTorch
eager, its TorchScript trace and torch.compile (default mode, so that the profile sees inductor's
kernels); then scaled_dot_product_attention with the mask forms transformers makes, and the four
linear layers' shapes through F.linear against a plain torch.mm. What led to nimble::linear and
nimble::attention_mask (record: paper-figs/results/probes/bert-kernels-diagnosis-b7bb8b3.json).

usage (on the GPU machine): TORCH_LOGS=output_code python3 experiments/python/bert_kernels.py
writes $OUT/bert-kernels.json and $OUT/bert-traced-graph.txt
"""
import collections, json, os, time
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity

from baselines import timed

out = os.environ.get("OUT", "/tmp")
torch.backends.cudnn.benchmark = True
from transformers import BertConfig, BertModel

model = BertModel(BertConfig(torchscript=True, return_dict=False, use_cache=False)).cuda().eval()
x = torch.randint(0, 30522, (1, 128), device="cuda")
report = {}


def kernels(fn, arg, n=10):
    with torch.no_grad():
        for _ in range(5):
            fn(*arg)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(n):
                fn(*arg)
            torch.cuda.synchronize()
    tot = collections.Counter(); cnt = collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] += e.time_range.elapsed_us() / n
            cnt[e.name] += 1 / n
    rows = sorted(((round(t, 2), round(cnt[k], 1), k[:140]) for k, t in tot.items()), reverse=True)
    return {"total_us": round(sum(tot.values()), 1), "kernels_per_call": round(sum(cnt.values()), 1), "rows": rows}


def graph_time(fn, arg, iters=100):
    with torch.no_grad():
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(*arg)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*arg)
        for _ in range(30):
            g.replay()
        times = [timed("cuda", g.replay) for _ in range(iters)]
    times.sort()
    return round(times[len(times) // 2], 1)


def show(name, r):
    print(f"== {name}: {r['total_us']} us of kernels, {r['kernels_per_call']} kernels per call")
    for row in r["rows"][:25]:
        print("   ", row)


with torch.no_grad():
    traced = torch.jit.trace(model, (x,), strict=False, check_trace=False)
report["traced_graph"] = str(traced.inlined_graph) if hasattr(traced, "inlined_graph") else str(traced.graph)
with open(f"{out}/bert-traced-graph.txt", "w") as f:
    f.write(report["traced_graph"])

for name, fn in [("eager", model), ("traced", traced)]:
    with torch.jit.fuser("none"):
        r = kernels(fn, (x,)); r["graph_us"] = graph_time(fn, (x,))
    report[name] = r; show(name, r); print("   cuda graph replay median us", r["graph_us"])

compiled = torch.compile(model, mode="default")
started = time.time()
with torch.no_grad():
    compiled(x)
print("compile s", round(time.time() - started, 1))
r = kernels(compiled, (x,)); r["graph_us"] = graph_time(compiled, (x,))
report["compile_default"] = r; show("compile default", r); print("   cuda graph replay median us", r["graph_us"])

# SDPA with the traced model's mask forms
q, k, v = (torch.randn(1, 12, 128, 64, device="cuda") for _ in range(3))
base = torch.ones(1, 1, 128, 1, device="cuda") >= 0
masks = {
    "bool_expanded": base.expand(1, 1, 128, 128),
    "bool_contiguous": base.expand(1, 1, 128, 128).contiguous(),
    "float_contiguous": torch.zeros(1, 1, 128, 128, device="cuda"),
    "float_expanded": torch.zeros(1, 1, 1, 128, device="cuda").expand(1, 1, 128, 128),
    "none": None,
}
report["sdpa"] = {}
for name, m in masks.items():
    fn = lambda q, k, v, m=m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    r = kernels(fn, (q, k, v)); r["graph_us"] = graph_time(fn, (q, k, v))
    report["sdpa"][name] = r
    print(f"sdpa {name}: {r['kernels_per_call']} kernels, {r['total_us']} us busy, graph {r['graph_us']} us; top: {[row[2][:60] for row in r['rows'][:3]]}")
from torch.nn.attention import sdpa_kernel, SDPBackend
import warnings
for name in ["bool_expanded", "bool_contiguous"]:
    with warnings.catch_warnings(record=True) as w, sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        warnings.simplefilter("always")
        try:
            F.scaled_dot_product_attention(q, k, v, attn_mask=masks[name]); print("efficient ok for", name)
        except Exception as e:
            print("efficient refused for", name, ":", str(e)[:200], [str(x.message)[:300] for x in w])

# GEMMs, float32 highest
report["gemm"] = {}
for (m, n, kdim) in [(128, 2304, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072)]:
    a = torch.randn(1, m, kdim, device="cuda"); w = torch.randn(n, kdim, device="cuda"); b = torch.randn(n, device="cuda")
    lin = kernels(lambda a, w, b: F.linear(a, w, b), (a, w, b)); lin["graph_us"] = graph_time(lambda a, w, b: F.linear(a, w, b), (a, w, b))
    a2 = a.view(m, kdim); wt = w.t().contiguous()
    mm = kernels(lambda a2, wt: torch.mm(a2, wt), (a2, wt)); mm["graph_us"] = graph_time(lambda a2, wt: torch.mm(a2, wt), (a2, wt))
    key = f"{m}x{n}x{kdim}"
    report["gemm"][key] = {"linear": lin, "mm_wt": mm}
    print(f"gemm {key}: linear {lin['graph_us']} us {[r[2][:70] for r in lin['rows'][:2]]}; mm(a, w.t() contiguous) {mm['graph_us']} us {[r[2][:70] for r in mm['rows'][:2]]}")

json.dump(report, open(f"{out}/bert-kernels.json", "w"), indent=1)
