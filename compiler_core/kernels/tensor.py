"""Data-movement ops: each output element is a load from a computed input position.

Converters normalise attributes (non-negative axes, full-rank starts/steps/pads), so these
lowerings only turn index maps into loop nests. Index tensors (Gather, Scatter*, OneHot, ...)
are runtime data: negative indices are wrapped as the kernel runs, and every index that
addresses memory is checked (kernels/bounds.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.loops import (INDEX, Get, as_expr, broadcast_index, cast, maximum, minimum, select,
                        transpose_lanes)
from .bounds import IndexCheck
from .elementwise import loop_kind
from .registry import lowering


def wrap_index(e, dim: int):
    """An index loaded from a tensor, as int64, with negative values counted from the end."""
    e = cast(e, INDEX)
    return select(e < 0, e + dim, e)


def replace_at(idx: tuple, axis: int, value) -> tuple:
    return (*idx[:axis], value, *idx[axis + 1:])


def copy_flat(kb, src, dst):
    with kb.loop(dst.size) as i:
        kb.store(dst, i, src.flat(i))


@lowering("Reshape")
def lower_reshape(node, kb, ins, outs):
    # Only reached when the memory planner could not make the output a view of the input.
    copy_flat(kb, ins[0], outs[0])


TRANSPOSE_TILE = 8


@lowering("Transpose")
def lower_transpose(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    perm = node.attrs["perm"]
    writes = len(perm) - 1  # output axis along which stores are contiguous
    reads = perm.index(len(perm) - 1)  # output axis along which loads are contiguous

    def copy(idx):
        src = [None] * len(perm)
        for out_axis, in_axis in enumerate(perm):
            src[in_axis] = idx[out_axis]
        kb.store(y, idx, x[tuple(src)])

    if _vector_blocks(kb, x, perm):
        _transpose_vector_blocks(kb, x, y)
        return
    if reads == writes or min(y.shape[reads], y.shape[writes]) < TRANSPOSE_TILE:
        with kb.loops(y.shape, kind=loop_kind(y.size)) as idx:
            copy(idx)
        return
    # Walking either axis alone strides through memory on the other side; square tiles keep
    # both the lines read and the lines written in cache.
    outer = [d for d in range(len(perm)) if d not in (reads, writes)]
    # the outermost loop that has more than one iteration is the parallel one
    split_outer = any(y.shape[d] > 1 for d in outer)
    kind = loop_kind(y.size)
    with kb.loops([y.shape[d] for d in outer], kind=kind if split_outer else "serial") as rest:
        with kb.loop(_tiles(y.shape[reads]), kind="serial" if split_outer else kind) as ti, \
                kb.loop(_tiles(y.shape[writes])) as tj:
            with _tile(kb, ti, y.shape[reads]) as i, _tile(kb, tj, y.shape[writes]) as j:
                idx = dict(zip(outer, rest)) | {reads: i, writes: j}
                copy(tuple(idx[d] for d in range(len(perm))))


def _vector_blocks(kb, x, perm) -> bool:
    """A swap of the last two axes, the shorter a vector's worth of lanes (the conversions
    to and from the blocked layout, passes/blocked_layout.py)."""
    n = len(perm)
    short = min(x.shape[-2:]) if n >= 2 else 0
    return (list(perm) == [*range(n - 2), n - 1, n - 2] and short in (4, 8, 16)
            and short <= kb.lanes(x.dtype))


def _transpose_vector_blocks(kb, x, y):
    """y[..., b, a] = x[..., a, b], the shorter axis `lanes` long: blocks of lanes x lanes
    along the longer one, `lanes` vectors loaded along b and `lanes` stored along a,
    transposed in registers (ir/loops.transpose_lanes); the longer axis's last partial block
    one element at a time. Each stored vector picked from all those loaded took 240
    shuffles a block of 16 x 16, these take 64: znver4, 1 thread, alone, 32 channels of
    56x56 into NCHW16c 25.6 -> 8.9 us, 128 channels from it 92.9 -> 35.9 us;
    DenseNet-121 new/old 0.987 (interleaved, both orders; Inception v1 1.003)."""
    *outer, A, B = x.shape
    lanes = min(A, B)
    along_b = A == lanes
    whole, tail = divmod(B if along_b else A, lanes)

    def plane(o):  # x's and y's planes (..., A, B) and (..., B, A) start alike
        return x.offset((*o, 0, 0))

    def block(base, k0):
        a0, b0 = (as_expr(0), k0) if along_b else (k0, as_expr(0))
        rows = [Get(kb.local(x.dtype, x.vec(base + (a0 + i) * B + b0, lanes), "row", lanes))
                for i in range(lanes)]
        for j, column in enumerate(transpose_lanes(kb, rows)):
            kb.store_flat(y, base + (b0 + j) * A + a0, column)
    if whole:
        with kb.loops((*outer, whole), kind=loop_kind(x.size)) as idx:
            block(plane(idx[:-1]), idx[-1] * lanes)
    if tail:
        with kb.loops((*outer, tail, lanes)) as idx:
            *o, t, i = idx
            a, b = (i, whole * lanes + t) if along_b else (whole * lanes + t, i)
            kb.store_flat(y, plane(o) + b * A + a, x.flat(plane(o) + a * B + b))


def _tiles(n: int) -> int:
    return -(-n // TRANSPOSE_TILE)


def _tile(kb, t, n: int):
    """The loop over the elements of tile `t` of an axis of length n."""
    first = t * TRANSPOSE_TILE
    last = first + TRANSPOSE_TILE
    return kb.loop(last if n % TRANSPOSE_TILE == 0 else minimum(last, n), start=first)


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
    # A repeated axis is walked as (copy, position) loops: no division per element.
    x, y = ins[0], outs[0]
    repeats = [m // n if n else 1 for n, m in zip(x.shape, y.shape)]
    split = [d for r, n in zip(repeats, x.shape) for d in ((r, n) if r > 1 else (n,))]
    with kb.loops(split) as loop_vars:
        walk, src, dst = iter(loop_vars), [], []
        for r, n in zip(repeats, x.shape):
            copy = next(walk) if r > 1 else None
            i = next(walk)
            src.append(i)
            dst.append(i if copy is None else copy * n + i)
        kb.store(y, tuple(dst), x[tuple(src)])


# ---------------------------------------------------------------- gathers

OUT_OF_RANGE = "an index is out of range for the axis it indexes (ONNX allows -n..n-1)"


@lowering("Gather", checks=OUT_OF_RANGE)
def lower_gather(node, kb, ins, outs):
    (x, indices), (y, flag), axis = ins, outs, node.attrs["axis"]
    k = len(indices.shape)
    check = IndexCheck(kb, flag)
    with kb.loops(y.shape) as idx:
        pos = check.index(indices[idx[axis:axis + k]], x.shape[axis])
        kb.store(y, idx, x[(*idx[:axis], pos, *idx[axis + k:])])
    check.finish()


@lowering("GatherElements", checks=OUT_OF_RANGE)
def lower_gather_elements(node, kb, ins, outs):
    (x, indices), (y, flag), axis = ins, outs, node.attrs["axis"]
    check = IndexCheck(kb, flag)
    with kb.loops(y.shape) as idx:
        pos = check.index(indices[idx], x.shape[axis])
        kb.store(y, idx, x[replace_at(idx, axis, pos)])
    check.finish()


@lowering("GatherND", checks=OUT_OF_RANGE)
def lower_gather_nd(node, kb, ins, outs):
    (x, indices), (y, flag), batch = ins, outs, node.attrs["batch_dims"]
    depth = indices.shape[-1]
    lead = len(indices.shape) - 1  # output dims that walk the index tuples
    check = IndexCheck(kb, flag)
    with kb.loops(y.shape) as idx:
        src = [indices[(*idx[:lead], as_expr(d))] for d in range(depth)]
        src = [check.index(e, x.shape[batch + d]) for d, e in enumerate(src)]
        kb.store(y, idx, x[(*idx[:batch], *src, *idx[lead:])])
    check.finish()


# ---------------------------------------------------------------- scatters

def _combine(reduction: str, old, new):
    if reduction == "none":
        return new
    if reduction == "add":
        return old + new if old.dtype != np.bool_ else old | new
    if reduction == "mul":
        return old * new if old.dtype != np.bool_ else old & new
    return maximum(old, new) if reduction == "max" else minimum(old, new)


@lowering("ScatterND", checks=OUT_OF_RANGE)
def lower_scatter_nd(node, kb, ins, outs):
    (data, indices, updates), (y, flag) = ins, outs
    depth = indices.shape[-1]
    lead = len(indices.shape) - 1
    copy_flat(kb, data, y)
    check = IndexCheck(kb, flag)
    with kb.loops(updates.shape) as idx:
        dst = [check.index(indices[(*idx[:lead], as_expr(d))], data.shape[d])
               for d in range(depth)]
        dst = (*dst, *idx[lead:])
        kb.store(y, dst, _combine(node.attrs["reduction"], y[dst], updates[idx]))
    check.finish()


@lowering("ScatterElements", checks=OUT_OF_RANGE)
def lower_scatter_elements(node, kb, ins, outs):
    (data, indices, updates), (y, flag), axis = ins, outs, node.attrs["axis"]
    copy_flat(kb, data, y)
    check = IndexCheck(kb, flag)
    with kb.loops(updates.shape) as idx:
        dst = replace_at(idx, axis, check.index(indices[idx], data.shape[axis]))
        kb.store(y, dst, _combine(node.attrs["reduction"], y[dst], updates[idx]))
    check.finish()


# ---------------------------------------------------------------- padding

@dataclass(frozen=True)
class PaddedAxis:
    """One axis of Pad: negative pads crop first, then the kept span is padded."""
    axis: int
    before: int  # positions added before the kept span
    after: int  # positions added after it
    first: int  # first input position kept
    kept: int  # how many input positions are kept

    @classmethod
    def of(cls, axis: int, n: int, before: int, after: int) -> "PaddedAxis":
        first = max(-before, 0)
        return cls(axis, max(before, 0), max(after, 0), first, n - first - max(-after, 0))

    def offset(self, i):
        """Position of output `i` relative to the kept span (out of range in the padding)."""
        return i - self.before

    def source(self, i, mode: str):
        """The input position output `i` copies (constant mode: only valid inside the span)."""
        j, n = self.offset(i), self.kept
        if mode == "reflect":
            j = self._reflect(j)
        elif mode == "wrap":
            # one wrap-around needs no division; wider pads go round the torus several times
            j = select(j < 0, j + n, select(j >= n, j - n, j)) if self._within(n) else j % n
        else:  # edge; constant mode also clamps to keep the load in bounds, the fill is chosen
            j = minimum(maximum(j, 0), n - 1)
        return j + self.first

    def _reflect(self, j):
        n = self.kept
        if n == 1:
            return as_expr(0)
        if not self._within(n - 1):
            j = j % (2 * n - 2)  # the reflected sequence repeats every 2n-2 positions
            return select(j < n, j, 2 * n - 2 - j)
        j = select(j < 0, -j, j)
        return select(j >= n, 2 * n - 2 - j, j)

    def _within(self, limit: int) -> bool:
        return self.before <= limit and self.after <= limit


@lowering("Pad")
def lower_pad(node, kb, ins, outs):
    x, fill, y = ins[0], ins[1] if len(ins) > 1 else None, outs[0]
    mode, pads = node.attrs["mode"], node.attrs["pads"]
    rank = len(x.shape)
    padded = [PaddedAxis.of(d, x.shape[d], pads[d], pads[d + rank])
              for d in range(rank) if pads[d] or pads[d + rank]]
    fill = fill.flat(0) if fill is not None else as_expr(0, y.dtype)
    # The innermost axis is split into pad, copy and pad runs, so the long copy run is a
    # plain contiguous loop that vectorizes.
    innermost = padded[-1] if padded and padded[-1].axis == rank - 1 else None
    with kb.loops(y.shape[:-1]) as lead:
        for start, stop, padding in _runs(innermost, y.shape[-1]):
            with kb.loop(stop, start=start) as i:
                computed = padded if padding else [p for p in padded if p is not innermost]
                _store_padded(kb, x, y, (*lead, i), computed, innermost, mode, fill)


def _runs(innermost, n: int) -> list[tuple[int, int, bool]]:
    """(start, stop, is_padding) runs of the innermost output axis."""
    if innermost is None:
        return [(0, n, False)]
    copy_start, copy_stop = innermost.before, innermost.before + innermost.kept
    runs = [(0, copy_start, True), (copy_start, copy_stop, False), (copy_stop, n, True)]
    return [r for r in runs if r[1] > r[0]]


def _store_padded(kb, x, y, idx, computed, innermost, mode, fill):
    src = list(idx)
    if innermost is not None and innermost not in computed:  # inside the copy run
        src[-1] = idx[-1] - innermost.before + innermost.first
    for p in computed:
        src[p.axis] = p.source(idx[p.axis], mode)
    value = x[tuple(src)]
    if mode == "constant" and computed:
        value = select(_inside(computed, idx), value, fill)
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
    exclusive, reverse = node.attrs["exclusive"], node.attrs["reverse"]
    if node.attrs["axis"] is not None:
        _cumsum_along(kb, x, y, node.attrs["axis"], exclusive, reverse)
        return
    # the axis is a run-time input: one loop nest per possible axis, the right one runs
    axis = wrap_index(ins[1].flat(0), len(x.shape))
    for d in range(len(x.shape)):
        with kb.if_(axis.eq(d)):
            _cumsum_along(kb, x, y, d, exclusive, reverse)


def _cumsum_along(kb, x, y, axis: int, exclusive: bool, reverse: bool):
    # Each step adds a whole slice to the previous output slice, so the inner loops run
    # along contiguous memory whatever the axis.
    n, before, after = x.shape[axis], x.shape[:axis], x.shape[axis + 1:]
    if n == 0:
        return
    with kb.loops(before) as lead:
        first = n - 1 if reverse else 0
        with kb.loops(after) as tail:
            at = (*lead, first, *tail)
            kb.store(y, at, as_expr(0, y.dtype) if exclusive else x[at])
        with kb.loop(n, start=1) as t:
            pos = (n - 1) - t if reverse else t
            prev = pos + 1 if reverse else pos - 1
            with kb.loops(after) as tail:
                added = x[(*lead, prev, *tail)] if exclusive else x[(*lead, pos, *tail)]
                kb.store(y, (*lead, pos, *tail), y[(*lead, prev, *tail)] + added)


@lowering("ReverseSequence", checks="a sequence length is out of range (0 to the time axis)")
def lower_reverse_sequence(node, kb, ins, outs):
    (x, lengths), (y, flag) = ins, outs
    batch_axis, time_axis = node.attrs["batch_axis"], node.attrs["time_axis"]
    check = IndexCheck(kb, flag)
    with kb.loops(y.shape) as idx:
        length = check.within(cast(lengths[(idx[batch_axis],)], INDEX), 0, x.shape[time_axis])
        t = idx[time_axis]
        src = replace_at(idx, time_axis, select(t < length, length - 1 - t, t))
        kb.store(y, idx, x[src])
    check.finish()

