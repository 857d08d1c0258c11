"""Convolution in the blocked layout NCHW[x]c (x = the target's vector lanes).

A blocked tensor keeps `lanes` consecutive channels of one pixel together:

    xb[n, c // lanes, h, w, c % lanes] = x[n, c, h, w]

so one vector load or store moves one pixel's block of channels. The register tile runs
the lanes over output channels and its rows over output positions along an output row
(or over whole short rows):

    for each (icb, kh, kw, ic):  w[j] = W[panel][icb, kh, kw, ic, j * lanes : + lanes]
                                 x[p] = broadcast(xp[n, icb, oh * s + kh, (ow0 + p) * s + kw, ic])
                                 acc[p][j] += x[p] * w[j]

Every accumulator vector is one pixel's block of output channels: it goes to y as one
vector store, with the bias, residual and activation applied to the vector on the way.
The input is read at any stride through broadcasts, so strided convs need no phase split,
only a zero border (`ConvBlocked`'s input is already padded: `PadBlocked`, or a producer
that writes inside a bordered buffer).

W is packed at compile time as panels of `vectors * lanes` output channels:

    packed[panel, icb, kh, kw, ic, c] = W[panel * width + c, icb * lanes + ic, kh, kw]

Against the plain layout's kernels, alone, 1 thread, Intel Xeon (LLVM: rocketlake), with
Relu and the input's border (old -> new): where the implicit GEMM runs, 1x1 256 -> 64 at
56x56 0.874 -> 0.619 ms, 64 -> 256 at 56x56 0.665 -> 0.631, 1024 -> 256 at 14x14 0.733 ->
0.624, 192 -> 64 at 40x40 0.314 -> 0.230, 3x3 stride 2 128 -> 128 at 56x56 1.846 -> 1.581,
32 -> 64 at 80x80 0.513 -> 0.367; where it does not, Winograd's 3x3 64 -> 64 at 56x56
0.921 -> 1.301 and channel vectors' 512 -> 512 at 7x7 1.303 -> 1.487 and 256 -> 256 at
10x10 0.697 -> 0.753 (passes/blocked_layout.py leaves those plain).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.loops import INDEX, Get, as_expr
from .epilogue import apply_activation
from .microkernel import PREFETCH_BYTES, Tile, TileOperands, emit_tile
from .registry import lowering


@dataclass(frozen=True)
class BlockedConvSchedule:
    vectors: int    # blocks of output channels per register tile (its vector columns)
    positions: int  # output positions per register tile (its rows)
    parallel: bool
    # True: each work item is a group of output rows for every panel of channels in turn
    # (the input read once, the weights once per group: for inputs bigger than the
    # weights); False: a panel for every group of rows (the weights read once)
    rows_outer: bool = False


def pack_blocked_weights(w: np.ndarray, lanes: int, vectors: int) -> np.ndarray:
    """W (OC, C, kh, kw) -> (panels, C / lanes, kh, kw, lanes, vectors * lanes), zero
    channels past OC in the last panel."""
    oc, c, kh, kw = w.shape
    width = vectors * lanes
    panels = -(-oc // width)
    padded = np.zeros((panels * width, c, kh, kw), w.dtype)
    padded[:oc] = w
    blocked = padded.reshape(panels, width, c // lanes, lanes, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 3, 1))


def row_span(out_w: int, positions: int) -> int:
    """Output rows per tile: whole rows where two or more fit, else 1."""
    return max(1, positions // out_w) if 2 * out_w <= positions else 1


def row_pieces(width: int, most: int) -> tuple[int, int, int]:
    """(size, full, tail): a row as `full` tiles of `size` and one of `tail`, as even as
    tiles of at most `most` positions allow (40 -> 14 + 13 + 13, not 14 + 14 + 12)."""
    size = -(-width // -(-width // most))
    return size, width // size, width % size


@lowering("ConvBlocked")
def lower_conv_blocked(node, kb, ins, outs):
    xp, w, bias, residual = (ins + [None] * 4)[:4]
    y = outs[0]
    sched, act = node.schedule, node.attrs.get("activation")
    sh, sw = node.attrs["strides"]
    dh, dw = node.attrs["dilations"]
    kh_n, kw_n = node.attrs["kernel_shape"]
    N, ICB, Hp, Wp, lanes = xp.shape
    _, OCB, OH, OW, _ = y.shape
    vectors = sched.vectors
    width = vectors * lanes
    span = row_span(OW, sched.positions)
    groups = -(-OH // span)

    def tile(n, panel, nv, oh, rows, ow0, count):
        """Output rows [oh, oh + rows), positions [ow0, ow0 + count) of each (rows > 1 only
        with whole rows), channel blocks [panel * vectors, + nv)."""
        per_row = count if rows == 1 else OW
        offsets = tuple(((i // per_row) * sh * Wp + (i % per_row) * sw) * lanes
                        for i in range(rows * per_row))
        x0 = kb.local(INDEX, ((n * ICB) * Hp + oh * sh) * Wp * lanes + ow0 * sw * lanes, "x0")
        ops = TileOperands(
            xp, lambda ks: Get(x0) + ((ks[0] * Hp + ks[1] * dh) * Wp + ks[2] * dw) * lanes + ks[3],
            offsets,
            w, lambda ks: ((((panel * ICB + ks[0]) * kh_n + ks[1]) * kw_n + ks[2]) * lanes
                           + ks[3]) * width,
            PREFETCH_BYTES // w.dtype.itemsize)

        def finish(i, j, value):
            ocb = panel * vectors + j
            at = (((n * OCB + ocb) * OH + oh + i // per_row) * OW + ow0 + i % per_row) * lanes
            if bias is not None:
                value = value + bias.vec(ocb * lanes, lanes)
            if residual is not None:
                value = value + residual.vec(at, lanes)
            kb.store_flat(y, at, apply_activation(act, value))
        emit_tile(kb, Tile(rows * per_row, vectors, lanes), [ICB, kh_n, kw_n, lanes], ops,
                  lambda i, j: as_expr(0.0, np.float32), finish, nr=nv)

    def rows_of(n, panel, nv, oh, rows):
        if rows > 1:
            tile(n, panel, nv, oh, rows, as_expr(0), OW)
            return
        size, full, tail = row_pieces(OW, sched.positions)
        if full:
            with kb.loop(full, name="piece") as piece:
                tile(n, panel, nv, oh, 1, piece * size, size)
        if tail:
            tile(n, panel, nv, oh, 1, as_expr(full * size), tail)

    def panel_rows(n, panel, nv, g):
        if OH % span == 0:
            rows_of(n, panel, nv, g * span, span)
            return
        with kb.if_(g < groups - 1) as branch:
            rows_of(n, panel, nv, g * span, span)
        with kb.else_(branch):
            rows_of(n, panel, nv, as_expr((groups - 1) * span), OH - (groups - 1) * span)

    kind = "parallel" if sched.parallel else "serial"
    full_panels, last = divmod(OCB, vectors)
    if sched.rows_outer:
        with kb.loop(N * groups, kind=kind, name="item") as item:
            with kb.loop(full_panels, name="panel") as panel:
                panel_rows(item // groups, panel, vectors, item % groups)
            if last:
                panel_rows(item // groups, as_expr(full_panels), last, item % groups)
        return
    with kb.loop(N * full_panels * groups, kind=kind, name="item") as item:
        n, panel, g = item // (full_panels * groups), (item // groups) % full_panels, item % groups
        panel_rows(n, panel, vectors, g)
    if last:
        with kb.loop(N * groups, kind=kind, name="item") as item:
            panel_rows(item // groups, as_expr(full_panels), last, item % groups)


@lowering("PadBlocked")
def lower_pad_blocked(node, kb, ins, outs):
    """(N, CB, H, W, lanes) -> (N, CB, H + top + bottom, W + left + right, lanes), zero
    border: one (image, channel block) per iteration, a row's border and copy as runs."""
    x, y = ins[0], outs[0]
    top, left = node.attrs["pads_begin"]
    N, CB, H, W, lanes = x.shape
    Hp, Wp = y.shape[2:4]
    zero = as_expr(0.0, y.dtype)
    with kb.loop(N * CB, kind="parallel" if y.size >= 1 << 15 else "serial") as plane:
        with kb.loop(Hp) as r:
            row = (plane * Hp + r) * Wp * lanes
            inside = (r >= top) & (r < top + H)
            with kb.if_(inside) as branch:
                src = ((plane * H + r - top) * W) * lanes
                with kb.loop(left * lanes) as i:
                    kb.store_flat(y, row + i, zero)
                with kb.loop(W * lanes) as i:
                    kb.store_flat(y, row + left * lanes + i, x.flat(src + i))
                with kb.loop((Wp - W - left) * lanes) as i:
                    kb.store_flat(y, row + (left + W) * lanes + i, zero)
            with kb.else_(branch):
                with kb.loop(Wp * lanes) as i:
                    kb.store_flat(y, row + i, zero)
