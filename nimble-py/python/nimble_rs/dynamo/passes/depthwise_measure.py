"""Option ``depthwise_kernels``' measurements: each site's cuDNN convolution, a write of its
source's size, and our kernel in each tile, on random tensors in CUDA graphs, once per site; what
``depthwise.choose`` decides by."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..common.phases import in_phase
from ..common.timing import graph_us
from .depthwise_kernel import prologue, taps_of, triton_depthwise
from .fxnodes import cuda_device
from .fxnodes import value as _val

if TYPE_CHECKING:
    from .depthwise import Site

aten = torch.ops.aten

# The largest difference from cuDNN's output a chosen kernel may show, relative to the output's
# largest magnitude, by dtype: float32 sums in another order (measured 2-3e-7 from float64 for
# both), and in half precision two roundings of the output apart.
EXACT = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# The kernel's tiles, (output rows, columns, channels, warps) per program, for kernels of at
# most 25 taps and for larger ones: of the four measured for each at `7fd1499` (H200), the two
# fastest on 13 of the 14 shapes of NASNet-A large's depthwise convolutions it took at batch 16
# (paper-figs/results/same-process-backend/7fd1499/same-process-backend-7fd1499-*), none spilling registers (ptxas, sm_90,
# each variant of NASNet-A large's convolutions: a 7x7's 49 weights per channel held in registers
# leave room for fewer rows). Each tile is a compile of its own, which is most of the option's
# preparation.
CONFIGS = [(4, 16, 32, 4), (8, 8, 64, 4)]
LARGE_CONFIGS = [(4, 8, 32, 4), (3, 8, 64, 4)]
# The same tiles with the kernel's columns a loop (the fifth entry), the rows unrolled in it.
# Compiled for sm_90 on the development machine, NASNet-A large's 7x7 at stride 2 in (4, 8, 32)
# compiled in 0.24 s against 3.2 s, with 47 registers against 188 (bfloat16).
COLUMN_LOOP_CONFIGS = [tile + (1,) for tile in CONFIGS]
COLUMN_LOOP_LARGE_CONFIGS = [tile + (1,) for tile in LARGE_CONFIGS]
def tiles(taps: int, column_loop: bool = False) -> List[Tuple[int, ...]]:
    """The tiles measured for a kernel of ``taps`` taps (those whose kernel columns are a loop,
    with ``column_loop``)."""
    if column_loop:
        return COLUMN_LOOP_CONFIGS if taps <= 25 else COLUMN_LOOP_LARGE_CONFIGS
    return CONFIGS if taps <= 25 else LARGE_CONFIGS


@dataclass(frozen=True)
class Timing:
    """A site's measurement, in microseconds: the fastest of ``tiles`` whose output matched
    cuDNN's (None where none did), each tile's time (infinite where its output did not match),
    cuDNN's convolution of the same input, and a write of a tensor of the site's source's size
    (what the kernel making that tensor costs at the least)."""

    tile: Optional[Tuple[int, ...]]
    tile_us: Tuple[float, ...]
    cudnn_us: float
    write_us: float

    @property
    def kernel_us(self) -> float:
        return min(self.tile_us, default=float("inf"))


def _key(at: "Site") -> tuple:
    x, weight = _val(at.source), _val(at.weight)
    return (tuple(x.shape), tuple(weight.shape), at.bias is not None, _affine_kinds(at.affine), at.stride, at.padding, at.dilation, at.relu_input, x.dtype, x.device)


def _affine_kinds(affine) -> Tuple[bool, bool]:
    """Whether a site's affine ops make a factor and a term (as ``_affine_terms`` composes them)."""
    scale = any(node.target in (aten.mul.Tensor, aten.div.Tensor) for node, _ in affine)
    return scale, any(node.target in (aten.add.Tensor, aten.sub.Tensor) for node, _ in affine)


# Each site's ``Timing`` (by the site and the tiles' kind), and (``baseline``) cuDNN's and the
# write's microseconds, measured once.
MEASURED: Dict[tuple, Timing] = {}
BASELINES: Dict[tuple, Tuple[float, float]] = {}


def _random_inputs(at: "Site", device: torch.device):
    """Random tensors of a site's shapes on ``device``: its source channels-last, the factor and
    term of its prologue (None where it has none), the weight and the bias (or None)."""
    x, weight = _val(at.source), _val(at.weight)
    xr = torch.randn(tuple(x.shape), dtype=x.dtype, device=device).contiguous(memory_format=torch.channels_last)
    has_scale, has_shift = _affine_kinds(at.affine)
    scale = torch.rand(x.shape[1], dtype=x.dtype, device=device) + 0.5 if has_scale else None
    shift = torch.randn(x.shape[1], dtype=x.dtype, device=device) if has_shift else None
    wr = torch.randn(tuple(weight.shape), dtype=x.dtype, device=device)
    br = torch.randn(weight.shape[0], dtype=x.dtype, device=device) if at.bias is not None else None
    return xr, scale, shift, wr, br


def _cudnn(at: "Site", xr, scale, shift, wr, br):
    """cuDNN's convolution as Inductor calls it, on the prologue's result (channels-last), and the
    tensor it reads: the padding the convolution takes itself (even on both sides) passed to it,
    only the rest (an uneven padding's) made beforehand. A plain site's is then the very call the
    graph makes, under the same key in cuDNN's benchmark cache: its algorithm is searched once,
    for both. (Padded beforehand, a [1, C, 44, 44] input without padding for the graph's
    [1, C, 42, 42] with padding 1, it was another key, searched apart: the choice was made
    against a call the graph does not make. cuDNN's 3x3 at NASNet-A large's bfloat16 batch-1
    shapes measured so 2.5-3.3 us in one process and 7-16 us in another, H200, `fb141f8`.)"""
    top, bottom, left, right = at.padding
    rows, columns = min(top, bottom), min(left, right)
    read = prologue(xr, scale, shift, at.relu_input)
    if (top, bottom, left, right) != (rows, rows, columns, columns):
        read = F.pad(read, (left - columns, right - columns, top - rows, bottom - rows))
    read = read.contiguous(memory_format=torch.channels_last)
    return (lambda: F.conv2d(read, wr, br, at.stride, (rows, columns), at.dilation, xr.shape[1])), read


@in_phase("depthwise baseline")
def baseline(at: "Site", device: Optional[torch.device] = None, timer=None) -> Tuple[float, float]:
    """This site's cuDNN convolution and a write (a fill) of a tensor of its source's size, in
    microseconds, measured once per site on random tensors, each in a CUDA graph of repeats
    (``timer``, given a call: its microseconds) on ``device`` (the site's GPU): what needs no
    variant of our kernel, so measured while they compile."""
    key = _key(at)
    if key in BASELINES:
        return BASELINES[key]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        device = device or cuda_device(_val(at.source))
        timer = timer or (lambda run: graph_us(run, device))
        xr, scale, shift, wr, br = _random_inputs(at, device)
        conv, read = _cudnn(at, xr, scale, shift, wr, br)
        cudnn_us = timer(conv)
        del conv, read
        write_us = timer(lambda: xr.fill_(1.0))
        del xr, scale, shift, wr, br
    BASELINES[key] = (cudnn_us, write_us)
    return BASELINES[key]


@in_phase("depthwise timing")
def timing(at: "Site", device: Optional[torch.device] = None, timer=None, kernel=None, column_loop: bool = False) -> Timing:
    """This site's ``Timing``, measured once per site on channels-last random tensors: its
    ``baseline`` (cuDNN's convolution alone, on the prologue's result made beforehand,
    and a write of the source's size) and our kernel in each tile of ``tiles`` (those whose
    kernel columns are a loop with ``column_loop``, kept apart), where its output is within
    ``EXACT`` of cuDNN's; each in a CUDA graph of repeats (``timer``, given a call:
    its microseconds), on ``device`` (the site's GPU), with ``kernel`` (``triton_depthwise``;
    the three given otherwise by the CPU test of what this passes the kernel)."""
    key = (_key(at), column_loop)
    if key in MEASURED:
        return MEASURED[key]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    cudnn_us, write_us = baseline(at, device, timer)
    weight = _val(at.weight)
    kernel = kernel or triton_depthwise
    with unset_fake_temporarily(), torch.no_grad():
        device = device or cuda_device(_val(at.source))
        timer = timer or (lambda run: graph_us(run, device))
        xr, scale, shift, wr, br = _random_inputs(at, device)
        conv, read = _cudnn(at, xr, scale, shift, wr, br)
        expected = conv().float()
        magnitude = expected.abs().max().clamp_min(1e-30)
        # (Each tensor an image's size at the model's batch: as few alive at once as can be, the
        # kernel's output compared in place; the preparation's peak memory counts them.)
        del conv, read
        kernel_size = list(weight.shape[2:])
        tile_us, best, best_us = [], None, float("inf")
        for tile in tiles(weight.shape[2] * weight.shape[3], column_loop):
            # (the weight's copy tap by tap measured with it: the graph makes it on every call)
            run = lambda tile=tile: kernel(xr, taps_of(wr), br, kernel_size, list(at.stride), list(at.padding), list(at.dilation), *tile, relu_input=at.relu_input, scale=scale, shift=shift)
            got = run().float()
            error = (got.sub_(expected).abs_().max() / magnitude).item()
            del got
            if error > EXACT[xr.dtype]:
                tile_us.append(float("inf"))
                continue
            tile_us.append(timer(run))
            if tile_us[-1] < best_us:
                best, best_us = tile, tile_us[-1]
        del xr, wr, br, expected, scale, shift
    MEASURED[key] = Timing(best, tuple(tile_us), cudnn_us, write_us)
    return MEASURED[key]
