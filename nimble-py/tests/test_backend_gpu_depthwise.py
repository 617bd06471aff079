"""Option ``depthwise_kernels`` on a CUDA GPU: our depthwise kernel against cuDNN's output in
every tile the backend measures (and reading through a BatchNorm, a ReLU and an uneven
padding), each shape
measured once, the kernel captured in the backend's
graph on streams and alone, computing what eager does, and reading the weights in place, and its
measurements kept from counting a pause of this process (the rewrite's CPU tests and the kernel
in Triton's interpreter: test_backend_depthwise.py).
Skipped without CUDA; with NIMBLE_REQUIRE_GPU=1 a missing GPU fails instead."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nimble_rs.dynamo.passes import depthwise, depthwise_kernel
from gpu_backend import TOLERANCE, compiled, gpu, last_report  # noqa: F401 (gpu: the autouse fixture)
from models import relative_error


class Separable(nn.Module):
    """Two of NASNet-A large's stem branches in small: a ReLU, a 5x5 depthwise convolution at
    stride 2 with timm's padding before it, a 1x1, a BatchNorm, and a 3x3 depthwise convolution
    with a bias beside a 7x7 one, summed."""

    def __init__(self, channels=96):
        super().__init__()
        self.first = nn.Conv2d(channels, channels, 5, stride=2, groups=channels, bias=False)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        self.small = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.large = nn.Conv2d(channels, channels, 7, padding=3, groups=channels, bias=False)

    def forward(self, x):
        y = self.norm(self.pointwise(self.first(F.pad(torch.relu(x), (1, 2, 1, 2)))))
        return self.small(y) + self.large(torch.relu(y))


def model():
    m = Separable().cuda().eval()
    with torch.no_grad():
        m.norm.running_mean.uniform_(-0.5, 0.5)
        m.norm.running_var.uniform_(0.5, 1.5)
    return m


def first_site(node, timed):
    """The choice, whatever was measured: the first site whose output matched cuDNN's, in its
    fastest tile."""
    return next(((at, found.tile) for at, found in timed if found and found.tile is not None), None)


def follows_eager(fast, m, calls=4):
    with torch.no_grad():
        for _ in range(calls):
            x = torch.randn(4, 96, 83, 83, device="cuda")
            got = fast(x)
            assert relative_error(got, m(x)) < TOLERANCE


def test_every_tile_computes_what_cudnn_does():
    # (42 channels: loads of two at a time, as NASNet-A large's stem has them)
    for k, stride, padding, shape in ((3, 1, 1, (2, 168, 21, 21)), (5, 2, 0, (2, 96, 45, 44)), (7, 1, 3, (2, 42, 42, 42))):
        x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
        w, b = torch.randn(shape[1], 1, k, k, device="cuda"), torch.randn(shape[1], device="cuda")
        expected = F.conv2d(x.double(), w.double(), b.double(), stride, padding, 1, shape[1])
        # (and in those whose kernel columns are a loop: option value "columns")
        for tile in depthwise.tiles(k * k) + depthwise.tiles(k * k, column_loop=True):
            got = depthwise_kernel.triton_depthwise(x, depthwise_kernel.taps_of(w), b, [k, k], [stride] * 2, [padding] * 2, [1, 1], *tile)
            assert got.is_contiguous(memory_format=torch.channels_last) and got.shape == expected.shape
            assert ((got.double() - expected).abs().max() / expected.abs().max()).item() < 1e-6, (k, tile)


def test_reading_through_a_batchnorm_a_relu_and_an_uneven_padding_computes_what_cudnn_does():
    x = torch.randn(2, 96, 43, 42, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(96, 1, 5, 5, device="cuda")
    scale, shift = torch.rand(96, device="cuda") + 0.5, torch.randn(96, device="cuda")
    source = torch.relu(x * scale.view(1, 96, 1, 1) + shift.view(1, 96, 1, 1))
    expected = F.conv2d(F.pad(source, (1, 2, 0, 3)).double(), w.double(), None, 2, 0, 1, 96)
    for tile in depthwise.tiles(25) + depthwise.tiles(25, column_loop=True):
        got = depthwise_kernel.triton_depthwise(x, depthwise_kernel.taps_of(w), None, [5, 5], [2, 2], [0, 3, 1, 2], [1, 1], *tile, relu_input=True, scale=scale, shift=shift)
        assert got.shape == expected.shape
        assert ((got.double() - expected).abs().max() / expected.abs().max()).item() < 1e-6, tile


def test_each_shape_is_measured_once_and_the_model_matches_eager():
    depthwise.MEASURED.clear()
    depthwise.BASELINES.clear()
    m = model()
    follows_eager(compiled(m, depthwise_kernels=True), m)
    counts = last_report()["depthwise_kernels"]
    assert counts["replaced"] + counts["slower"] == 3 and "unmeasured" not in counts, counts
    # each site (the first and the last read through a ReLU and as they are) measured once
    shapes = counts["shapes"]
    assert 3 <= len(shapes) == len(depthwise.MEASURED) == len(depthwise.BASELINES) <= 5, (shapes, depthwise.MEASURED, depthwise.BASELINES)
    assert sum(s["taken"] for s in shapes) == counts["replaced"], counts
    for found in shapes:
        assert found["cudnn_us"] > 0 and found["write_us"] > 0 and found["fastest_us"] == min(found["tile_us"]) > 0, found
        assert len(found["tile_us"]) == len(depthwise.tiles(found["kernel"][0] * found["kernel"][1])), found
        print(f"depthwise {found['input']} by {found['kernel']}, ReLU {found['relu_input']}: cuDNN {found['cudnn_us']:.1f} us, ours {found['fastest_us']:.1f}, write {found['write_us']:.1f}, taken {found['taken']}")


@pytest.mark.parametrize("value", ["columns", "unrolled"])
def test_with_every_kernel_looped_or_unrolled_the_model_matches_eager_in_those_tiles(value):
    # Option values "columns" and "unrolled": every site measured in the tiles whose kernel
    # columns are a loop, or in those with every tap unrolled, whatever the kernel's size (apart
    # from the default's measurements, which loop the 5x5 and the 7x7 and unroll the 3x3), the
    # model as eager computes it.
    m = model()
    follows_eager(compiled(m, depthwise_kernels=value), m)
    counts = last_report()["depthwise_kernels"]
    assert counts["replaced"] + counts["slower"] == 3 and "unmeasured" not in counts, counts
    loop = [1] if value == "columns" else []
    assert all(found["tile"] is None or found["tile"][4:] == loop for found in counts["shapes"]), counts["shapes"]
    assert any(column_loop == (value == "columns") for (_, column_loop) in depthwise.MEASURED), list(depthwise.MEASURED)


def test_by_default_the_3x3_is_unrolled_and_the_larger_kernels_looped():
    m = model()
    follows_eager(compiled(m), m)
    shapes = last_report()["depthwise_kernels"]["shapes"]
    for found in shapes:
        looped = [1] if found["kernel"][0] * found["kernel"][1] > depthwise.LOOP_ABOVE_TAPS else []
        assert found["tile"] is None or found["tile"][4:] == looped, found
    assert {found["kernel"][0] for found in shapes} == {3, 5, 7}, shapes


def test_the_kernel_is_captured_on_streams_and_alone_and_reads_the_weights_in_place(monkeypatch):
    # Whatever this GPU measures, the kernel runs in the captured graph, reading through where it can.
    monkeypatch.setattr(depthwise, "choose", first_site)
    depthwise.MEASURED.clear()
    m = model()
    for choose in ("streams", "single"):
        fast = compiled(m, depthwise_kernels=True, choose=choose)
        follows_eager(fast, m)
        report = last_report()
        # the first and the last read through their ReLU (the first through its padding too)
        assert {k: report["depthwise_kernels"][k] for k in ("replaced", "slower", "prologue")} == {"replaced": 3, "slower": 0, "prologue": 2}, report
        assert "unmeasured" not in report["depthwise_kernels"], report
        assert report["captured_shapes"] == 1, report
        # The weights changed in place after the capture are the weights the graph reads.
        with torch.no_grad():
            m.large.weight.mul_(-2.0)
            m.small.bias.add_(1.0)
        follows_eager(fast, m)


def test_a_batchnorm_read_through_is_captured_and_follows_its_buffers(monkeypatch):
    # A 1x1, its BatchNorm and ReLU, then the depthwise convolution reading the 1x1's output.
    monkeypatch.setattr(depthwise, "choose", first_site)
    m = nn.Sequential(nn.Conv2d(96, 96, 1, bias=False), nn.BatchNorm2d(96), nn.ReLU(), nn.Conv2d(96, 96, 5, padding=2, groups=96, bias=False)).cuda().eval()
    with torch.no_grad():
        m[1].running_mean.uniform_(-0.5, 0.5)
        m[1].running_var.uniform_(0.5, 1.5)
    fast = compiled(m, depthwise_kernels=True)
    follows_eager(fast, m)
    assert last_report()["depthwise_kernels"]["affine_prologue"] == 1, last_report()
    # The BatchNorm's buffers changed in place after the capture are the ones the graph reads.
    with torch.no_grad():
        m[1].running_mean.add_(0.25)
        m[1].weight.mul_(-1.0)
    follows_eager(fast, m)


def test_in_bfloat16_the_kernel_is_as_near_eager_in_float32_as_cudnn_is(monkeypatch):
    # Each site taken (whatever this GPU measures), in bfloat16: the kernel sums in float32, so
    # its outputs are no further from float32's than cuDNN's bfloat16 outputs are (with a margin
    # of rounding: an element's last place or two).
    monkeypatch.setattr(depthwise, "choose", first_site)
    m = model()
    low = Separable().cuda().eval()
    low.load_state_dict(m.state_dict())
    low = low.to(torch.bfloat16)
    fast = compiled(low, depthwise_kernels=True)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 96, 83, 83, device="cuda")
            exact = m(x)
            got, eager = fast(x.bfloat16()), low(x.bfloat16())
            assert got.dtype == torch.bfloat16
            assert relative_error(got.float(), exact) < 2 * relative_error(eager.float(), exact) + 2e-2, (relative_error(got.float(), exact), relative_error(eager.float(), exact))
    assert last_report()["depthwise_kernels"]["replaced"] == 3, last_report()


def test_on_by_default_and_off_when_asked():
    m = model()
    follows_eager(compiled(m), m)
    assert "depthwise_kernels" in last_report(), last_report()
    follows_eager(compiled(m, depthwise_kernels=False), m)
    assert "depthwise_kernels" not in last_report()


def test_a_pause_of_this_process_before_the_replay_is_not_timed(monkeypatch):
    # The baselines are timed while the variants' workers compile (depthwise_ahead), where this
    # process can pause between recording the start event and replaying the graph: the GPU's
    # wait before each (timing.GUARD_CYCLES) keeps the pause out of the time. Unguarded, a
    # 200 us pause over 10 repeats would add 20 us to each.
    import time

    from nimble_rs.dynamo.common import timing

    x = torch.randn(1 << 20, device="cuda")
    alone = timing.graph_us(lambda: x.mul_(1.0))
    replay = torch.cuda.CUDAGraph.replay
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda self: (time.sleep(2e-4), replay(self))[1])
    paused = timing.graph_us(lambda: x.mul_(1.0))
    print(f"4 MB multiplied in place: {alone:.2f} us, paused 200 us before each replay: {paused:.2f} us")
    assert paused < alone + 5, (alone, paused)
