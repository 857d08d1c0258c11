"""Resize: gather and weigh input taps from per-axis tables built by the converter.

Inputs are x followed, for each resized axis, by its tap index table (out_len, taps), its
weight table (when `weighted`) and its outside mask (when `extrapolation` is set).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..ir.loops import Buf, as_expr, call, cast, maximum, minimum, select
from .registry import lowering


class AxisTables(NamedTuple):
    axis: int
    index: Buf  # (out_len, taps) int64
    weight: Buf | None  # (out_len, taps)
    outside: Buf | None  # (out_len,) bool


def _axis_tables(node, ins) -> list[AxisTables]:
    rest = iter(ins[1:])
    return [AxisTables(axis, next(rest),
                       next(rest) if node.attrs["weighted"] else None,
                       next(rest) if node.attrs["extrapolation"] is not None else None)
            for axis in node.attrs["axes"]]


def _source(idx, tables, taps):
    src = list(idx)
    for table, t in zip(tables, taps):
        src[table.axis] = table.index[(idx[table.axis], t)]
    return tuple(src)


def _weighted_sum(kb, x, idx, tables):
    work = tables[0].weight.dtype
    total = kb.local(work, 0)
    with kb.loops(tuple(table.index.shape[1] for table in tables)) as taps:
        w = None
        for table, t in zip(tables, taps):
            wt = table.weight[(idx[table.axis], t)]
            w = wt if w is None else w * wt
        kb.set(total, kb.get(total) + w * cast(x[_source(idx, tables, taps)], work))
    return kb.get(total)


def _to_output(value, dtype: np.dtype):
    if dtype.kind == "f":
        return cast(value, dtype)
    # integer images: round to nearest and saturate, as ONNX's reference does
    info = np.iinfo(dtype)
    value = minimum(maximum(call("round", value), float(info.min)), float(info.max))
    return cast(value, dtype)


def _outside(idx, tables):
    """True where any axis maps outside the crop box (tf_crop_and_resize)."""
    outside = None
    for table in tables:
        o = table.outside[(idx[table.axis],)]
        outside = o if outside is None else outside | o
    return outside


@lowering("Resize")
def lower_resize(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    tables = _axis_tables(node, ins)
    with kb.loops(y.shape) as idx:
        if node.attrs["weighted"]:
            value = _to_output(_weighted_sum(kb, x, idx, tables), y.dtype)
        else:
            value = x[_source(idx, tables, [as_expr(0)] * len(tables))]
        if node.attrs["extrapolation"] is not None:
            fill = as_expr(node.attrs["extrapolation"], y.dtype)
            value = select(_outside(idx, tables), fill, value)
        kb.store(y, idx, value)
