"""Pooling in the blocked layout NCHW[x]c (kernels/conv_blocked.py): one pixel's block of
channels is one vector, so a window is reduced with one vector load per tap and no
shuffles, whatever the stride.

PoolBlocked (MaxPool, AveragePool): taps outside the input read the nearest pixel inside
it; for a max that pixel lies in the same window (a window without dilation is a run of
taps that reaches the input), so it changes nothing; an average replaces it with zero and
divides by RowPool's `count` input. Only the windows that cross a row's ends clamp their
columns, in static code; the others are a loop of plain loads. AMD EPYC (LLVM: znver4),
1 thread: Inception v2's blocked pools 567 -> 392 us, its 3x3 average pools over 28x28
and 14x14 planes about twice as fast (38.5 -> 18.6 us).

GlobalPoolBlocked reduces each plane to one vector (in POOL_CHAINS sums): its
(N, C / x, 1, 1, x) result is the plain (N, C, 1, 1) tensor as it lies in memory.
"""
from __future__ import annotations

from ..ir.loops import Get, as_expr, maximum, minimum, select
from .elementwise import loop_kind
from .depthwise import inside_range
from .pool import _finish, _identity, _merge
from .registry import lowering

# Independent sums over a plane: one chain waits on each add's latency (a global pool of
# 8-lane blocks over MobileNetV3's 28x28 planes).
POOL_CHAINS = 4


@lowering("PoolBlocked")
def lower_pool_blocked(node, kb, ins, outs):
    """attrs as RowPool's (kind max | avg, no dilation); inputs x and, for avg, count."""
    x, count = (ins + [None])[:2]
    y = outs[0]
    kw, sw, left = (node.attrs[a][1] for a in ("kernel_shape", "strides", "pads_begin"))
    N, CB, H, W, lanes = x.shape
    OH, OW = y.shape[2:4]
    lo, hi = inside_range(W, kw, sw, left, OW)
    with kb.loop(N * CB * OH, kind=loop_kind(y.size, N * CB * OH), name="item") as item:
        plane, oh = item // OH, item % OH
        rows = _window_rows(node, x, plane, oh)
        for ow in [*range(lo), *range(hi, OW)]:  # windows that cross the row's ends
            _store_output(kb, node, x, y, count, rows, item, oh, as_expr(ow))
        if hi > lo:
            with kb.loop(hi - lo, name="ow") as k:
                _store_output(kb, node, x, y, count, rows, item, oh, k + lo, inside=True)


def _window_rows(node, x, plane, oh) -> list:
    """(whether inside, flat offset of its first pixel) of each input row of output row oh's
    windows: a row outside the input reads the nearest one inside (for a max that row is in
    the window; an average zeroes it)."""
    kh, sh, top = (node.attrs[a][0] for a in ("kernel_shape", "strides", "pads_begin"))
    H, W, lanes = x.shape[2:]
    rows = []
    for i in range(kh):
        r = oh * sh + (i - top)
        rows.append(((r >= 0) & (r < H), (plane * H + _clamp(r, H)) * W * lanes))
    return rows


def _store_output(kb, node, x, y, count, rows, item, oh, ow, inside: bool = False):
    """y's pixel (item, ow): its window's taps reduced, one vector load each; `inside`: every
    column of the window lies inside the row (no clamp, no select)."""
    kind = node.attrs["kind"]
    kw, sw, left = (node.attrs[a][1] for a in ("kernel_shape", "strides", "pads_begin"))
    W, lanes = x.shape[3:]
    ident = as_expr(_identity(kind, x.dtype), x.dtype)
    acc = None
    for row_inside, row in rows:
        for j in range(kw):
            c = ow * sw + (j - left)
            v = x.vec(row + (c if inside else _clamp(c, W)) * lanes, lanes)
            if kind != "max":
                v = select(row_inside if inside else row_inside & (c >= 0) & (c < W), v, ident)
            acc = v if acc is None else _merge(kind, acc, v)
    if count is not None:
        acc = acc / count[(oh, ow)]
    kb.store_flat(y, (item * y.shape[3] + ow) * lanes, acc)


def _clamp(i, n: int):
    return minimum(maximum(i, 0), n - 1)


@lowering("GlobalPoolBlocked")
def lower_global_pool_blocked(node, kb, ins, outs):
    """attrs: kind (max | avg)."""
    x, y = ins[0], outs[0]
    kind = node.attrs["kind"]
    N, CB, H, W, lanes = x.shape
    plane = H * W
    chains = min(POOL_CHAINS, plane)
    with kb.loop(N * CB, kind=loop_kind(x.size, N * CB), name="plane") as p:
        accs = [kb.local(x.dtype, _identity(kind, x.dtype), "acc", lanes) for _ in range(chains)]
        with kb.loop(plane // chains, name="s") as s:
            for k, acc in enumerate(accs):
                at = (p * plane + s * chains + k) * lanes
                kb.set(acc, _merge(kind, Get(acc), x.vec(at, lanes)))
        for k in range(plane % chains):
            at = (p * plane + plane - plane % chains + k) * lanes
            kb.set(accs[k], _merge(kind, Get(accs[k]), x.vec(at, lanes)))
        total = Get(accs[0])
        for acc in accs[1:]:
            total = _merge(kind, total, Get(acc))
        count = as_expr(float(plane), x.dtype)
        kb.store_flat(y, p * lanes, _finish(kind, total, count, 2))
