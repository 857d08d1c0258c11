"""Pooling. Windowed pools (RowPool) make one row of outputs at a time, straight from the
input: first the reduction over the window's leading-dims taps of every input column, a
unit-stride pass into a row buffer padded at both ends with the reduction's identity (the
rows outside the input are read clamped and replaced by the identity); then each output
reads its last-dim taps from that buffer, at the stride, which LLVM vectorizes as
interleaved loads. Both passes keep all the taps of a window in registers.

Rows of at most ROW_VECTORS vectors stay in registers instead (_pool_row_in_registers):
the window's input rows reduced as whole vectors, then each output vector's column taps
picked from them by lane shuffles. LLVM's vectorizer had left both passes of such rows
scalar (14 columns, then 7 outputs at stride 2, in 16 lanes), and a row buffer written
by vector stores and read back at other offsets stalls each read on a store that cannot
forward to it. AMD EPYC (LLVM: znver4), 1 thread, row buffer -> registers: 3x3 stride-2
average pool over 272 channels at 14x14 30.4 -> 11.2 us (ONNX Runtime 16.1), over 136 at
28x28 40.0 -> 13.7; 3x3 max pool over 480 channels at 14x14 43.2 -> 26.0, over 192 at
28x28 95.3 -> 37.4; ShuffleNet's pools 107 -> 64 us. Built for AVX2 on that core, the
272-channel pool 30.2 -> 12.4 us and 2x2 stride 2 over 512 channels at 14x14 19.3 -> 23.1.

emeraldrapids, 1 thread, SqueezeNet's first max-pool (64 x 111 x 111, 3x3, stride 2, ceil):
272 + 284 us as ConvPad (pad with -inf, split into stride phases) and a pass over all of
that per tap, 138 us as RowPool; ResNet-50's (64 x 112 x 112, pads 1) 629 -> 145 us.

MaxPool with an Indices output needs the winning position, so it has its own direct kernel.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ..ir.loops import (Get, as_expr, binop, broadcast, call, logical_and, maximum, minimum,
                        pick_lanes, row_major_strides, select)
from .elementwise import loop_kind
from .registry import lowering


def _combine(kind: str, acc, value, p):
    return _merge(kind, acc, value if kind != "lp" else _lp_term(value, p))


def _merge(kind: str, a, b):
    """Two partial reductions (lp: of terms already raised to the power p)."""
    return maximum(a, b) if kind == "max" else a + b


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


@lowering("RowPool")
def lower_row_pool(node, kb, ins, outs):
    """attrs: kind (max | avg | lp), p, kernel_shape, strides, dilations, pads_begin.
    Inputs: x, count (avg only). Outputs: y and the row buffer (N * C, width)."""
    x, count = (ins + [None])[:2]
    y, row = outs
    kind, p = node.attrs["kind"], node.attrs.get("p", 2)
    N, C = x.shape[:2]
    pad, width, cols = node.attrs["pads_begin"][-1], row.shape[1], x.shape[-1]
    ident = _identity(kind, x.dtype)
    in_registers = _row_fits_registers(node.attrs, x, kb.lanes(x.dtype))
    rows = list(itertools.product(*map(range, y.shape[2:-1])))
    with kb.loops((N, C), kind=loop_kind(x.size)) as (n, c):
        plane = n * C + c
        if in_registers and len(rows) <= STATIC_ROWS:
            for k, o in enumerate(rows):
                _pool_row_in_registers(kb, x, y, count, (n, c, *map(as_expr, o)), node.attrs,
                                       ident, p, (len(rows) - 1 - k) * y.shape[-1])
        elif in_registers:
            with kb.loops(y.shape[2:-1]) as o:
                _pool_row_in_registers(kb, x, y, count, (n, c, *o), node.attrs, ident, p, 0)
        else:
            _fill_row_edges(kb, row, plane * width, pad, pad + cols, ident)
            with kb.loops(y.shape[2:-1]) as o:
                _reduce_rows(kb, x, row, plane, o, node.attrs, cols, ident, p)
                _reduce_columns(kb, y, row, (n, c, *o), plane * width, node.attrs, count, p)


# Input rows of up to this many vectors are reduced in registers (_pool_row_in_registers),
# in static code for planes of up to STATIC_ROWS output rows.
ROW_VECTORS = 2
STATIC_ROWS = 32


def _row_fits_registers(attrs, x, lanes: int) -> bool:
    """float32 rows of at most ROW_VECTORS vectors, padded at the start by at most one."""
    return (x.dtype == np.float32 and lanes > 1 and -(-x.shape[-1] // lanes) <= ROW_VECTORS
            and attrs["pads_begin"][-1] <= lanes)


def _pool_row_in_registers(kb, x, y, count, out_idx, attrs, ident, p, later: int):
    """y[out_idx..., :]: the window's input rows reduced in vectors of columns that hold
    `ident` past the row, then column tap t of output ox is lane (ox * s + t * d) of those
    vectors with a vector of `ident` on either side (lane shuffles, no memory).
    A last vector that spills into the `later` elements of the plane that the rows after
    it write is stored whole: AVX2's masked stores are microcoded (znver4 built for AVX2,
    1 thread, masked -> whole: 3x3 max pool over 832 channels at 7x7 31.6 -> 19.8 us)."""
    kind, lanes = attrs["kind"], kb.lanes(x.dtype)
    s, d, k = attrs["strides"][-1], attrs["dilations"][-1], attrs["kernel_shape"][-1]
    pad, cols, outs = attrs["pads_begin"][-1], x.shape[-1], y.shape[-1]
    plane = out_idx[0] * x.shape[1] + out_idx[1]
    base = plane * int(np.prod(x.shape[2:], dtype=np.int64))
    sources = _window_rows(x.shape[2:], out_idx[2:], attrs)
    edge = broadcast(as_expr(ident, x.dtype), lanes)
    parts = [edge]
    for w0 in range(0, cols, lanes):
        reduced = _reduce_sources(kind, sources, ident, p, lambda offset, w0=w0: x.vec(
            base + offset + w0, lanes, min(lanes, cols - w0), fill=ident))
        parts.append(Get(kb.local(x.dtype, reduced, "row", lanes)))
    out = y.offset((*out_idx, 0))
    counts = count.offset((*out_idx[2:], 0)) if count is not None else None
    for ox in range(0, outs, lanes):
        valid = min(lanes, outs - ox)
        valid = None if lanes - valid <= later else valid  # count has y's plane's shape
        firsts = [lanes - pad + ox * s + t * d for t in range(k)]
        # every lane picks inside the parts (past the row: ident), those past `valid` too
        while len(parts) * lanes < max(firsts) + (lanes - 1) * s + 1:
            parts.append(edge)
        acc = functools.reduce(functools.partial(_merge, kind),
                               [pick_lanes(parts, s, f) for f in firsts])
        cnt = count.vec(counts + ox, lanes, valid) if count is not None else None
        kb.store_flat(y, out + ox, _finish(kind, acc, cnt, p), valid)


def _identity(kind: str, dtype):
    """What padding contributes: nothing to a max, zero to a sum."""
    if kind != "max":
        return 0.0
    return float("-inf") if np.dtype(dtype).kind == "f" else int(np.iinfo(dtype).min)


def _fill_row_edges(kb, row, base, lo, hi, ident):
    """The row buffer's columns outside the input, [0, lo) and [hi, width), hold `ident`."""
    for start, stop in ((0, lo), (hi, row.shape[1])):
        if start < stop:
            with kb.loop(stop - start, name="e") as e:
                kb.store_flat(row, base + start + e, as_expr(ident, row.dtype))


def _reduce_rows(kb, x, row, plane, o, attrs, cols, ident, p):
    """row[pad + w] = the reduction over the window's input rows (the leading spatial taps)
    of column w. Rows outside the input read a clamped row and contribute `ident`."""
    kind = attrs["kind"]
    sources = _window_rows(x.shape[2:], o, attrs)
    base, width = plane * int(np.prod(x.shape[2:], dtype=np.int64)), row.shape[1]
    with kb.loop(cols, name="w") as w:
        kb.store_flat(row, plane * width + attrs["pads_begin"][-1] + w, _reduce_sources(
            kind, sources, ident, p, lambda offset: x.flat(base + offset + w)))


def _reduce_sources(kind: str, sources, ident, p, load):
    """The reduction over the window's input rows (_window_rows) of load(row offset); a row
    outside the input contributes `ident`."""
    vals = []
    for inside, offset in sources:
        v = load(offset)
        v = _lp_term(v, p) if kind == "lp" else v
        vals.append(v if inside is None else select(inside, v, as_expr(ident, v.dtype)))
    return functools.reduce(functools.partial(_merge, kind), vals)


def _window_rows(in_spatial, o, attrs):
    """(inside, offset of the row) of each leading-dims tap of the window at output o;
    inside is None when there are no leading dims."""
    a = attrs
    lead_shape, strides = in_spatial[:-1], row_major_strides(in_spatial)
    rows = []
    for taps in itertools.product(*[range(k) for k in a["kernel_shape"][:-1]]):
        inside, offset = None, as_expr(0)
        for oi, t, s, d, pb, size, st in zip(o, taps, a["strides"], a["dilations"],
                                             a["pads_begin"], lead_shape, strides):
            pos = oi * s + (t * d - pb)
            ok = logical_and(pos >= 0, pos < size)
            inside = ok if inside is None else logical_and(inside, ok)
            offset = offset + minimum(maximum(pos, 0), size - 1) * st
        rows.append((inside, offset))
    return rows


def _reduce_columns(kb, y, row, out_idx, base, attrs, count, p):
    """y[..., ox] = the reduction of the row buffer over the window's last-dim taps."""
    kind = attrs["kind"]
    s, d, k = attrs["strides"][-1], attrs["dilations"][-1], attrs["kernel_shape"][-1]
    with kb.loop(y.shape[-1], name="ox") as ox:
        vals = [row.flat(base + ox * s + t * d) for t in range(k)]
        acc = functools.reduce(functools.partial(_merge, kind), vals)
        cnt = count[(*out_idx[2:], ox)] if count is not None else None
        kb.store(y, (*out_idx, ox), _finish(kind, acc, cnt, p))


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
    lowest = _identity("max", x.dtype)
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
    init = _identity(kind, x.dtype)
    with kb.loops((N, C), kind=loop_kind(x.size)) as (n, c):
        base = (n * C + c) * plane
        acc = kb.local(x.dtype, init)
        with kb.loop(plane, name="s") as s:
            kb.set(acc, _combine(kind, Get(acc), x.flat(base + s), p))
        count = as_expr(float(plane), x.dtype)
        kb.store_flat(y, n * C + c, _finish(kind, Get(acc), count, p))
