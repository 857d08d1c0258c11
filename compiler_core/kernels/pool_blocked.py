"""Pooling in the blocked layout NCHW[x]c (kernels/conv_blocked.py): one pixel's block of
channels is one vector, so a window is reduced with one vector load per tap and no
shuffles, whatever the stride.

PoolBlocked (MaxPool, AveragePool): taps outside the input read the nearest pixel inside
it; for a max that pixel lies in the same window (a window without dilation is a run of
taps that reaches the input), so it changes nothing; an average replaces it with zero and
divides by RowPool's `count` input. GlobalPoolBlocked reduces each plane to one vector (in
POOL_CHAINS sums): its
(N, C / x, 1, 1, x) result is the plain (N, C, 1, 1) tensor as it lies in memory.
"""
from __future__ import annotations

from ..ir.loops import Get, as_expr, maximum, minimum, select
from .elementwise import loop_kind
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
    kind = node.attrs["kind"]
    (kh, kw), (sh, sw) = node.attrs["kernel_shape"], node.attrs["strides"]
    top, left = node.attrs["pads_begin"]
    N, CB, H, W, lanes = x.shape
    OH, OW = y.shape[2:4]
    ident = as_expr(_identity(kind, x.dtype), x.dtype)
    with kb.loop(N * CB * OH, kind=loop_kind(y.size, N * CB * OH), name="item") as item:
        plane, oh = item // OH, item % OH
        with kb.loop(OW, name="ow") as ow:
            acc = None
            for i in range(kh):
                r = oh * sh + (i - top)
                for j in range(kw):
                    c = ow * sw + (j - left)
                    at = ((plane * H + _clamp(r, H)) * W + _clamp(c, W)) * lanes
                    v = x.vec(at, lanes)
                    if kind != "max":
                        v = select((r >= 0) & (r < H) & (c >= 0) & (c < W), v, ident)
                    acc = v if acc is None else _merge(kind, acc, v)
            if count is not None:
                acc = acc / count[(oh, ow)]
            kb.store_flat(y, (item * OW + ow) * lanes, acc)


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
