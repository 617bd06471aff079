"""The Triton kernel of option ``depthwise_kernels`` (launched by ``depthwise_kernel``), in a
module of its own that imports Triton alone, not torch: the worker processes that compile its
variants ahead (``depthwise_worker``) load this file and Triton only, so that each starts in a
fraction of a second rather than the second or more torch's import takes (two cores here: a
worker with nothing to compile 0.13 s, torch's import 1.4 s). Triton keys a kernel's compiles on
its source, its first line's number and what it uses, not on the module's name, so the variants
a worker compiles are those this file's kernel loads wherever it is imported from.
"""

from typing import Any, List

_KERNEL: List[Any] = []


def kernel():
    """The Triton kernel, defined at its first use (Triton is imported only where one runs)."""
    # (The kernel's helpers are this module's names: Triton's interpreter, which runs the kernel
    # on the CPU in the tests, looks a kernel's names up in its module.)
    global read, added
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def read(pointers, inside, sc, sh, HAS_SCALE: tl.constexpr, HAS_SHIFT: tl.constexpr, RELU_IN: tl.constexpr):
        # One tap's input, in float32, through the prologue: a zero where ``inside`` is not.
        xv = tl.load(pointers, mask=inside, other=0.0).to(tl.float32)
        if HAS_SHIFT:
            # The term where the tap reads inside the input, zero where it reads the padding: the
            # masked load reads zero there, and zero times the factor plus zero is the padding's
            # zero after the prologue (not the term's ReLU). (Selected on the term, not on the
            # loaded value, the select is off the path from the load to its sums.)
            shift = tl.where(inside, sh, 0.0)
            xv = tl.fma(xv, sc, shift) if HAS_SCALE else xv + shift
        elif HAS_SCALE:
            xv = xv * sc
        if RELU_IN:
            xv = tl.maximum(xv, 0.0)
        return xv

    @triton.jit
    def added(xv, weights, accs, r: tl.constexpr, STEP: tl.constexpr, FIRST: tl.constexpr, SH: tl.constexpr, DH: tl.constexpr, KH: tl.constexpr, ROWS: tl.constexpr):
        # ``accs`` with input row r's tap ``xv`` added into each output row it reaches: input
        # row r is kernel row (r - o * SH) / DH of output row o, where that is a row of the
        # kernel, whose weights are weights[kernel row * STEP + FIRST].
        out = ()
        for o in tl.static_range(ROWS):
            if r - o * SH >= 0 and (r - o * SH) % DH == 0 and (r - o * SH) // DH < KH:
                out = out + (tl.fma(xv, weights[(r - o * SH) // DH * STEP + FIRST], accs[o]),)
            else:
                out = out + (accs[o],)
        return out

    # The sizes are not specialized on (Triton would compile again wherever one is 1 or a
    # multiple of 16): one compile per kernel geometry, dtype and tile.
    @triton.jit(do_not_specialize=["H", "W", "CV", "OH", "OW", "TILES_H", "TILES_W"])
    def depthwise_rows(x_ptr, taps_ptr, b_ptr, scale_ptr, shift_ptr, y_ptr, H, W, CV, OH, OW, TILES_H, TILES_W, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_SHIFT: tl.constexpr, RELU_IN: tl.constexpr, ROWS: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, VEC: tl.constexpr, COLUMN_LOOP: tl.constexpr):
        # PH and PW: the padding above and to the left; below and to the right it is wherever an
        # input row or column past the input's end is read (masked to zero), up to OH and OW.
        # The channel count as VEC times CV, so that every pixel's offset is known to be a
        # multiple of VEC elements and the loads and stores are that wide (128-bit for four floats).
        C = CV * VEC
        tile = tl.program_id(0)  # (n, tile row, tile column), the columns fastest
        n = tile // (TILES_H * TILES_W)
        t = tile % (TILES_H * TILES_W)
        oh0 = (t // TILES_W) * ROWS
        ow = (t % TILES_W) * BLOCK_W + tl.arange(0, BLOCK_W)
        c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = c < C
        x_image = x_ptr + n.to(tl.int64) * H * W * C
        # What the taps share (the prologue's vectors, each column tap's offsets and masks) is
        # made once, outside the unrolled loops, each as the [BLOCK_W, BLOCK_C] tensor the taps
        # use (no broadcast at each use): Triton's coalescing pass takes time quadratic in the
        # kernel's operations, and computed at every tap (7x7 at stride 2 in four rows: 91 taps)
        # they took 4 of a 7x7's 5.6 s to compile.
        shape: tl.constexpr = (BLOCK_W, BLOCK_C)
        # The prologue's per-channel factor and term (an inference BatchNorm before the ReLU).
        sc = 0.0
        sh = 0.0
        if HAS_SCALE:
            sc = tl.broadcast_to(tl.load(scale_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :], shape)
        if HAS_SHIFT:
            sh = tl.broadcast_to(tl.load(shift_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :], shape)
        # One accumulator per output row, added into only by the input rows it reads: a tuple
        # the loops unroll, so that no tensor carries a dimension of rows.
        accs = ()
        for o in tl.static_range(ROWS):
            accs = accs + (tl.zeros(shape, dtype=tl.float32),)
        if COLUMN_LOOP:
            # The kernel's columns a loop, each iteration one column tap over every input row
            # (unrolled), that kernel column's weights loaded at its start: the same loads and
            # multiply-adds, a kernel column's unrolled. Compiled for sm_90 on the development
            # machine, NASNet-A large's 7x7 at stride 2 in 4 rows took 0.24 s against 3.2 s
            # unrolled, with 47 registers against 188 (bfloat16; not yet timed on a GPU).
            for j in range(KW):
                iw = ow * SW - PW + j * DW
                column = iw[:, None] * C + c[None, :]
                column_ok = ((iw >= 0) & (iw < W))[:, None] & c_ok[None, :]
                weights = ()
                for i in tl.static_range(KH):
                    weights = weights + (tl.broadcast_to(tl.load(taps_ptr + (i * KW + j) * C + c, mask=c_ok, other=0.0).to(tl.float32)[None, :], shape),)
                for r in tl.static_range((ROWS - 1) * SH + (KH - 1) * DH + 1):
                    ih = oh0 * SH - PH + r
                    # (A row's condition joins by tl.where, not &: Triton 3.9's interpreter makes a scalar
                    # & a tensor int32, which it refuses as a mask.)
                    inside = tl.where((ih >= 0) & (ih < H), column_ok, False)
                    accs = added(read(x_image + ih * W * C + column, inside, sc, sh, HAS_SCALE, HAS_SHIFT, RELU_IN), weights, accs, r, 1, 0, SH, DH, KH, ROWS)
        else:
            # Every tap unrolled, rows outermost. Each tap's weights loaded once, where they are
            # first used (below). Loaded all here, a 7x7's 49 taps were all held from the start:
            # ptxas gave 5 of NASNet-A large's 46 variants spills and the rest 153 registers on
            # average (530f899, loading them at each use: none, 123); loaded a kernel row at a
            # time, one variant spilled; tap by tap where first used, none, 126 on average.
            weights = ()
            # Per column tap: the offsets within an input row of what each output column reads,
            # and where that is inside the input.
            columns = ()
            columns_ok = ()
            for j in tl.static_range(KW):
                iw = ow * SW - PW + j * DW
                columns = columns + (iw[:, None] * C + c[None, :],)
                columns_ok = columns_ok + (((iw >= 0) & (iw < W))[:, None] & c_ok[None, :],)
            for r in tl.static_range((ROWS - 1) * SH + (KH - 1) * DH + 1):
                ih = oh0 * SH - PH + r
                row_ok = (ih >= 0) & (ih < H)
                row = x_image + ih * W * C
                for j in tl.static_range(KW):
                    if r % DH == 0 and r // DH < KH:
                        # input row r is kernel row r / DH of the first output row: that tap's weights
                        weights = weights + (tl.broadcast_to(tl.load(taps_ptr + (r // DH * KW + j) * C + c, mask=c_ok, other=0.0).to(tl.float32)[None, :], shape),)
                    inside = tl.where(row_ok, columns_ok[j], False)
                    accs = added(read(row + columns[j], inside, sc, sh, HAS_SCALE, HAS_SHIFT, RELU_IN), weights, accs, r, KW, j, SH, DH, KH, ROWS)
        if HAS_BIAS:
            bv = tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
        y_image = y_ptr + n.to(tl.int64) * OH * OW * C
        for o in tl.static_range(ROWS):
            oh = oh0 + o
            result = accs[o]
            if HAS_BIAS:
                result = result + bv[None, :]
            ok = tl.where(oh < OH, (ow < OW)[:, None] & c_ok[None, :], False)
            tl.store(y_image + (oh * OW + ow)[:, None] * C + c[None, :], result.to(y_ptr.dtype.element_ty), mask=ok)

    _KERNEL.append(depthwise_rows)
    return depthwise_rows
