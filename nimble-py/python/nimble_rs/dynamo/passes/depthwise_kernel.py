"""The depthwise kernel of option ``depthwise_kernels`` (``depthwise``, which decides where it
runs): the op ``nimble::depthwise_conv2d`` and the launch of its Triton kernel (the kernel
itself in ``depthwise_triton``, its variants compiled ahead by ``depthwise_ahead``).

The kernel computes several output rows per program over channels-last memory: each input row
the rows need is loaded once per column tap (128-bit loads where the channel count is a multiple
of four, 64-bit where of two) and added into every output row it reaches, one float32
accumulator per row held in registers, the taps unrolled (or, in the tiles of option value
``"columns"``, the kernel's columns a loop over the rows unrolled); a bias, where there is one,
is added in the kernel. It reads the weights tap by tap, [kh * kw, C] (``taps_of``), each tap's weights one
coalesced load, and its input through a per-channel factor and term, a ReLU and a zero padding
where given (``prologue``).

The op is defined when this module is imported (with the backend), so that a program Inductor
cached with it finds it; off CUDA it computes the same thing by ATen.
"""

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from .depthwise_triton import kernel


@torch.library.custom_op("nimble::depthwise_conv2d", mutates_args=())
def depthwise_conv2d(x: torch.Tensor, taps: torch.Tensor, bias: Optional[torch.Tensor], scale: Optional[torch.Tensor], shift: Optional[torch.Tensor], kernel_size: List[int], stride: List[int], padding: List[int], dilation: List[int], relu_input: bool, tile: List[int]) -> torch.Tensor:
    """The depthwise convolution of ``x`` (times ``scale`` plus ``shift``, per channel, where
    given; then its ReLU, with ``relu_input``) zero-padded by ``padding`` ([top, bottom, left,
    right]) by the weights ``taps`` ([kh * kw, C], ``taps_of`` the weight) of ``kernel_size``,
    plus ``bias``; the output channels-last: on CUDA our kernel in ``tile`` (rows, columns,
    channels, warps and, where given, 1 for its kernel columns as a loop), else ATen's ops."""
    if not x.is_cuda:
        weight = taps.t().reshape(taps.shape[1], 1, *kernel_size)
        top, bottom, left, right = padding
        source = prologue(x, scale, shift, relu_input)
        return F.conv2d(F.pad(source, (left, right, top, bottom)), weight, bias, stride, 0, dilation, x.shape[1]).contiguous(memory_format=torch.channels_last)
    return triton_depthwise(x, taps, bias, kernel_size, stride, padding, dilation, *tile, relu_input=relu_input, scale=scale, shift=shift)


@depthwise_conv2d.register_fake
def _(x, taps, bias, scale, shift, kernel_size, stride, padding, dilation, relu_input, tile):
    return _empty_output(x, kernel_size, stride, padding, dilation)


def prologue(x: torch.Tensor, scale: Optional[torch.Tensor], shift: Optional[torch.Tensor], relu: bool) -> torch.Tensor:
    """What the kernel computes from ``x`` as it loads it, by ATen ops."""
    channels = x.shape[1]
    if scale is not None:
        x = x * scale.view(1, channels, 1, 1)
    if shift is not None:
        x = x + shift.view(1, channels, 1, 1)
    return torch.relu(x) if relu else x


def taps_of(weight: torch.Tensor) -> torch.Tensor:
    """A depthwise weight [C, 1, kh, kw] as the kernel reads it: [kh * kw, C], each tap's
    weights for every channel contiguous."""
    return weight.reshape(weight.shape[0], -1).t().contiguous()


_LOWERED: List[bool] = []


def op():
    """``nimble::depthwise_conv2d``, with Inductor's fallback to it (registered once, when a
    graph is first rewritten) taking ``x`` channels-last and the taps contiguous."""
    found = torch.ops.nimble.depthwise_conv2d.default
    if not _LOWERED:
        from torch._inductor import ir, lowering

        def layouts(_node, x, taps, *rest, **kwargs):
            return (ir.ExternKernel.require_channels_last(x), ir.ExternKernel.require_contiguous(taps), *rest), kwargs

        lowering.make_fallback(found, layout_constraint=layouts, warn=False)
        _LOWERED.append(True)
    return found


def vector_width(channels: int) -> int:
    """The elements each load takes at once: the channel count's largest divisor of 4, 2 and 1
    (offsets of a pixel are multiples of it)."""
    return 4 if channels % 4 == 0 else 2 if channels % 2 == 0 else 1


def pads(padding) -> Tuple[int, int, int, int]:
    """Padding as (top, bottom, left, right): given so, or as a convolution's (rows, columns)."""
    return tuple(padding) if len(padding) == 4 else (padding[0], padding[0], padding[1], padding[1])


def output_size(height: int, width: int, kh: int, kw: int, stride, padding, dilation) -> Tuple[int, int]:
    top, bottom, left, right = pads(padding)
    return ((height + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1, (width + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1)


def _empty_output(x: torch.Tensor, kernel_size, stride, padding, dilation) -> torch.Tensor:
    """An empty channels-last tensor of the convolution's output shape (real or fake, as ``x``)."""
    n, c, h, w = x.shape
    ho, wo = output_size(h, w, kernel_size[0], kernel_size[1], stride, padding, dilation)
    return torch.empty_strided((n, c, ho, wo), (ho * wo * c, 1, wo * c, c), dtype=x.dtype, device=x.device)


def triton_depthwise(x: torch.Tensor, taps: torch.Tensor, bias: Optional[torch.Tensor], kernel_size: List[int], stride: List[int], padding: List[int], dilation: List[int], rows: int = 4, block_w: int = 8, block_c: int = 64, num_warps: int = 4, column_loop: int = 0, *, relu_input: bool = False, scale: Optional[torch.Tensor] = None, shift: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Our kernel on CUDA tensors (``supported`` sizes; ``taps`` as ``taps_of`` lays the weight
    out; ``padding`` as a convolution's or [top, bottom, left, right]; the convolution of
    ``prologue(x, scale, shift, relu_input)``, ``scale`` and ``shift`` [C] vectors), each
    program ``rows`` output rows by ``block_w`` columns by ``block_c`` channels with
    ``num_warps`` warps, its taps unrolled or, with ``column_loop``, its kernel columns a loop
    (``depthwise_triton``); ``x`` made channels-last where it is not (a copy), the output
    channels-last."""
    import triton

    n, channels, height, width = x.shape
    kh, kw = kernel_size
    if tuple(taps.shape) != (kh * kw, channels) or max(height * width, 1) * channels >= 2**31:
        raise ValueError(f"nimble depthwise kernel: input {list(x.shape)}, taps {list(taps.shape)} for a {kh}x{kw} kernel; expected taps [kh * kw, channels] and fewer than 2**31 elements per image")
    out_h, out_w = output_size(height, width, kh, kw, stride, padding, dilation)
    x = x.contiguous(memory_format=torch.channels_last)
    y = _empty_output(x, kernel_size, stride, padding, dilation)
    tiles_h, tiles_w = triton.cdiv(out_h, rows), triton.cdiv(out_w, block_w)
    grid = (n * tiles_h * tiles_w, triton.cdiv(channels, block_c))
    has_bias = bias is not None
    top, _, left, _ = pads(padding)
    vectors = [v.contiguous() if v is not None else taps for v in (bias, scale, shift)]
    kernel()[grid](x, taps.contiguous(), *vectors, y, height, width, channels // vector_width(channels), out_h, out_w, tiles_h, tiles_w, stride[0], stride[1], top, left, dilation[0], dilation[1], kh, kw, has_bias, scale is not None, shift is not None, relu_input, rows, block_w, block_c, vector_width(channels), bool(column_loop), num_warps=num_warps)
    return y
