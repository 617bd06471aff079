"""Option ``transpose_products`` on a CUDA GPU: a classifier's product measured both ways and,
where transposed, captured in the backend's graph and computing what eager does (the rewrite's
CPU tests: test_backend_products.py). Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing
GPU fails instead."""

import torch
from torch import nn

from nimble_rs.dynamo.passes import products
from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import relative_error


def classifier():
    # Inception-v3's head at batch 16: 2048 features into 1000 classes, behind a pooling.
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)).cuda().eval()


def follows_eager(fast, model, calls=5):
    with torch.no_grad():
        for _ in range(calls):
            x = torch.randn(16, 2048, 4, 4, device="cuda")
            got = fast(x)
            assert got.is_contiguous() and got.shape == (16, 1000)
            assert relative_error(got, model(x)) < TOLERANCE


def test_the_classifier_is_measured_both_ways_once_and_matches_eager():
    products._MEASURED.clear()
    model = classifier()
    follows_eager(compiled(model), model)
    counts = last_report()["transposed_products"]
    assert counts["transposed"] + counts["slower_transposed"] == 1, counts
    assert len(products._MEASURED) == 1, products._MEASURED
    print(f"classifier 16x2048 into 1000: {counts}")


def test_a_transposed_product_is_captured_on_streams_and_matches_eager(monkeypatch):
    # Whatever this GPU measures, the transposed product runs in the captured graph.
    monkeypatch.setattr(products, "pays_on_gpu", lambda x, w, bias: True)
    model = classifier()
    for choose in ("streams", "single"):
        follows_eager(compiled(model, choose=choose), model)
        report = last_report()
        assert report["transposed_products"] == {"transposed": 1, "slower_transposed": 0}, report
        assert report["captured_shapes"] == 1, report


def test_on_by_default_and_off_when_asked():
    model = classifier()
    follows_eager(compiled(model), model)
    counts = last_report()["transposed_products"]
    assert counts["transposed"] + counts["slower_transposed"] == 1, counts
    follows_eager(compiled(model, transpose_products=False), model)
    assert "transposed_products" not in last_report()


def test_measurements_keep_no_memory():
    # Every measurement captures on one stream (timing.measuring_stream) and drops cuBLAS's
    # workspaces after it (timing.graph_us): nothing is held after the first or the later ones.
    products._MEASURED.clear()

    def measure(rows):
        x, w = torch.randn(rows, 2048, device="cuda"), torch.randn(1000, 2048, device="cuda").t()
        products.pays_on_gpu(x, w, torch.randn(1000, device="cuda"))
        del x, w
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    start = torch.cuda.memory_allocated()
    first = measure(16)
    later = [measure(rows) for rows in (8, 4, 2)]
    print(f"held after the first measurement: {(first - start) / 2**20:.1f} MiB, after three more: {(later[-1] - start) / 2**20:.1f} MiB")
    assert max([first] + later) - start < 2**20, (start, first, later)
