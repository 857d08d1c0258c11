"""Depthwise convolution in the blocked layout NCHW[x]c (kernels/conv_blocked.py).

One pixel's block of channels is one vector, and a depthwise conv keeps channels apart,
so every tap is a whole vector load times a whole vector of weights: no broadcasts, no
masked lanes at a row's ends, whatever the stride.
A register tile is `positions` outputs along a row; each input vector of a kernel row is
loaded once and summed into every output of the tile whose window holds it:

    acc[p] += x[n, cb, oh * sh + i - ph, (ow0 + p) * sw + j - pw, :] * w[cb, i, j, :]

With stride 1 and 3x3 taps a tile of 8 loads 10 vectors a kernel row for 24 FMAs, where
the plain layout's kernel (kernels/depthwise.py) loads each tap for a vector of columns.
The kernel rows are a loop, not unrolled code: unrolled, LLVM's scheduler summed each
output's 25 taps (5x5) in one run of dependent FMAs before the next output's, with the
shared input vectors spilled (znver4, 1 thread, blocks of 8: 5x5 over 120 channels at
28x28 100 -> 52 us, stride 2 over 72 at 56x56 64 -> 38, 3x3 over 72 at 56x56 57 -> 48).
Putting depthwise convs in blocked regions is what joins a mobile net's 1x1 convs into
one region (passes/blocked_layout.py).
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import Get, as_expr, broadcast, chain_add, maximum, minimum, select
from .conv_blocked import row_pieces
from .depthwise import inside_range
from .epilogue import apply_activation
from .registry import lowering


def pack_depthwise_weights(w: np.ndarray, lanes: int) -> np.ndarray:
    """W (C, 1, kh, kw) -> (C / lanes, kh, kw, lanes)."""
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(c // lanes, lanes, kh, kw).transpose(0, 2, 3, 1))


@lowering("DepthwiseBlocked")
def lower_depthwise_blocked(node, kb, ins, outs):
    """Inputs: x (N, C / x, H, W, x), w packed (pack_depthwise_weights), bias (C) or None,
    residual (blocked, y's shape) or None; attrs: kernel_shape, strides, pads_begin,
    activation. Rows whose window lies inside x run without checks; in the others a tap
    of a kernel row outside x reads a row inside and adds zero. Columns of outputs whose
    taps all lie inside a row run in tiles of the schedule's positions; the few at either
    end are static code with their taps inside only. Reading x as it is spares a padded
    copy (PadBlocked): MobileNetV3 on znver4, 1 thread, 0.29 of its 5.4 ms."""
    x, w, bias, residual = (ins + [None] * 4)[:4]
    y = outs[0]
    kh_n, kw_n = node.attrs["kernel_shape"]
    sh, sw = node.attrs["strides"]
    ph, pw = node.attrs["pads_begin"]
    act = node.attrs.get("activation")
    N, CB, H, W, lanes = x.shape
    OH, OW = y.shape[2:4]
    sched = node.schedule
    lo, hi = inside_range(W, kw_n, sw, pw, OW)
    size, full, tail = row_pieces(hi - lo, sched.positions) if hi > lo else (0, 0, 0)
    zero = broadcast(as_expr(0.0, y.dtype), lanes)

    with kb.loop(N * CB * OH, kind="parallel" if sched.parallel else "serial",
                 name="item") as item:
        plane, oh = item // OH, item % OH
        cb = plane % CB
        b = bias.vec(cb * lanes, lanes) if bias is not None else None

        def tile(ow0, count: int, guarded: bool):
            """Outputs ow0 .. ow0 + count - 1 of row oh (ow0 static where some tap of
            theirs falls outside the row); `guarded`: some kernel row may lie outside x."""
            sums = [kb.local(y.dtype, zero, "acc", lanes) for _ in range(count)]
            with kb.loop(kh_n, name="i") as i:
                r = oh * sh + i - ph
                inside = (r >= 0) & (r < H)
                if guarded:
                    r = minimum(maximum(r, 0), H - 1)
                weights = [kb.local(y.dtype, w.vec(((cb * kh_n + i) * kw_n + j) * lanes, lanes),
                                    "w", lanes) for j in range(kw_n)]
                for col in range((count - 1) * sw + kw_n):
                    users = [(p, col - p * sw) for p in range(count)
                             if 0 <= col - p * sw < kw_n]
                    if not users or (isinstance(ow0, int)
                                     and not 0 <= ow0 * sw + col - pw < W):
                        continue
                    at = ((plane * H + r) * W + ow0 * sw + col - pw) * lanes
                    tap = x.vec(at, lanes)
                    value = kb.local(y.dtype, select(inside, tap, zero) if guarded else tap,
                                     "x", lanes)
                    for p, j in users:
                        kb.set(sums[p], chain_add(Get(sums[p]), Get(weights[j]) * Get(value)))
            for p, acc in enumerate(sums):
                at = ((plane * OH + oh) * OW + ow0 + p) * lanes
                value = Get(acc)
                if b is not None:
                    value = value + b
                if residual is not None:
                    value = value + residual.vec(at, lanes)
                kb.store_flat(y, at, apply_activation(act, value))

        def row(guarded: bool):
            if lo:
                tile(0, min(lo, OW), guarded)
            if max(hi, lo) < OW:
                tile(max(hi, lo), OW - max(hi, lo), guarded)
            if full:
                with kb.loop(full, name="piece") as piece:
                    tile(piece * size + lo, size, guarded)
            if tail:
                tile(as_expr(lo + full * size), tail, guarded)

        top, bottom = inside_range(H, kh_n, sh, ph, OH)
        if top == 0 and bottom == OH:
            row(False)
            return
        with kb.if_((oh >= top) & (oh < bottom)) as branch:
            row(False)
        with kb.else_(branch):
            row(True)
