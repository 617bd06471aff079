"""The depthwise convolutions of ``experiments/python/probes/depthwise_kernels.py`` (the
probe's candidates against cuDNN: three Triton kernels, run on the CPU in Triton's interpreter, and
the decomposition into shifted windows): every output against
``F.conv2d`` in float64, for strides, padding, dilation, kernel sizes and sizes that do not fill
the kernels' tiles. In a process of their own: the interpreter is chosen before Triton is first
imported."""

import pytest
from triton_interpreter import interpreted

pytest.importorskip("triton")

CASES = [
    # shape, kernel, stride, padding, dilation, tile (rows, columns, channels)
    ((2, 10, 9, 11), 3, 1, 1, 1, (4, 8, 8)),
    ((1, 40, 13, 13), 5, 2, 2, 1, (2, 4, 32)),
    ((2, 6, 8, 7), 7, 1, 3, 1, (4, 4, 4)),
    ((1, 5, 9, 9), 3, 1, 2, 2, (2, 8, 4)),
    # three output rows per program (the rows kernel's rows need not be a power of two), a 7x7
    # at stride 2 over a height they do not divide
    ((1, 12, 11, 10), 7, 2, 3, 1, (3, 4, 16)),
]

SCRIPT = """
import json, sys
import torch, torch.nn.functional as F
from depthwise_kernels import decompose, depthwise_taps, triton_depthwise, triton_depthwise_rows, triton_depthwise_tiled
results = []
for shape, k, stride, padding, dilation, tile in json.loads(sys.argv[1]):
    torch.manual_seed(0)
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    w = torch.randn(shape[1], 1, k, k)
    exact = F.conv2d(x.double(), w.double(), None, stride, padding, dilation, shape[1])
    # the tiled kernel's tile must hold a power of two of pixels; the rows kernel's need not
    whole = (tile[0] * tile[1]) & (tile[0] * tile[1] - 1) == 0
    tiled = triton_depthwise_tiled(x, depthwise_taps(w), [k, k], [stride], [padding], [dilation], *tile) if whole else None
    row = triton_depthwise(x, w, [stride], [padding], [dilation], block_w=tile[1], block_c=tile[2])
    rows = triton_depthwise_rows(x, depthwise_taps(w), [k, k], [stride], [padding], [dilation], *tile)
    decomposed = decompose(x, w, None, [stride], [padding], [dilation], False, [0, 0], shape[1])
    error = lambda got: ((got.double() - exact).abs().max() / exact.abs().max()).item()
    results.append({"shape": list(row.shape) == list(exact.shape) and list(rows.shape) == list(exact.shape) and (tiled is None or list(tiled.shape) == list(exact.shape)), "channels_last": tiled is None or tiled.is_contiguous(memory_format=torch.channels_last), "tiled": None if tiled is None else error(tiled), "row": error(row), "rows": error(rows), "rows_channels_last": rows.is_contiguous(memory_format=torch.channels_last), "decomposed": error(decomposed)})
print(json.dumps(results))
"""


def test_the_kernels_and_the_decomposition_compute_the_convolution():
    results = interpreted(SCRIPT, CASES)
    assert len(results) == len(CASES)
    for case, found in zip(CASES, results):
        assert found["shape"] and found["channels_last"] and found["rows_channels_last"], (case, found)
        whole = (case[5][0] * case[5][1]) & (case[5][0] * case[5][1] - 1) == 0
        assert (found["tiled"] is None) == (not whole), (case, found)
        assert found["rows"] < 1e-5, (case, found)
        assert (found["tiled"] is None or found["tiled"] < 1e-5) and found["row"] < 1e-5 and found["decomposed"] < 1e-5, (case, found)
