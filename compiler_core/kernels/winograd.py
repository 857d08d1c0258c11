"""Winograd convolution F(m x m, 3x3) for stride-1, dilation-1 3x3 convs (Lavin & Gray).

The output is cut into m x m tiles; tile t needs an (m+2) x (m+2) = alpha x alpha patch d
of the input. With the Cook-Toom matrices below

    Y_t = A^T [ (G g G^T) (.) (B^T d_t B) ] A        ((.) is the elementwise product)

so for each of the alpha^2 positions e of the transformed tile, the sum over input
channels is a GEMM:  M_e[oc, t] = sum_c U_e[oc, c] V_e[c, t]  with U = G g G^T (computed
at compile time, passes/winograd_convs.py) and V = B^T d B. F(4x4, 3x3) does 36 products
per 16 outputs where the direct conv does 144: 4x fewer multiplies, paid for by the two
transforms, which are O(C + OC) per tile instead of O(C * OC).

Execution (one work item = a block of `tile_rows` rows of tiles of one image, so its V and
M stay in cache between phases, and items are the parallel loop):
  1. input transform: for each channel and tile row, B^T d along columns first (a
     contiguous, vectorised loop over x into a small row buffer), then along x for a
     vector's worth of tiles at once, one tile per lane, written as V[e][c][t] so the
     GEMM's B operand is contiguous in t (each e's block padded to an odd number of cache
     lines: position_stride);
  2. 36 GEMMs with kernels/matmul.emit_gemm (A = U_e packed like conv weights);
  3. output transform A^T m A, a vector's worth of a tile row's tiles at once, through
     the conv's epilogue (bias, residual, activation), only for outputs that exist (the
     last tile row's rows cropped statically, a row's last tile's columns masked off at
     the store).
The transforms took a tile at a time in scalar code, which LLVM did not vectorize (a
tile's columns are m apart in the rows it reads and writes): by vectors of tiles, whose
lanes are picked from and interleaved into the rows by shuffles, AMD EPYC (LLVM: znver4),
1 thread, alone, 64 -> 192 channels at 56x56 3136 -> 2213 us (output transform only) and
16 -> 64 at 55x55 559 -> 270 us (both).
The input transform reads the conv's input in place, its padding as zeros: rows of tiles
whose patches lie inside the input load without checks, the others (over the top or bottom
padding, or past the bottom to whole items) select zeros, and the row buffer's padding
columns are zeroed once per channel. It used to read a copy padded to whole tiles (a
ConvPad kernel before it), which cost more than the copy at two threads: the copy split
the planes by channel where the conv's producer and the conv itself split them by rows,
so half of what each core read came from the other core's cache (znver4, VGG-19's ConvPads
3.1 ms at 1 thread, 3.95 ms at 2). Whole models, in place against the copy, interleaved,
1 | 2 threads: VGG-19 0.983 | 0.964, YOLOv8n-320 0.983 | 0.988, SqueezeNet 0.988 | 0.983,
DenseNet-121 1.001 | 0.984, ResNet-50 1.002 | 1.003.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..ir import loops as L
from ..ir.loops import (Get, as_expr, interleave_lanes, logical_and, maximum, minimum,
                        pick_lanes, select)
from .conv import _weights
from .epilogue import apply_activation, is_heavy
from .matmul import GemmShape, Operand, Output, emit_gemm
from .microkernel import CACHE_LINE
from .registry import lowering

# Interpolation points per output tile size (the point at infinity is implied). For m = 4
# the classic 0, +-1, +-2 (Lavin & Gray) has a float32 error about 2.7x that of
# 0, -1, 1, 1/2, -2 (measured: C = 128, unit-variance inputs, max error relative to max |y|
# 4.5e-6 versus 1.6e-6; 0, +-1, +-1/2 gives 5.6e-6; the direct conv 2.8e-7), for four
# more nonzeros in B^T, so the latter it is. tests/compiler_core/test_winograd.py keeps it so.
POINTS = {2: (0.0, 1.0, -1.0), 4: (0.0, -1.0, 1.0, 0.5, -2.0)}
TAPS = 3


@functools.lru_cache(maxsize=None)
def transform_matrices(m: int, points: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T (m x alpha), G (alpha x 3), B^T (alpha x alpha)) in float64, Cook-Toom with the
    given finite points and the point at infinity. B^T is solved from the 1-D identity
    y_i = sum_k g_k d_(i+k) = sum_j A^T[i,j] (G g)_j (B^T d)_j, which determines it."""
    p = np.asarray(points if points is not None else POINTS[m], np.float64)
    alpha = m + TAPS - 1
    if len(p) != alpha - 1:
        raise ValueError(f"F({m},{TAPS}) needs {alpha - 1} finite points, got {len(p)}")
    at = np.zeros((m, alpha))
    at[:, :-1] = p[None, :] ** np.arange(m)[:, None]
    at[m - 1, -1] = 1.0
    g = np.zeros((alpha, TAPS))
    for j, pj in enumerate(p):
        g[j] = pj ** np.arange(TAPS) / np.prod([pj - q for q in np.delete(p, j)])
    g[-1, -1] = 1.0
    # unknowns bt[j, l]: sum_j at[i, j] g[j, k] bt[j, l] = [l == i + k]
    rows, rhs = [], []
    for i in range(m):
        for k in range(TAPS):
            for col in range(alpha):
                eq = np.zeros((alpha, alpha))
                eq[:, col] = at[i] * g[:, k]
                rows.append(eq.ravel())
                rhs.append(1.0 if col == i + k else 0.0)
    bt, *_ = np.linalg.lstsq(np.asarray(rows), np.asarray(rhs), rcond=None)
    bt = bt.reshape(alpha, alpha)
    if not np.allclose(np.asarray(rows) @ bt.ravel(), rhs, atol=1e-9):
        raise ValueError(f"points {tuple(p)} give no exact F({m},{TAPS})")
    return at, g, np.round(bt, 12)


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U[e, oc, c] = (G g[oc, c] G^T) flattened over e = (a, b): shape (alpha^2, OC, C)."""
    _, g, _ = transform_matrices(m)
    u = np.einsum("ak,ockl,bl->aboc", g, w.astype(np.float64), g)
    return u.reshape(-1, w.shape[0], w.shape[1]).astype(w.dtype)


def reference_winograd(x: np.ndarray, w: np.ndarray, m: int, dtype=np.float32) -> np.ndarray:
    """numpy Winograd of a 'valid' 3x3 conv (N, C, H, W) x (OC, C, 3, 3) with every step in
    `dtype`: what the kernel computes, for measuring the algorithm's error."""
    at, _, bt = (t.astype(dtype) for t in transform_matrices(m))
    u = transform_weights(w, m).astype(dtype).reshape(m + 2, m + 2, w.shape[0], w.shape[1])
    n, c, h, wd = x.shape
    th, tw = (h - 2) // m, (wd - 2) // m
    y = np.zeros((n, w.shape[0], th * m, tw * m), dtype)
    for i in range(th):
        for j in range(tw):
            d = x[:, :, i * m:i * m + m + 2, j * m:j * m + m + 2].astype(dtype)
            v = np.einsum("ar,ncrs,bs->abnc", bt, d, bt)
            prod = np.einsum("aboc,abnc->abno", u, v)
            y[:, :, i * m:(i + 1) * m, j * m:(j + 1) * m] = np.einsum("ia,abno,jb->noij", at, prod, at)
    return y


# ---------------------------------------------------------------- geometry

def tile_grid(out_hw, m: int) -> tuple[int, int]:
    return math.ceil(out_hw[0] / m), math.ceil(out_hw[1] / m)


def padded_input(out_hw, m: int, tile_rows: int) -> tuple[int, int]:
    """Rows and columns of the padded input the tiles read: whole items of tile rows."""
    th, tw = tile_grid(out_hw, m)
    th = -(-th // tile_rows) * tile_rows
    return th * m + TAPS - 1, tw * m + TAPS - 1


# ---------------------------------------------------------------- lowering

def _combine(coeffs, values):
    """sum_i coeffs[i] * values[i] as an expression, skipping zeros and multiplying by +-1
    as an add or a subtract."""
    out = None
    for c, v in zip(coeffs, values):
        if c == 0:
            continue
        term = v if abs(c) == 1 else v * as_expr(float(abs(c)), v.dtype)
        if out is None:
            out = term if c > 0 else -term
        else:
            out = out + term if c > 0 else out - term
    return out if out is not None else as_expr(0.0, values[0].dtype)


@lowering("WinogradConv")
def lower_winograd_conv(node, kb, ins, outs):
    source, u, bias, residual = (ins + [None])[:4]
    y, v, mbuf, rows = outs
    m, tile_rows = node.attrs["winograd_m"], node.attrs["tile_rows"]
    alpha = m + TAPS - 1
    at, _, bt = (t.astype(np.float64) for t in transform_matrices(m))
    N, C, H, W = source.shape  # the conv's input, unpadded
    pt, pl = node.attrs["pads_begin"]
    OC, OH, OW = y.shape[1:]
    Hq, Wq = padded_input((OH, OW), m, tile_rows)  # the input as the tiles see it
    TH, TW = (Hq - TAPS + 1) // m, (Wq - TAPS + 1) // m
    chunks = TH // tile_rows
    items = N * chunks
    tc = tile_rows * TW  # GEMM columns per item
    sched = node.schedule
    act = node.attrs.get("activation")
    # a sigmoid's exp and division in the scalar code of each tile cost 5x what they do in
    # a vectorized sweep over the item's rows of the channel, still in L1 (Xeon rocketlake,
    # 1 thread: F(2x2) over 64 channels at 20x20 with SiLU 180 -> 146 us, 143 without it)
    heavy = is_heavy(act)
    dtype = y.dtype

    v_step, m_step = position_stride(C, tc), position_stride(OC, tc)

    def v_base(item):
        return item * (alpha * alpha * v_step)

    def m_base(item):
        return item * (alpha * alpha * m_step)

    def input_transform(item, c, r_base):
        """B^T d B of every tile of channel c in the item: rows first (from the unpadded
        input, the padding as zeros), then columns."""
        n, chunk = item // chunks, item % chunks
        plane = (n * C + c) * H
        zero = as_expr(0.0, dtype)
        lanes = kb.lanes(dtype)
        for a in range(alpha):  # the padding's columns of the row buffer
            for lo, hi in ((0, pl), (pl + W, Wq)):
                if lo < hi:
                    with kb.loop(hi, start=lo, name="pad") as x:
                        kb.store_flat(rows, r_base + a * Wq + x, zero)

        def along_rows(r, tx0, count):
            """Tiles tx0 .. tx0 + count - 1 of tile row r, one per lane: each row of the
            row buffer loads as m + 1 vectors, from which every tile's s-th column is
            picked (lane k holds column tx0 * m + k * m + s)."""
            t0 = r * TW + tx0
            need = count * m + alpha - m  # the elements the group's tiles read, per row
            for a in range(alpha):
                chunks = [Get(kb.local(dtype, chunk, "d", lanes)) for chunk in
                          _run_vectors(rows, r_base + a * Wq + tx0 * m, need, lanes, m + 1)]
                d = [Get(kb.local(dtype, pick_lanes(chunks, m, s), "d", lanes))
                     for s in range(alpha)]
                for b in range(alpha):
                    kb.store_flat(v, v_base(item) + (a * alpha + b) * v_step + c * tc + t0,
                                  _combine(bt[b], d), count)

        with kb.loop(tile_rows, name="r") as r:
            top = (chunk * tile_rows + r) * m - pt  # the input row of the patches' first row

            def along_columns(load):
                with kb.loop(W, name="x") as x:
                    d = [kb.local(dtype, load(i, x), "d") for i in range(alpha)]
                    for a in range(alpha):
                        kb.store_flat(rows, r_base + a * Wq + pl + x,
                                      _combine(bt[a], [Get(q) for q in d]))

            with kb.if_(logical_and(top >= 0, top + alpha <= H)) as branch:
                along_columns(lambda i, x: source.flat((plane + top + i) * W + x))
            with kb.else_(branch):  # a patch over the top or bottom padding
                along_columns(lambda i, x: select(
                    logical_and(top + i >= 0, top + i < H),
                    source.flat((plane + minimum(maximum(top + i, 0), H - 1)) * W + x), zero))
            groups, rest = divmod(TW, lanes)
            if groups:
                with kb.loop(groups, name="tg") as g:
                    along_rows(r, g * lanes, lanes)
            if rest:
                along_rows(r, as_expr(groups * lanes), rest)

    def gemm(item, e):
        emit_gemm(kb, GemmShape(OC, tc, C), _weights(u, e, OC, C, node.attrs),
                  Operand(v, lambda k, p: v_base(item) + e * v_step + k * tc + p),
                  Output(mbuf, lambda oc, p0: m_base(item) + e * m_step + oc * tc + p0),
                  dtype, sched.tiles, a_tiled=True)

    def output_transform(item, oc):
        """A^T m A of every tile of output channel oc in the item, through the epilogue,
        for the outputs that exist."""
        n, chunk = item // chunks, item % chunks
        b_val = kb.local(dtype, bias[oc], "bias") if bias is not None else None
        lanes = kb.lanes(dtype)

        def tile_group(r, tx0, ty, valid_rows, count, width):
            """Tiles tx0 .. tx0 + count - 1 of a tile row, one per lane: M's values load as
            vectors, and each output row's m vectors (column j of every tile) interleave
            into the row's run of y, `width` columns (the last tile of a row may be cut
            short: its lane's other columns are not stored)."""
            t0 = r * TW + tx0
            half = [[None] * alpha for _ in range(valid_rows)]
            for b in range(alpha):  # a column of M at a time: fewer vectors live at once
                column = [Get(kb.local(dtype, mbuf.vec(m_base(item) + (a * alpha + b) * m_step
                                                       + oc * tc + t0, lanes, count), "m", lanes))
                          for a in range(alpha)]
                for i in range(valid_rows):
                    half[i][b] = kb.local(dtype, _combine(at[i], column), "h", lanes)
            valid = _run_lanes(width, lanes, m)
            for i in range(valid_rows):
                run = ((n * OC + oc) * OH + ty * m + i) * OW + tx0 * m
                values = [_combine(at[j], [Get(q) for q in half[i]]) for j in range(m)]
                if b_val is not None:
                    values = [value + Get(b_val) for value in values]
                if residual is not None:
                    chunks = _run_vectors(residual, run, width, lanes, m)
                    values = [value + pick_lanes(chunks, m, j) for j, value in enumerate(values)]
                if not heavy:
                    values = [apply_activation(act, value) for value in values]
                values = [Get(kb.local(dtype, value, "o", lanes)) for value in values]
                for k, chunk in enumerate(interleave_lanes(values)):
                    if valid[k]:
                        kb.store_flat(y, run + k * lanes, chunk, valid[k])

        def tile_row(r, ty, valid_rows):
            groups = (OW // m) // lanes  # vectors of whole tiles; the rest end the row
            if groups:
                with kb.loop(groups, name="tg") as g:
                    tile_group(r, g * lanes, ty, valid_rows, lanes, lanes * m)
            if groups * lanes < TW:
                tile_group(r, as_expr(groups * lanes), ty, valid_rows, TW - groups * lanes,
                           OW - groups * lanes * m)

        with kb.loop(tile_rows, name="r") as r:
            ty = chunk * tile_rows + r
            if TH * m == OH:
                tile_row(r, ty, m)
            else:
                with kb.if_(ty < OH // m) as branch:
                    tile_row(r, ty, m)
                if OH % m:
                    with kb.else_(branch):
                        with kb.if_(ty.eq(OH // m)):
                            tile_row(r, ty, OH % m)
        if heavy:
            first = chunk * (tile_rows * m)  # the item's output rows, a run of y
            run = ((n * OC + oc) * OH + first) * OW
            with kb.loop(minimum(OH - first, tile_rows * m) * OW, name="e") as e:
                kb.store_flat(y, run + e, apply_activation(act, y.flat(run + e)))

    if sched.winograd_phases:
        # three parallel loops, each over every item's channels / positions / output
        # channels: work for two threads even when the plane is one item
        kind = "parallel" if sched.parallel else "serial"
        with kb.loop(items * C, kind=kind, name="ic") as ic:
            input_transform(ic // C, ic % C, ic * (alpha * Wq))
        with kb.loop(items * alpha * alpha, kind=kind, name="ie") as ie:
            gemm(ie // (alpha * alpha), ie % (alpha * alpha))
        with kb.loop(items * OC, kind=kind, name="io") as io:
            output_transform(io // OC, io % OC)
        return
    # one parallel loop over items: an item's V and M stay in cache between its phases
    with kb.loop(items, kind="parallel" if sched.parallel else "serial", name="item") as item:
        with kb.loop(C, name="c") as c:
            input_transform(item, c, item * (alpha * Wq))
        with kb.loop(alpha * alpha, name="e") as e:
            gemm(item, e)
        with kb.loop(OC, name="oc") as oc:
            output_transform(item, oc)


def _run_lanes(width: int, lanes: int, count: int) -> list[int]:
    """The elements of a run of `width` that fall in each of `count` vectors of `lanes`."""
    return [min(max(width - k * lanes, 0), lanes) for k in range(count)]


def _run_vectors(buf, start, width: int, lanes: int, count: int) -> list:
    """A run of `width` elements of buf from `start` as `count` vectors: lanes past the run
    read as 0, and a vector wholly past it is 0 without a load."""
    return [buf.vec(start + k * lanes, lanes, got) if got else L.broadcast(0.0, lanes, buf.dtype)
            for k, got in enumerate(_run_lanes(width, lanes, count))]


LINE = CACHE_LINE // 4  # elements of V and M (float32) per cache line


def position_stride(channels: int, columns: int) -> int:
    """Elements from one position e's block of V (or M) to the next: channels x columns,
    rounded up to an odd number of cache lines. A tile's transforms store (load) one
    value at each of the alpha^2 positions, and at a stride of a multiple of 2 KB those
    all fall in one or two sets of L1 (64 sets: 4 KB apart), more lines than its ways.
    znver5, 1 thread, F(4x4) over 128 -> 128 channels at 40x40, by tile rows per item
    (columns; stride in KB): 4 (40; 20) 4930 us, 5 (50; 25) 1011, 6 (60; 30) 2408,
    7 (70; 35) 1412, 10 (100; 50) 1962; padded so, 4 rows 1219 us, 10 rows 948."""
    lines = -(-channels * columns // LINE)
    return (lines + 1 - lines % 2) * LINE


def scratch_shapes(n: int, c: int, oc: int, out_hw, m: int, tile_rows: int, phases: bool) -> dict:
    """Element counts of the kernel's scratch buffers: V, M and the row buffer (one per
    item, or per item and channel when the input transform is a parallel loop of its own)."""
    th, tw = tile_grid(out_hw, m)
    th = -(-th // tile_rows) * tile_rows
    items = n * th // tile_rows
    tc = tile_rows * tw
    alpha = m + TAPS - 1
    _, wq = padded_input(out_hw, m, tile_rows)
    return {"v": items * alpha * alpha * position_stride(c, tc),
            "m": items * alpha * alpha * position_stride(oc, tc),
            "rows": items * (c if phases else 1) * alpha * wq}

