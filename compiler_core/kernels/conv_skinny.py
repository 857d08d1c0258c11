"""Convolutions whose output positions fill vector lanes poorly: very few of them (a
speech front end's STFT, a strided 1-D conv over a short chunk: fewer than SKINNY_COLUMNS
columns, a handful of matrix-vector products) or a small plane (7x7: 49 positions in 64
AVX-512 lanes) with long reductions.

Register-tiling along the positions (kernels/matmul.py) would leave the vector lanes
partly empty, and one dot product per output re-reads each weight row per column and
gathers the input through the tap table. Here the roles turn around: the vector lanes run
over output channels, the rows of the register tile are output positions, a piece of one
output row at a time, or whole rows of a plane whose rows are short (so no wide columns are
computed):

    for each k:  w[j] = W[oc0 + j * lanes : + lanes, k]            (one vector load each)
                 x[p] = broadcast(xq[koff[k] + q0 + p])            p < positions
                 acc[p][j] += x[p] * w[j]

so every weight is loaded once per piece of a row, as part of one sequential stream,
which needs W packed by passes/pack_weights.py as panels of `width` output channels:

    packed[g, panel, k, c] = W[g * OCg + panel * width + c, k]   (zeros past OCg)

The accumulators hold outputs of consecutive channels at one position, while Y keeps a
channel's positions together: each lane is stored on its own through the usual epilogue
(P x OC scalar stores against P x OC x K multiply-adds, hence the long reductions).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.loops import INDEX, Expr, Get, as_expr, extract, logical_and, minimum
from .microkernel import PREFETCH_BYTES, Tile, TileOperands, emit_tile

# Below this many columns the column-tiled GEMM fills its vectors poorly: measured on
# Silero VAD's STFT over 8 frames (5 columns each), 30 GFLOP/s tiled, <10 us here.
SKINNY_COLUMNS = 8
MAX_VECTORS = 4  # weight vectors per register tile: the tile's rows are only the positions
MAX_ROWS = 6     # positions per tile when the outputs are that few
MAX_POSITIONS = 12  # positions per tile along a longer output row (32 registers)


def skinny_vectors(columns: int, rows: int, lanes: int, registers: int) -> int:
    """Weight vectors per tile of a GEMM of few columns: positions x vectors accumulators +
    the weight vectors + one broadcast must fit the register file; no more vectors than the
    output channels fill."""
    fit = (registers - 1) // (min(columns, MAX_ROWS) + 1)
    return max(1, min(MAX_VECTORS, fit, -(-rows // lanes)))


def row_tile(rows: int, row_width: int, vectors: int, registers: int) -> int:
    """Positions per tile: as many as fit beside `vectors` vectors along an output row, or
    whole rows of a plane of `rows` rows (0: rows are not evenly spaced in the input) where
    two or more fit. Each weight vector loaded is used once per position: on two FMA
    ports a 7x7 plane's tiles of one row (14 accumulators) wait on the weights' stream
    from L2; of two rows (28) they do not."""
    fit = (registers - 1 - vectors) // vectors
    if rows > 1 and 2 * row_width <= fit:
        return min(rows, fit // row_width) * row_width
    return max(1, min(row_width, MAX_POSITIONS, fit))


def pack_skinny_weights(w: np.ndarray, group: int, width: int) -> np.ndarray:
    """W (OC, C/group, taps...) -> (group, panels, K, width), zero past each group's OCg."""
    ocg = w.shape[0] // group
    k = int(np.prod(w.shape[1:], dtype=np.int64))
    panels = -(-ocg // width)
    padded = np.zeros((group, panels * width, k), w.dtype)
    padded[:, :ocg] = w.reshape(group, ocg, k)
    return np.ascontiguousarray(padded.reshape(group, panels, width, k).transpose(0, 1, 3, 2))


@dataclass(frozen=True)
class OutputRows:
    """The output positions of one (image, group), as `count` rows of `width` positions
    along the last spatial dim: row r's windows start at q_offset(r) in the q grid of xq
    (position p of the row at q_offset(r) + p) and its outputs at r * width in the plane.
    On a plane (two spatial dims) row r + 1's windows start `q_step` after row r's."""
    count: int
    width: int
    q_offset: Callable[[Expr], Expr]
    q_step: int | None


def output_rows(out_spatial, q_shape) -> OutputRows:
    qstr = [int(np.prod(q_shape[i + 1:], dtype=np.int64)) for i in range(len(q_shape))]
    lead = out_spatial[:-1]

    def q_offset(r):
        offset, rest = as_expr(0), as_expr(r)
        for i in reversed(range(len(lead))):
            offset = offset + (rest % lead[i] if i else rest) * qstr[i]
            rest = rest // lead[i]
        return offset
    return OutputRows(int(np.prod(lead, dtype=np.int64)), out_spatial[-1], q_offset,
                      qstr[0] if len(lead) == 1 else None)


def plane_rows(out_spatial) -> int:
    """The rows a tile may span (row_tile's `rows`): a plane's, else none."""
    return out_spatial[0] if len(out_spatial) == 2 else 0


def row_pieces(width: int, most: int) -> tuple[int, int, int]:
    """(size, full, tail): a row of `width` positions as `full` tiles of `size` and one of
    `tail`, the sizes as even as tiles of at most `most` allow (13 -> 7 + 6, not 12 + 1)."""
    size = -(-width // -(-width // most))
    return size, width // size, width % size


def emit_skinny_gemm(kb, w, g, ocg: int, kred: int, sched, x, x_at, rows: OutputRows,
                     out, blk) -> None:
    """out(m, position) = sum_k W[g, m, k] * x(k, position) for the output channels of work
    item `blk`'s panels (its share of sched.blocks), every position; W packed by
    pack_skinny_weights; x_at(k) is the flat index of x(k, q = 0) in buffer `x`; `out` is
    a matmul.Output over the output plane (row m = output channel, column = position).
    A heavy epilogue runs in a vectorized sweep over the item's channels afterwards."""
    lanes, width = sched.lanes, sched.lanes * sched.vectors
    panels, full_panels = -(-ocg // width), ocg // width
    per_item = -(-panels // sched.blocks)
    size, full, tail = row_pieces(rows.width, sched.positions)
    # rows per tile: more than one only where the rows are evenly spaced in the q grid
    span = max(1, sched.positions // rows.width) if rows.q_step is not None else 1
    raw = out.heavy

    def tile(p, channels, r, first, count):
        """Positions [first, first + count) of the plane from row r on, in one panel of
        `channels` real output channels (the rest of its lanes are zero weights, computed
        and dropped): a piece of row r, or rows from r on when first is 0."""
        q0 = kb.local(INDEX, rows.q_offset(r) + first, "q0")
        offsets = tuple(i // rows.width * (rows.q_step or 0) + i % rows.width
                        for i in range(count))
        ops = TileOperands(x, lambda ks: x_at(ks[0]) + Get(q0), offsets,
                           w, lambda ks: ((g * panels + p) * kred + ks[0]) * width,
                           PREFETCH_BYTES // w.dtype.itemsize)

        def finish(i, j, value):
            at = r * rows.width + first + i
            for lane in range(min(lanes, channels - j * lanes)):
                m = p * width + j * lanes + lane
                v = extract(value, lane)
                kb.store_flat(out.buf, out.start(m, at), v if raw else out.finisher(m)(v, at))
        emit_tile(kb, Tile(count, -(-channels // lanes), lanes), [kred], ops,
                  lambda i, j: as_expr(0.0, np.float32), finish)

    def panel(p, channels):
        if span > 1:
            with kb.loop(rows.count // span, name="rows") as t:
                tile(p, channels, t * span, as_expr(0), span * rows.width)
            left = rows.count % span
            if left:
                tile(p, channels, as_expr(rows.count - left), as_expr(0), left * rows.width)
            return
        with kb.loop(rows.count, name="row") as r:
            if full:
                with kb.loop(full, name="piece") as piece:
                    tile(p, channels, r, piece * size, size)
            if tail:
                tile(p, channels, r, as_expr(full * size), tail)

    lo = blk * per_item
    with kb.loop(minimum(lo + per_item, as_expr(full_panels)), start=lo, name="panel") as p:
        panel(p, width)
    if full_panels < panels:  # the last panel, partly channels, in the item it falls in
        with kb.if_(logical_and(lo <= full_panels, lo + per_item > full_panels)):
            panel(as_expr(full_panels), ocg - full_panels * width)
    if raw:
        plane = rows.count * rows.width
        with kb.loop(minimum((lo + per_item) * width, as_expr(ocg)), start=lo * width,
                     name="m") as m:
            at = kb.local(INDEX, out.start(m, as_expr(0)), "y_at")
            finish = out.finisher(m)
            with kb.loop(plane, name="pos") as pos:
                kb.store_flat(out.buf, Get(at) + pos, finish(out.buf.flat(Get(at) + pos), pos))
