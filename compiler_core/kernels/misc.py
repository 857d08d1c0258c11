"""Kernels for LpNormalization, CumProd, BitCast, Det, MaxUnpool and Col2Im."""
from __future__ import annotations

import numpy as np

from ..ir.loops import INDEX, Expr, as_expr, bitcast, call, cast, select
from .bounds import IndexCheck
from .registry import lowering

F64 = np.dtype(np.float64)


def _ravel(idx, shape) -> Expr:
    """Row-major flat offset of a multi-index into `shape`."""
    flat = as_expr(0)
    for i, n in zip(idx, shape):
        flat = flat * n + i
    return flat


# ---------------------------------------------------------------- LpNormalization

@lowering("LpNormalization")
def lower_lp_normalization(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    axis, p = node.attrs["axis"], node.attrs["p"]
    n = x.shape[axis]
    with kb.loops(x.shape[:axis]) as lead, kb.loops(x.shape[axis + 1:]) as tail:
        total = kb.local(x.dtype, 0.0, "norm")
        with kb.loop(n) as k:
            v = x[(*lead, k, *tail)]
            kb.set(total, kb.get(total) + (call("abs", v) if p == 1 else v * v))
        norm = kb.local(x.dtype, kb.get(total) if p == 1 else call("sqrt", kb.get(total)), "norm")
        with kb.loop(n) as k:
            at = (*lead, k, *tail)
            # an all-zero slice normalises to zeros rather than 0/0
            kb.store(y, at, select(kb.get(norm).eq(0.0), 0.0, x[at] / kb.get(norm)))


# ---------------------------------------------------------------- CumProd

def _cumulative_product(kb, x, y, axis: int, exclusive: bool, reverse: bool):
    n = x.shape[axis]
    with kb.loops(x.shape[:axis]) as lead, kb.loops(x.shape[axis + 1:]) as tail:
        running = kb.local(y.dtype, 1, "prod")
        with kb.loop(n) as t:
            at = (*lead, (n - 1) - t if reverse else t, *tail)
            if exclusive:
                kb.store(y, at, kb.get(running))
                kb.set(running, kb.get(running) * x[at])
            else:
                kb.set(running, kb.get(running) * x[at])
                kb.store(y, at, kb.get(running))


@lowering("CumProd")
def lower_cum_prod(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    exclusive, reverse = node.attrs["exclusive"], node.attrs["reverse"]
    if "axis" in node.attrs:
        _cumulative_product(kb, x, y, node.attrs["axis"], exclusive, reverse)
        return
    # run-time axis: one loop nest per possible axis, the matching one runs
    rank = len(x.shape)
    axis = kb.local(INDEX, cast(ins[1].flat(0), INDEX), "axis")
    for d in range(rank):
        with kb.if_(kb.get(axis).eq(d) | kb.get(axis).eq(d - rank)):
            _cumulative_product(kb, x, y, d, exclusive, reverse)


# ---------------------------------------------------------------- BitCast

@lowering("BitCast")
def lower_bit_cast(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    with kb.loops(x.shape) as idx:
        v = x[idx]
        # bool is i1 in registers but one byte in memory: go through its 0/1 value
        if x.dtype == np.bool_:
            v = cast(v, y.dtype)
        elif y.dtype == np.bool_:
            v = v.ne(0)
        else:
            v = bitcast(v, y.dtype)
        kb.store(y, idx, v)


# ---------------------------------------------------------------- Det

def _pivot_row(kb, lu, k, n):
    """The row at or below k with the largest |lu[row, k]| (partial pivoting)."""
    row = kb.local(INDEX, k, "pivot")
    best = kb.local(F64, call("abs", lu[k, k]), "best")
    with kb.loop(n, start=k + 1) as i:
        with kb.if_(call("abs", lu[i, k]) > kb.get(best)):
            kb.set(row, i)
            kb.set(best, call("abs", lu[i, k]))
    return row


def _swap_rows(kb, lu, a, b, n):
    with kb.loop(n) as j:
        tmp = kb.local(F64, lu[a, j], "tmp")
        kb.store(lu, (a, j), lu[b, j])
        kb.store(lu, (b, j), kb.get(tmp))


def _eliminate_below(kb, lu, k, pivot, n):
    with kb.loop(n, start=k + 1) as i:
        factor = kb.local(F64, lu[i, k] / pivot, "factor")
        with kb.loop(n, start=k + 1) as j:
            kb.store(lu, (i, j), lu[i, j] - kb.get(factor) * lu[k, j])


@lowering("Det")
def lower_det(node, kb, ins, outs):
    """LU factorisation with partial pivoting in float64 scratch; det = sign * prod(diag)."""
    x, (y, lu) = ins[0], outs
    n = x.shape[-1]
    with kb.loops(x.shape[:-2]) as batch:
        with kb.loops((n, n)) as (i, j):
            kb.store(lu, (i, j), cast(x[(*batch, i, j)], F64))
        det = kb.local(F64, 1.0, "det")
        with kb.loop(n) as k:
            row = _pivot_row(kb, lu, k, n)
            with kb.if_(kb.get(row).ne(k)):
                _swap_rows(kb, lu, k, kb.get(row), n)
                kb.set(det, -kb.get(det))
            pivot = kb.local(F64, lu[k, k], "pivot")
            kb.set(det, kb.get(det) * kb.get(pivot))
            # a zero pivot means a singular matrix: det is already 0, skip the division
            with kb.if_(kb.get(pivot).ne(0.0)):
                _eliminate_below(kb, lu, k, kb.get(pivot), n)
        kb.store(y, batch, cast(kb.get(det), y.dtype))


# ---------------------------------------------------------------- MaxUnpool

@lowering("MaxUnpool", checks="an index is outside the unpooled tensor")
def lower_max_unpool(node, kb, ins, outs):
    """Scatter each value to its recorded flat index in the unpooled shape; when the
    requested output is larger, the unpooled tensor sits in its leading corner."""
    (x, indices), (y, flag) = ins, outs
    pooled = tuple(node.attrs["pooled_shape"])
    pooled_size = int(np.prod(pooled))
    with kb.loop(y.size) as i:
        kb.store_flat(y, i, as_expr(0, y.dtype))
    check = IndexCheck(kb, flag)
    with kb.loop(x.size) as i:
        at = kb.local(INDEX, check.index(indices.flat(i), pooled_size, wrap=False), "at")
        if pooled == y.shape:
            kb.store_flat(y, kb.get(at), x.flat(i))
        else:
            coords, rest = [], kb.get(at)
            for n in reversed(pooled):
                coords.insert(0, rest % n)
                rest = rest // n
            kb.store(y, tuple(coords), x.flat(i))
    check.finish()


# ---------------------------------------------------------------- Col2Im

@lowering("Col2Im")
def lower_col2im(node, kb, ins, outs):
    """Sum every column entry into the image pixel its block and tap cover."""
    x, y = ins[0], outs[0]
    block, blocks = node.attrs["block"], node.attrs["blocks"]
    dilations, strides = node.attrs["dilations"], node.attrs["strides"]
    pads = node.attrs["pads_begin"]
    image = y.shape[2:]
    with kb.loop(y.size) as i:
        kb.store_flat(y, i, as_expr(0, y.dtype))
    taps = int(np.prod(block))
    with kb.loops(y.shape[:2]) as (n, c), kb.loops(block) as tap, kb.loops(blocks) as pos:
        pixel = [p * s - pb + t * d for p, s, pb, t, d in zip(pos, strides, pads, tap, dilations)]
        inside = None
        for v, size in zip(pixel, image):
            ok = (v >= 0) & (v < size)
            inside = ok if inside is None else inside & ok
        with kb.if_(inside):
            src = x[(n, c * taps + _ravel(tap, block), _ravel(pos, blocks))]
            at = (n, c, *pixel)
            kb.store(y, at, y[at] + src)
