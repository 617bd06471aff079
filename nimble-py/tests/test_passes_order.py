"""The graph rewrites run from one ordered list (``nimble_rs.dynamo.passes.order.PASSES``): each
entry is an option of the backend with its own report key, the list runs in its order on an
inference graph only, and a pass that needs a GPU is skipped on the CPU."""

import dataclasses

import torch

import nimble_rs
from models import Inception
from nimble_rs.dynamo.options import Options
from nimble_rs.dynamo.passes import order


def test_every_pass_is_an_option_with_a_report_key_of_its_own():
    fields = {f.name for f in dataclasses.fields(Options)}
    assert [p.option for p in order.PASSES if p.option not in fields] == []
    keys = [p.report for p in order.PASSES]
    assert len(set(keys)) == len(keys) == len(order.PASSES) >= 4
    # Merging comes first (the later passes see the merged convolution once); folding before the
    # depthwise kernels, which take the convolutions folding left.
    options = [p.option for p in order.PASSES]
    assert options.index("merge_convolutions") < options.index("fuse_convolutions") < options.index("depthwise_kernels")


def test_the_list_runs_in_order_on_inference_graphs_and_skips_the_gpu_passes_on_the_cpu(monkeypatch):
    ran = []
    listed = order.PASSES
    monkeypatch.setattr(order, "PASSES", tuple(dataclasses.replace(p, rewrite=lambda gm, value, name=p.option: ran.append(name) or {"ran": name}) for p in listed))
    options = Options(merge_convolutions=True, fuse_convolutions=True, depthwise_kernels=True, transpose_products=True)
    graph = torch.fx.symbolic_trace(torch.nn.Identity())
    assert order.rewrite(graph, options, "forward", on_cuda=True) == {}
    assert order.rewrite(graph, options, "backward", on_cuda=True) == {}
    cpu = order.rewrite(graph, options, "inference", on_cuda=False)
    assert ran == [p.option for p in listed if not p.needs_cuda] and list(cpu) == [p.report for p in listed if not p.needs_cuda]
    ran.clear()
    gpu = order.rewrite(graph, options, "inference", on_cuda=True)
    assert ran == [p.option for p in listed] and list(gpu) == [p.report for p in listed]
    ran.clear()
    assert order.rewrite(graph, Options(depthwise_kernels=False, transpose_products=False), "inference", on_cuda=True) == {}


def test_the_backend_reports_what_the_list_ran():
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    with torch.no_grad():
        torch.compile(model, backend="nimble", options={"merge_convolutions": True})(x)
    report = nimble_rs.dynamo.reports()[before]
    assert report["merged_convolutions"] == [3, 3], report
    # On the CPU the passes that measure kernels on a GPU did not run.
    assert not {"fused_convolutions", "depthwise_kernels", "transposed_products"} & set(report), report
