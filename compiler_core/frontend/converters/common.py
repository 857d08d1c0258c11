"""Helpers shared by converters."""
from __future__ import annotations

import numpy as np

from ...errors import CompileError


def broadcast(*shapes) -> tuple[int, ...]:
    """Numpy's rule in plain ints (np.broadcast_shapes refuses shapes too large to allocate,
    which must reach the size check with their real dims)."""
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(int(d) for d in s) for s in shapes]):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise CompileError(f"shapes {[list(s) for s in shapes]} do not broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def const_value(v, what: str) -> np.ndarray:
    """The compile-time value of an input that must be constant (axes, shapes, pads, ...)."""
    if v is None:
        return None
    if not v.is_const:
        raise CompileError(f"{what} must be known at compile time (a constant or computed from "
                           "shapes), but it depends on the model's inputs")
    return v.const


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise CompileError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes, rank: int) -> list[int]:
    return sorted({norm_axis(int(a), rank) for a in axes})


def per_axis_ints(value, n: int, default: int, what: str) -> list[int]:
    """An ints attribute with one value per axis (kernel_shape, strides, pads, ...)."""
    if value is None:
        return [default] * n
    value = [int(v) for v in value]
    if len(value) != n:
        raise CompileError(f"{what} has {len(value)} values, expected {n}")
    return value
