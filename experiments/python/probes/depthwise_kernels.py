"""Three ways to run a depthwise convolution (one filter per channel) other than cuDNN's kernels,
for `depthwise_probe.py`:

- ``decompose``: the sum of the kernel's shifted windows of the padded input, each scaled by its
  channel's weight: pointwise arithmetic Inductor fuses into one kernel. A decomposition of
  ``aten.convolution`` for AOTAutograd's table: other convolutions are left as they are
  (``NotImplemented``).
- ``triton_depthwise``: one Triton kernel over channels-last memory, a row segment per program;
- ``triton_depthwise_tiled``: the same over a tile of rows by columns per program, the weights
  laid out tap by tap (``depthwise_taps``);
- ``triton_depthwise_rows``: the backend's kernel (option ``depthwise_kernels``), several output
  rows per program, each input row loaded once per column tap and added into every output row it
  reaches, one accumulator per row (a tuple the loops unroll), 128-bit loads: about a ninth of the
  tiled kernel's instructions per output (ptxas for sm_90). (The probe's record at ``505bbb5``
  timed its first form, the image sizes and channels compile-time constants.)

The row and tiled kernels are not in the backend: they measured slower than cuDNN
(paper-figs/results/probes/depthwise-probe-*).
"""

from typing import List, Optional

import torch

aten = torch.ops.aten

# The largest kernel decomposed: a k x k window is k * k loads per output.
MAX_TAPS = 49


def applies(x: torch.Tensor, weight: torch.Tensor, transposed: bool, output_padding: List[int], groups: int) -> bool:
    """A 2-D depthwise convolution, one output channel per input channel, a kernel of at most
    ``MAX_TAPS`` taps, float sizes known."""
    if transposed or any(output_padding) or x.dim() != 4 or weight.dim() != 4 or not x.is_floating_point():
        return False
    channels = x.shape[1]
    if not all(isinstance(s, int) for s in (*x.shape, *weight.shape)):
        return False
    return groups == channels and groups > 1 and weight.shape[0] == channels and weight.shape[1] == 1 and weight.shape[2] * weight.shape[3] <= MAX_TAPS


def decompose(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: List[int], padding: List[int], dilation: List[int], transposed: bool, output_padding: List[int], groups: int):
    """``aten.convolution`` of a depthwise convolution as windows of the padded input times
    each tap's per-channel weight, summed tap by tap in the kernel's row-major order, plus the
    bias; ``NotImplemented`` for any other convolution."""
    if not applies(x, weight, transposed, output_padding, groups):
        return NotImplemented
    n, channels, height, width = x.shape
    kh, kw = weight.shape[2], weight.shape[3]
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    out_h, out_w = _output_size(height, width, kh, kw, sh, sw, ph, pw, dh, dw)
    padded = aten.constant_pad_nd.default(x, [pw, pw, ph, ph], 0.0) if ph or pw else x
    total = None
    for i in range(kh):
        rows = aten.slice.Tensor(padded, 2, i * dh, i * dh + sh * (out_h - 1) + 1, sh)
        for j in range(kw):
            window = aten.slice.Tensor(rows, 3, j * dw, j * dw + sw * (out_w - 1) + 1, sw)
            tap = aten.view.default(aten.select.int(aten.select.int(weight, 3, j), 2, i), [1, channels, 1, 1])
            term = aten.mul.Tensor(window, tap)
            total = term if total is None else aten.add.Tensor(total, term)
    if bias is not None:
        total = aten.add.Tensor(total, aten.view.default(bias, [1, channels, 1, 1]))
    return total


def triton_depthwise(x: torch.Tensor, weight: torch.Tensor, stride: List[int], padding: List[int], dilation: List[int], block_w: int = 8, block_c: int = 32, num_warps: int = 4) -> torch.Tensor:
    """The depthwise convolution of channels-last ``x`` (CUDA) by ``weight`` ([C, 1, kh, kw])
    with one Triton kernel: each program a row segment of ``block_w`` outputs by ``block_c``
    channels, accumulated in float32 tap by tap; the output channels-last."""
    import triton

    kh, kw = weight.shape[2], weight.shape[3]
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    x, y = _channels_last_output(x, kh, kw, sh, sw, ph, pw, dh, dw)
    n, channels, height, width = x.shape
    out_h, out_w = y.shape[2], y.shape[3]
    grid = (n * out_h, triton.cdiv(out_w, block_w), triton.cdiv(channels, block_c))
    _kernel()[grid](x, weight.contiguous(), y, height, width, channels, out_h, out_w, sh, sw, ph, pw, dh, dw, kh, kw, block_w, block_c, num_warps=num_warps)
    return y


def depthwise_taps(weight: torch.Tensor) -> torch.Tensor:
    """A depthwise weight [C, 1, kh, kw] as ``triton_depthwise_tiled`` reads it: [kh * kw, C],
    each tap's weights for every channel contiguous."""
    channels = weight.shape[0]
    return weight.reshape(channels, -1).t().contiguous()


def triton_depthwise_tiled(x: torch.Tensor, taps: torch.Tensor, kernel_size: List[int], stride: List[int], padding: List[int], dilation: List[int], block_h: int = 4, block_w: int = 8, block_c: int = 32, num_warps: int = 4) -> torch.Tensor:
    """The depthwise convolution of channels-last ``x`` by ``taps`` (``depthwise_taps`` of the
    weight, of ``kernel_size``) with one Triton kernel: each program a ``block_h`` by ``block_w``
    tile of outputs by ``block_c`` channels, so that the taps of neighbouring rows read the same
    input rows from the cache, accumulated in float32 tap by tap in the kernel's row-major order;
    each tap's weights one coalesced load. The output channels-last. ``block_h * block_w`` a
    power of two."""
    import triton

    kh, kw = kernel_size
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    x, y = _channels_last_output(x, kh, kw, sh, sw, ph, pw, dh, dw)
    n, channels, height, width = x.shape
    out_h, out_w = y.shape[2], y.shape[3]
    tiles_h, tiles_w = triton.cdiv(out_h, block_h), triton.cdiv(out_w, block_w)
    grid = (n * tiles_h * tiles_w, triton.cdiv(channels, block_c))
    _tiled_kernel()[grid](x, taps, y, height, width, channels, out_h, out_w, tiles_h, tiles_w, sh, sw, ph, pw, dh, dw, kh, kw, block_h, block_w, block_c, num_warps=num_warps)
    return y


def triton_depthwise_rows(x: torch.Tensor, taps: torch.Tensor, kernel_size: List[int], stride: List[int], padding: List[int], dilation: List[int], rows: int = 4, block_w: int = 8, block_c: int = 64, num_warps: int = 4) -> torch.Tensor:
    """The depthwise convolution of channels-last ``x`` by ``taps`` (``depthwise_taps`` of the
    weight, of ``kernel_size``) with the backend's kernel (``nimble_rs.dynamo.passes.depthwise_kernel``, option
    ``depthwise_kernels``): each program ``rows`` output rows of a ``block_w``-column by
    ``block_c``-channel tile, each input row loaded once per column tap and added into every output
    row it reaches."""
    from nimble_rs.dynamo.passes.depthwise_kernel import triton_depthwise as backend_kernel

    return backend_kernel(x, taps, None, list(kernel_size), list(_pair(stride)), list(_pair(padding)), list(_pair(dilation)), rows, block_w, block_c, num_warps)

_KERNEL = []
_TILED = []


def _tiled_kernel():
    """``triton_depthwise_tiled``'s kernel, defined at its first use."""
    if _TILED:
        return _TILED[0]
    import triton
    import triton.language as tl

    @triton.jit
    def depthwise_nhwc_tiled(x_ptr, taps_ptr, y_ptr, H, W, C, OH, OW, TILES_H, TILES_W, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
        tile = tl.program_id(0)  # (n, tile row, tile column), the columns fastest
        n = tile // (TILES_H * TILES_W)
        t = tile % (TILES_H * TILES_W)
        p = tl.arange(0, BLOCK_H * BLOCK_W)
        oh = (t // TILES_W) * BLOCK_H + p // BLOCK_W
        ow = (t % TILES_W) * BLOCK_W + p % BLOCK_W
        c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = c < C
        out_ok = (oh < OH) & (ow < OW)
        image = n.to(tl.int64) * H * W * C
        acc = tl.zeros((BLOCK_H * BLOCK_W, BLOCK_C), dtype=tl.float32)
        for i in tl.static_range(KH):
            ih = oh * SH - PH + i * DH
            row_ok = out_ok & (ih >= 0) & (ih < H)
            for j in tl.static_range(KW):
                iw = ow * SW - PW + j * DW
                inside = (row_ok & (iw >= 0) & (iw < W))[:, None] & c_ok[None, :]
                offsets = image + (ih * W + iw).to(tl.int64)[:, None] * C + c[None, :]
                xv = tl.load(x_ptr + offsets, mask=inside, other=0.0)
                wv = tl.load(taps_ptr + (i * KW + j) * C + c, mask=c_ok, other=0.0)
                acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
        out = n.to(tl.int64) * OH * OW * C + (oh * OW + ow).to(tl.int64)[:, None] * C + c[None, :]
        tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=out_ok[:, None] & c_ok[None, :])

    _TILED.append(depthwise_nhwc_tiled)
    return depthwise_nhwc_tiled


def _kernel():
    """The Triton kernel, defined at its first use (Triton is imported only where one runs)."""
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def depthwise_nhwc(x_ptr, w_ptr, y_ptr, H, W, C, OH, OW, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
        row = tl.program_id(0)  # n * OH + oh
        n = row // OH
        oh = row % OH
        ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
        c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = c < C
        acc = tl.zeros((BLOCK_W, BLOCK_C), dtype=tl.float32)
        for i in tl.static_range(KH):
            ih = oh * SH - PH + i * DH
            for j in tl.static_range(KW):
                iw = ow * SW - PW + j * DW
                # (the row's condition by tl.where: Triton 3.9's interpreter makes a scalar & a tensor int32)
                inside = tl.where((ih >= 0) & (ih < H), ((iw >= 0) & (iw < W))[:, None] & c_ok[None, :], False)
                offsets = ((n * H + ih) * W + iw)[:, None].to(tl.int64) * C + c[None, :]
                xv = tl.load(x_ptr + offsets, mask=inside, other=0.0)
                wv = tl.load(w_ptr + c * (KH * KW) + (i * KW + j), mask=c_ok, other=0.0)
                acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
        out = (row * OW + ow)[:, None].to(tl.int64) * C + c[None, :]
        tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=(ow < OW)[:, None] & c_ok[None, :])

    _KERNEL.append(depthwise_nhwc)
    return depthwise_nhwc


def _output_size(height: int, width: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int):
    return (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1


def _channels_last_output(x: torch.Tensor, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int):
    """``x`` channels-last and the empty channels-last output of its depthwise convolution by a
    ``kh`` by ``kw`` kernel with these strides, padding and dilation."""
    n, channels, height, width = x.shape
    out_h, out_w = _output_size(height, width, kh, kw, sh, sw, ph, pw, dh, dw)
    y = torch.empty((n, channels, out_h, out_w), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    return x.contiguous(memory_format=torch.channels_last), y


def _pair(values: List[int]):
    values = list(values)
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])
