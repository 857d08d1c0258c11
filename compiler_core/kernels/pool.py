"""Pooling. Windowed pools reuse Conv's prepared input (kernels/conv.py): after ConvPad the
window tap t of every output position p reads xq[koff[t] + p], so each tap is one
unit-stride, vectorizable pass over a row of outputs.

MaxPool with an Indices output needs the winning position, so it has its own direct kernel.
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import Get, as_expr, binop, call, maximum, row_major_strides, select
from .elementwise import loop_kind
from .registry import lowering


def _combine(kind: str, acc, value, p):
    if kind == "max":
        return maximum(acc, value)
    if kind == "avg":
        return acc + value
    return acc + _lp_term(value, p)


def _lp_term(value, p):
    a = call("abs", value)
    return a if p == 1 else value * value if p == 2 else _pow(a, p)


def _pow(value, p):
    return binop("pow", value, as_expr(float(p), value.dtype))


def _finish(kind: str, acc, count, p):
    if kind == "max":
        return acc
    if kind == "avg":
        return acc / count
    if p == 1:
        return acc
    return call("sqrt", acc) if p == 2 else _pow(acc, 1.0 / p)


@lowering("WindowPool")
def lower_window_pool(node, kb, ins, outs):
    """attrs: kind (max | avg | lp), p. Inputs: xq, koff (taps), count (avg only)."""
    xq, koff, count = (ins + [None])[:3]
    y, wide = outs[0], (outs[1] if len(outs) > 1 else None)
    kind, p = node.attrs["kind"], node.attrs.get("p", 2)
    N, C = y.shape[:2]
    out_spatial = y.shape[2:]
    q_shape = xq.shape[-len(out_spatial):]
    chan = int(np.prod(xq.shape[2:], dtype=np.int64))
    rows = wide if wide is not None else y
    P = int(np.prod(rows.shape[1:] if wide is not None else out_spatial, dtype=np.int64))
    with kb.loops((N, C), kind=loop_kind(xq.size)) as (n, c):
        x_base = (n * C + c) * chan
        row = (n * C + c) * P
        with kb.loop(P, name="p") as q:
            v = xq.flat(x_base + koff[0] + q)
            kb.store_flat(rows, row + q, v if kind != "lp" else _lp_term(v, p))
        with kb.loop(koff.shape[0], start=1, name="t") as t:
            with kb.loop(P, name="p") as q:
                v = xq.flat(x_base + koff[t] + q)
                kb.store_flat(rows, row + q, _combine(kind, rows.flat(row + q), v, p))
        _finish_rows(kb, y, rows, wide, n, c, row, q_shape, kind, p, count)


def _finish_rows(kb, y, rows, wide, n, c, row, q_shape, kind, p, count):
    """Crop the wide row into y (if any) and apply the average / root."""
    out_spatial = y.shape[2:]
    if wide is None and kind == "max":
        return
    qstr = row_major_strides(q_shape) if wide is not None else row_major_strides(out_spatial)
    with kb.loops(out_spatial) as o:
        src = sum((oi * s for oi, s in zip(o, qstr)), as_expr(0))
        cnt = count[o] if count is not None else None
        kb.store(y, (n, c, *o), _finish(kind, rows.flat(row + src), cnt, p))


@lowering("MaxPoolWithIndices")
def lower_maxpool_indices(node, kb, ins, outs):
    """Direct windows with bounds checks; the first maximum wins, as in ONNX Runtime."""
    x = ins[0]
    y, ind = outs
    a = node.attrs
    N, C = x.shape[:2]
    in_spatial, out_spatial = x.shape[2:], y.shape[2:]
    # storage_order 1 numbers spatial positions column-major (first spatial dim fastest)
    column_major = [int(np.prod(in_spatial[:i], dtype=np.int64)) for i in range(len(in_spatial))]
    pos_strides = row_major_strides(in_spatial) if a["storage_order"] == 0 else column_major
    plane = int(np.prod(in_spatial, dtype=np.int64))
    lowest = (-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
    with kb.loops((N, C, *out_spatial)) as idx:
        n, c, o = idx[0], idx[1], idx[2:]
        best = kb.local(x.dtype, lowest, "best")
        where = kb.local(np.int64, -1, "where")
        with kb.loops(a["kernel_shape"]) as taps:
            pos = [oi * s - pb + t * d for oi, s, pb, t, d in
                   zip(o, a["strides"], a["pads_begin"], taps, a["dilations"])]
            inside = None
            for pi, size in zip(pos, in_spatial):
                ok = (pi >= 0) & (pi < size)
                inside = ok if inside is None else inside & ok
            with kb.if_(inside):
                v = x[(n, c, *pos)]
                better = (v > Get(best)) | Get(where).eq(-1)
                flat = sum((pi * s for pi, s in zip(pos, pos_strides)), as_expr(0))
                kb.set(where, select(better, (n * C + c) * plane + flat, Get(where)))
                kb.set(best, select(better, v, Get(best)))
        kb.store(y, idx, Get(best))
        kb.store(ind, idx, Get(where))


@lowering("GlobalPool")
def lower_global_pool(node, kb, ins, outs):
    """Reduce every (n, c) plane: attrs kind (max | avg | lp) and p."""
    x, y = ins[0], outs[0]
    kind, p = node.attrs["kind"], node.attrs.get("p", 2)
    N, C = x.shape[:2]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    init = 0.0 if kind != "max" else -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    with kb.loops((N, C), kind=loop_kind(x.size)) as (n, c):
        base = (n * C + c) * plane
        acc = kb.local(x.dtype, init)
        with kb.loop(plane, name="s") as s:
            kb.set(acc, _combine(kind, Get(acc), x.flat(base + s), p))
        count = as_expr(float(plane), x.dtype)
        kb.store_flat(y, n * C + c, _finish(kind, Get(acc), count, p))
