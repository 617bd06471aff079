"""A separable convolution -- a depthwise convolution (one filter per channel), then a 1x1
convolution, then a per-channel scale and shift (an inference BatchNorm folded into the 1x1's
weights and bias) -- as one Triton kernel, for `separable_probe.py`.

Inductor runs NASNet-A large's separable convolutions as four kernels: cuDNN's depthwise
convolution writes its output, cuDNN's 1x1 convolution reads it back and writes its own, and a
Triton kernel reads that to apply the BatchNorm (and the next ReLU). ``triton_separable``
computes each tile of depthwise outputs in registers and multiplies it straight into the 1x1's
weights, so neither intermediate reaches memory:

- each program a tile of ``block_m`` output pixels (channels-last, the pixels in memory order)
  by ``block_n`` output channels; the input channels in chunks of ``block_k``: the chunk's
  depthwise outputs for the tile's pixels, tap by tap in the kernel's row-major order in float32
  (as ``depthwise_kernels``), then one ``tl.dot`` with the chunk's rows of the 1x1's weights;
- padding as the pixels before the first row and column (``padding``) and the output's size
  given, so a convolution with more padding after than before (timm's "same" padding at stride
  2) reads its input as it is, without the padded copy Inductor writes for it;
- ``relu_in`` applies a ReLU to the input as it is read, ``relu_out`` one to the output.

The product's precision is Triton's ``input_precision``: ``"tf32"`` as cuDNN's 1x1 convolution
runs in float32 by default (``torch.backends.cudnn.allow_tf32``), ``"ieee"`` for exact float32.

Not in the backend: on NASNet-A large at batch 16 it took 1.55x Inductor's kernels in all,
winning only where the channels are few and the pixels many
(paper-figs/results/probes/separable-probe-*).
"""

import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> Tuple[int, int]:
    """timm's "same" padding of one dimension: (before, after), the after side the larger when
    the total is odd."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def output_size(size: int, kernel: int, stride: int, before: int, after: int, dilation: int = 1) -> int:
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def fold(pointwise: torch.Tensor, scale: Optional[torch.Tensor] = None, shift: Optional[torch.Tensor] = None):
    """The 1x1 convolution's weight [CO, C, 1, 1] with each output channel scaled by ``scale``,
    as ``triton_separable`` reads it ([C, CO], contiguous), and ``shift`` as its bias."""
    weight = pointwise.reshape(pointwise.shape[0], pointwise.shape[1])
    if scale is not None:
        weight = weight * scale[:, None]
    return weight.t().contiguous(), shift


def reference(x: torch.Tensor, depthwise: torch.Tensor, pointwise: torch.Tensor, bias: Optional[torch.Tensor], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], relu_in: bool, relu_out: bool) -> torch.Tensor:
    """The same computation by ATen ops; ``padding`` (top, bottom, left, right)."""
    top, bottom, left, right = padding
    if relu_in:
        x = torch.relu(x)
    x = F.pad(x, [left, right, top, bottom])
    y = F.conv2d(x, depthwise, None, list(stride), 0, list(dilation), x.shape[1])
    y = F.conv2d(y, pointwise, bias)
    return torch.relu(y) if relu_out else y


def triton_separable(x: torch.Tensor, taps: torch.Tensor, weight_t: torch.Tensor, bias: Optional[torch.Tensor], kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int] = (1, 1), relu_in: bool = False, relu_out: bool = False, block_m: int = 64, block_n: int = 64, block_k: int = 32, num_warps: int = 4, precision: str = "tf32") -> torch.Tensor:
    """The separable convolution of ``x`` ([N, C, H, W], read channels-last) by ``taps``
    (``depthwise_kernels.depthwise_taps``) and ``weight_t`` ([C, CO], ``fold``), plus ``bias``
    ([CO]); ``padding`` (top, bottom, left, right). The output [N, CO, OH, OW], channels-last."""
    import triton

    kh, kw = kernel_size
    (sh, sw), (dh, dw) = tuple(stride), tuple(dilation)
    top, bottom, left, right = padding
    n, channels, height, width = x.shape
    out_channels = weight_t.shape[1]
    if weight_t.shape[0] != channels or taps.shape != (kh * kw, channels):
        raise ValueError(f"separable convolution: {channels} input channels, but depthwise taps {tuple(taps.shape)} (expected ({kh * kw}, {channels})) and pointwise weight {tuple(weight_t.shape)} (expected ({channels}, CO))")
    oh, ow = output_size(height, kh, sh, top, bottom, dh), output_size(width, kw, sw, left, right, dw)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.empty((n, out_channels, oh, ow), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    pixels = n * oh * ow
    if max(x.numel(), y.numel()) >= 2**31:
        raise ValueError(f"separable convolution: input {tuple(x.shape)} and output {tuple(y.shape)} must each have fewer than 2**31 elements (the kernel's offsets are 32-bit)")
    # The output channels' tiles fastest, so that the programs of one tile of pixels run
    # together and read its input from the cache.
    grid = (triton.cdiv(out_channels, block_n), triton.cdiv(pixels, block_m))
    _kernel()[grid](x, taps, weight_t, bias if bias is not None else weight_t, y, pixels, height, width, channels, oh, ow, out_channels,
                    sh, sw, top, left, dh, dw, kh, kw, relu_in, relu_out, bias is not None, precision, block_m, block_n, block_k, num_warps=num_warps)
    return y


_KERNEL: List = []


def _kernel():
    """The Triton kernel, defined at its first use (Triton is imported only where one runs)."""
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def separable_nhwc(x_ptr, taps_ptr, w_ptr, b_ptr, y_ptr, M, H, W, C: tl.constexpr, OH, OW, CO: tl.constexpr,
                       SH: tl.constexpr, SW: tl.constexpr, PT: tl.constexpr, PL: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                       RELU_IN: tl.constexpr, RELU_OUT: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = m < M
        image = m // (OH * OW)
        rest = m % (OH * OW)
        ih0 = (rest // OW) * SH - PT
        iw0 = (rest % OW) * SW - PL
        base = image * H * W * C
        co = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        co_ok = co < CO
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, C, BLOCK_K):
            c = k0 + tl.arange(0, BLOCK_K)
            c_ok = c < C
            a = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
            # The kernel's rows a loop, not unrolled: unrolled, the compiler keeps every tap's
            # addresses from one chunk to the next, more than the registers hold. A row's taps
            # unrolled, so that their loads are in flight together.
            for i in range(KH):
                ih = ih0 + i * DH
                row_ok = m_ok & (ih >= 0) & (ih < H)
                row = base + ih * W * C
                for j in tl.static_range(KW):
                    iw = iw0 + j * DW
                    inside = row_ok & (iw >= 0) & (iw < W)
                    xv = tl.load(x_ptr + (row + iw * C)[:, None] + c[None, :], mask=inside[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
                    if RELU_IN:
                        xv = tl.maximum(xv, 0.0)
                    wv = tl.load(taps_ptr + (i * KW + j) * C + c, mask=c_ok, other=0.0).to(tl.float32)
                    a += xv * wv[None, :]
            wt = tl.load(w_ptr + c[:, None] * CO + co[None, :], mask=c_ok[:, None] & co_ok[None, :], other=0.0).to(tl.float32)
            acc = tl.dot(a, wt, acc=acc, input_precision=PRECISION)
        if HAS_BIAS:
            acc += tl.load(b_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[None, :]
        if RELU_OUT:
            acc = tl.maximum(acc, 0.0)
        out = m[:, None] * CO + co[None, :]
        tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & co_ok[None, :])

    _KERNEL.append(separable_nhwc)
    return separable_nhwc
