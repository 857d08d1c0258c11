"""Data-movement ops: each output element is a load from a computed input position.

Converters normalise attributes (non-negative axes, full-rank starts/steps/pads), so these
lowerings only turn index maps into loop nests. Index tensors (Gather, Scatter*, OneHot, ...)
are runtime data: negative indices are wrapped with select() as the kernel runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.loops import INDEX, as_expr, broadcast_index, cast, maximum, minimum, select
from .registry import lowering


def wrap_index(e, dim: int):
    """An index loaded from a tensor, as int64, with negative values counted from the end."""
    e = cast(e, INDEX)
    return select(e < 0, e + dim, e)


def replace_at(idx: tuple, axis: int, value) -> tuple:
    return (*idx[:axis], value, *idx[axis + 1:])


@lowering("Reshape")
def lower_reshape(node, kb, ins, outs):
    # Only reached when the memory planner could not make the output a view of the input.
    x, y = ins[0], outs[0]
    with kb.loop(y.size) as i:
        kb.store(y, i, x.flat(i))


@lowering("Transpose")
def lower_transpose(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    perm = node.attrs["perm"]
    with kb.loops(y.shape) as idx:
        src = [None] * len(perm)
        for out_axis, in_axis in enumerate(perm):
            src[in_axis] = idx[out_axis]
        kb.store(y, idx, x[tuple(src)])


@lowering("Concat")
def lower_concat(node, kb, ins, outs):
    axis, y = node.attrs["axis"], outs[0]
    offset = 0
    for x in ins:
        with kb.loops(x.shape) as idx:
            kb.store(y, replace_at(idx, axis, idx[axis] + offset), x[idx])
        offset += x.shape[axis]


@lowering("Slice")
def lower_slice(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    starts, steps = node.attrs["starts"], node.attrs["steps"]
    with kb.loops(y.shape) as idx:
        src = tuple(i * step + start for i, start, step in zip(idx, starts, steps))
        kb.store(y, idx, x[src])


@lowering("Expand")
def lower_expand(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    with kb.loops(y.shape) as idx:
        kb.store(y, idx, x[broadcast_index(idx, x.shape, y.shape)])


@lowering("Tile")
def lower_tile(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    with kb.loops(y.shape) as idx:
        src = tuple(i if n == m else i % n for i, n, m in zip(idx, x.shape, y.shape))
        kb.store(y, idx, x[src])


# ---------------------------------------------------------------- gathers

@lowering("Gather")
def lower_gather(node, kb, ins, outs):
    (x, indices), y, axis = ins, outs[0], node.attrs["axis"]
    k = len(indices.shape)
    with kb.loops(y.shape) as idx:
        pos = wrap_index(indices[idx[axis:axis + k]], x.shape[axis])
        kb.store(y, idx, x[(*idx[:axis], pos, *idx[axis + k:])])


@lowering("GatherElements")
def lower_gather_elements(node, kb, ins, outs):
    (x, indices), y, axis = ins, outs[0], node.attrs["axis"]
    with kb.loops(y.shape) as idx:
        pos = wrap_index(indices[idx], x.shape[axis])
        kb.store(y, idx, x[replace_at(idx, axis, pos)])


@lowering("GatherND")
def lower_gather_nd(node, kb, ins, outs):
    (x, indices), y, batch = ins, outs[0], node.attrs["batch_dims"]
    depth = indices.shape[-1]
    lead = len(indices.shape) - 1  # output dims that walk the index tuples
    with kb.loops(y.shape) as idx:
        src = [indices[(*idx[:lead], as_expr(d))] for d in range(depth)]
        src = [wrap_index(e, x.shape[batch + d]) for d, e in enumerate(src)]
        kb.store(y, idx, x[(*idx[:batch], *src, *idx[lead:])])


# ---------------------------------------------------------------- scatters

def _copy_into(kb, src, dst):
    with kb.loop(dst.size) as i:
        kb.store(dst, i, src.flat(i))


def _combine(reduction: str, old, new):
    if reduction == "none":
        return new
    if reduction == "add":
        return old + new if old.dtype != np.bool_ else old | new
    if reduction == "mul":
        return old * new if old.dtype != np.bool_ else old & new
    return maximum(old, new) if reduction == "max" else minimum(old, new)


@lowering("ScatterND")
def lower_scatter_nd(node, kb, ins, outs):
    (data, indices, updates), y = ins, outs[0]
    depth = indices.shape[-1]
    lead = len(indices.shape) - 1
    _copy_into(kb, data, y)
    with kb.loops(updates.shape) as idx:
        dst = [wrap_index(indices[(*idx[:lead], as_expr(d))], data.shape[d]) for d in range(depth)]
        dst = (*dst, *idx[lead:])
        kb.store(y, dst, _combine(node.attrs["reduction"], y[dst], updates[idx]))


@lowering("ScatterElements")
def lower_scatter_elements(node, kb, ins, outs):
    (data, indices, updates), y, axis = ins, outs[0], node.attrs["axis"]
    _copy_into(kb, data, y)
    with kb.loops(updates.shape) as idx:
        dst = replace_at(idx, axis, wrap_index(indices[idx], data.shape[axis]))
        kb.store(y, dst, _combine(node.attrs["reduction"], y[dst], updates[idx]))


# ---------------------------------------------------------------- padding

@dataclass(frozen=True)
class PaddedAxis:
    """One axis of Pad: negative pads crop first, then the kept span is padded."""
    axis: int
    before: int  # positions added before the kept span
    first: int  # first input position kept
    kept: int  # how many input positions are kept

    @classmethod
    def of(cls, axis: int, n: int, before: int, after: int) -> "PaddedAxis":
        first = max(-before, 0)
        return cls(axis, max(before, 0), first, n - first - max(-after, 0))

    def offset(self, i):
        """Position of output `i` relative to the kept span (out of range in the padding)."""
        return i - self.before

    def source(self, i, mode: str):
        """The input position output `i` copies (constant mode: only valid inside the span)."""
        j, n = self.offset(i), self.kept
        if mode == "edge":
            j = minimum(maximum(j, 0), n - 1)
        elif mode == "wrap":
            j = j % n
        elif mode == "reflect":
            j = j % (2 * n - 2) if n > 1 else as_expr(0)  # reflection repeats every 2n-2
            j = select(j < n, j, 2 * n - 2 - j) if n > 1 else j
        else:
            j = minimum(maximum(j, 0), n - 1)  # keep the load in bounds; the fill is chosen
        return j + self.first


@lowering("Pad")
def lower_pad(node, kb, ins, outs):
    x, fill, y = ins[0], ins[1] if len(ins) > 1 else None, outs[0]
    mode, pads = node.attrs["mode"], node.attrs["pads"]
    rank = len(x.shape)
    padded = [PaddedAxis.of(d, x.shape[d], pads[d], pads[d + rank])
              for d in range(rank) if pads[d] or pads[d + rank]]
    with kb.loops(y.shape) as idx:
        src = list(idx)
        for p in padded:
            src[p.axis] = p.source(idx[p.axis], mode)
        value = x[tuple(src)]
        if mode == "constant":
            value = select(_inside(padded, idx), value,
                           fill.flat(0) if fill is not None else as_expr(0, y.dtype))
        kb.store(y, idx, value)


def _inside(padded, idx):
    inside = as_expr(True, np.bool_)
    for p in padded:
        j = p.offset(idx[p.axis])
        inside = inside & (j >= 0) & (j < p.kept)
    return inside


# ---------------------------------------------------------------- misc

@lowering("OneHot")
def lower_one_hot(node, kb, ins, outs):
    (indices, values), y = ins, outs[0]
    axis, depth = node.attrs["axis"], node.attrs["depth"]
    with kb.loops(y.shape) as idx:
        hot = wrap_index(indices[idx[:axis] + idx[axis + 1:]], depth)
        kb.store(y, idx, select(hot.eq(idx[axis]), values.flat(1), values.flat(0)))


@lowering("Trilu")
def lower_trilu(node, kb, ins, outs):
    x, k, y = ins[0], ins[1] if len(ins) > 1 else None, outs[0]
    diagonal = cast(k.flat(0), INDEX) if k is not None else as_expr(0)
    with kb.loops(y.shape) as idx:
        offset = idx[-1] - idx[-2]
        keep = offset >= diagonal if node.attrs["upper"] else offset <= diagonal
        kb.store(y, idx, select(keep, x[idx], as_expr(0, x.dtype)))


@lowering("CumSum")
def lower_cumsum(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    axis, n = node.attrs["axis"], x.shape[node.attrs["axis"]]
    outer = x.shape[:axis] + x.shape[axis + 1:]
    with kb.loops(outer) as rest:
        total = kb.local(x.dtype, 0)
        with kb.loop(n) as t:
            pos = (n - 1) - t if node.attrs["reverse"] else t
            at = (*rest[:axis], pos, *rest[axis:])
            if node.attrs["exclusive"]:
                kb.store(y, at, kb.get(total))
                kb.set(total, kb.get(total) + x[at])
            else:
                kb.set(total, kb.get(total) + x[at])
                kb.store(y, at, kb.get(total))


@lowering("ReverseSequence")
def lower_reverse_sequence(node, kb, ins, outs):
    (x, lengths), y = ins, outs[0]
    batch_axis, time_axis = node.attrs["batch_axis"], node.attrs["time_axis"]
    with kb.loops(y.shape) as idx:
        length = cast(lengths[(idx[batch_axis],)], INDEX)
        t = idx[time_axis]
        src = replace_at(idx, time_axis, select(t < length, length - 1 - t, t))
        kb.store(y, idx, x[src])

