"""Resize: gather and weigh input taps from per-axis tables built by the converter.

Inputs are x followed, for each resized axis, by its tap index table (out_len, taps), its
weight table (when `weighted`) and its outside mask (when `extrapolation` is set).
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import as_expr, call, cast, maximum, minimum, select
from .registry import lowering


def _axis_tables(node, ins):
    """-> [(axis, index, weight | None, outside | None)] in the order the converter wrote them."""
    tables, rest = [], iter(ins[1:])
    for axis in node.attrs["axes"]:
        index = next(rest)
        weight = next(rest) if node.attrs["weighted"] else None
        outside = next(rest) if node.attrs["extrapolation"] is not None else None
        tables.append((axis, index, weight, outside))
    return tables


def _source(idx, tables, taps):
    src = list(idx)
    for (axis, index, _, _), t in zip(tables, taps):
        src[axis] = index[(idx[axis], t)]
    return tuple(src)


def _weighted_sum(kb, x, idx, tables, work):
    total = kb.local(work, 0)
    with kb.loops(_tap_counts(tables)) as taps:
        w = None
        for (axis, _, weight, _), t in zip(tables, taps):
            wt = weight[(idx[axis], t)]
            w = wt if w is None else w * wt
        kb.set(total, kb.get(total) + w * cast(x[_source(idx, tables, taps)], work))
    return kb.get(total)


def _tap_counts(tables):
    return tuple(index.shape[1] for _, index, _, _ in tables)


def _to_output(value, dtype: np.dtype):
    if dtype.kind == "f":
        return cast(value, dtype)
    # integer images: round to nearest and saturate, as ONNX's reference does
    info = np.iinfo(dtype)
    value = minimum(maximum(call("round", value), float(info.min)), float(info.max))
    return cast(value, dtype)


@lowering("Resize")
def lower_resize(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    tables = _axis_tables(node, ins)
    with kb.loops(y.shape) as idx:
        if node.attrs["weighted"]:
            work = tables[0][2].dtype
            value = _to_output(_weighted_sum(kb, x, idx, tables, work), y.dtype)
        else:
            value = x[_source(idx, tables, [as_expr(0)] * len(tables))]
        if node.attrs["extrapolation"] is not None:
            outside = None
            for axis, _, _, mask in tables:
                o = mask[(idx[axis],)]
                outside = o if outside is None else outside | o
            value = select(outside, as_expr(node.attrs["extrapolation"], y.dtype), value)
        kb.store(y, idx, value)
