"""The separable convolution of ``experiments/python/probes/separable_kernels.py`` (a depthwise
convolution, a 1x1 convolution and a folded BatchNorm as one Triton kernel, which
``separable_probe.py`` times against Inductor's kernels), run on the CPU in Triton's interpreter:
every output against the same computation in float64, for strides, symmetric and asymmetric
padding, dilation, kernel sizes, the ReLUs on input and output, and sizes that do not fill the
kernel's tiles. In a process of its own: the interpreter is chosen before Triton is first
imported."""

import pytest
from triton_interpreter import interpreted

pytest.importorskip("triton")

CASES = [
    # shape, kernel, stride, dilation, output channels, padding (top, bottom, left, right), ReLU in, ReLU out, tile (pixels, outputs, inputs)
    ((2, 20, 9, 11), 3, 1, 1, 10, (1, 1, 1, 1), True, False, (16, 16, 16)),
    ((1, 40, 13, 13), 5, 2, 1, 24, "same", False, True, (32, 16, 16)),
    ((2, 6, 8, 7), 7, 2, 1, 33, (3, 3, 2, 4), True, True, (16, 32, 16)),
    ((1, 17, 9, 9), 3, 1, 2, 16, (2, 2, 2, 2), False, False, (16, 16, 32)),
]

SCRIPT = """
import json, sys
import torch
from depthwise_kernels import depthwise_taps
from separable_kernels import fold, reference, same_padding, triton_separable
results = []
for shape, k, stride, dilation, co, padding, relu_in, relu_out, (bm, bn, bk) in json.loads(sys.argv[1]):
    torch.manual_seed(0)
    if padding == "same":
        padding = same_padding(shape[2], k, stride, dilation) + same_padding(shape[3], k, stride, dilation)
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    depthwise, pointwise = torch.randn(shape[1], 1, k, k), torch.randn(co, shape[1], 1, 1)
    scale, shift = torch.rand(co) + 0.5, torch.randn(co)
    weight_t, bias = fold(pointwise, scale, shift)
    got = triton_separable(x, depthwise_taps(depthwise), weight_t, bias, (k, k), (stride, stride), padding, (dilation, dilation), relu_in, relu_out, bm, bn, bk, precision="ieee")
    exact = reference(x.double(), depthwise.double(), (pointwise * scale.view(-1, 1, 1, 1)).double(), shift.double(), (stride, stride), padding, (dilation, dilation), relu_in, relu_out)
    results.append({"shape": list(got.shape) == list(exact.shape), "channels_last": got.is_contiguous(memory_format=torch.channels_last), "error": ((got.double() - exact).abs().max() / exact.abs().max()).item()})
try:
    triton_separable(torch.randn(1, 4, 5, 5), torch.randn(9, 3), torch.randn(4, 8), None, (3, 3), (1, 1), (1, 1, 1, 1))
    results.append({"refused": False})
except ValueError as e:
    results.append({"refused": "4 input channels" in str(e) and "(9, 4)" in str(e)})
print(json.dumps(results))
"""


def test_the_kernel_computes_the_separable_convolution():
    results = interpreted(SCRIPT, CASES)
    assert len(results) == len(CASES) + 1
    for case, found in zip(CASES, results):
        assert found["shape"] and found["channels_last"], (case, found)
        assert found["error"] < 1e-5, (case, found)
    assert results[-1]["refused"], "taps of the wrong shape must be refused, naming what was expected"
