"""Convolutions with very few output positions (a speech front end's STFT, a strided 1-D
conv over a short chunk): the implicit GEMM has fewer than SKINNY_COLUMNS columns, so it
is a handful of matrix-vector products and the weights, read once, are all the work.

Register-tiling along the columns (kernels/matmul.py) would leave the vector lanes mostly
empty, and one dot product per output re-reads each weight row per column and gathers
the input through the tap table. Here the roles turn around: the vector lanes run over
output channels, the rows of the register tile are the few output positions (up to
MAX_ROWS at a time):

    for each k:  w[j] = W[oc0 + j * lanes : + lanes, k]            (one vector load each)
                 x[p] = broadcast(xq[koff[k] + p])                 p < P
                 acc[p][j] += x[p] * w[j]

so every weight is loaded exactly once, as part of one sequential stream, which needs W
packed by passes/pack_weights.py as panels of `width` output channels:

    packed[g, panel, k, c] = W[g * OCg + panel * width + c, k]   (zeros past OCg)

The accumulators hold outputs of consecutive channels at one position, while Y keeps a
channel's positions together: each lane is stored on its own through the usual epilogue
(P x OC scalar stores against P x OC x K multiply-adds).
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import as_expr, extract
from .microkernel import Tile, TileOperands, emit_tile

# Below this many columns the column-tiled GEMM fills its vectors poorly: measured on
# Silero VAD's STFT over 8 frames (5 columns each), 30 GFLOP/s tiled, <10 us here.
SKINNY_COLUMNS = 8
MAX_VECTORS = 4  # weight vectors per register tile: the tile's rows are only the positions
MAX_ROWS = 6     # positions per register tile; more columns take several passes


def skinny_vectors(columns: int, rows: int, lanes: int, registers: int) -> int:
    """Weight vectors per tile: positions x vectors accumulators + the weight vectors + one
    broadcast must fit the register file; no more vectors than the output channels fill."""
    fit = (registers - 1) // (min(columns, MAX_ROWS) + 1)
    return max(1, min(MAX_VECTORS, fit, -(-rows // lanes)))


def pack_skinny_weights(w: np.ndarray, group: int, width: int) -> np.ndarray:
    """W (OC, C/group, taps...) -> (group, panels, K, width), zero past each group's OCg."""
    ocg = w.shape[0] // group
    k = int(np.prod(w.shape[1:], dtype=np.int64))
    panels = -(-ocg // width)
    padded = np.zeros((group, panels * width, k), w.dtype)
    padded[:, :ocg] = w.reshape(group, ocg, k)
    return np.ascontiguousarray(padded.reshape(group, panels, width, k).transpose(0, 1, 3, 2))


def emit_skinny_gemm(kb, w, g: int | object, ocg: int, columns: int, kred: int, lanes: int,
                     vectors: int, x, x_at, out) -> None:
    """out(m, p) = sum_k W[g, m, k] * x(k, p) for m < ocg, p < columns, with W packed by
    pack_skinny_weights; x_at(k) is the flat index of x(k, 0) in buffer `x` (x(k, p) at
    x_at(k) + p); `out` is a matmul.Output (row m = output channel, column p)."""
    width = lanes * vectors
    panels = -(-ocg // width)
    full, tail = divmod(ocg, width)
    tile = Tile(min(columns, MAX_ROWS), vectors, lanes)

    def panel(p, channels, first, rows):
        """Positions [first, first + rows) of one panel of `channels` real output channels
        (the rest of its lanes are zero weights, computed and dropped)."""
        ops = TileOperands(x, lambda ks: x_at(ks[0]) + first, 1,
                           w, lambda ks: ((g * panels + p) * kred + ks[0]) * width)

        def finish(i, j, value):
            for lane in range(min(lanes, channels - j * lanes)):
                m = p * width + j * lanes + lane
                at = as_expr(first + i)
                kb.store_flat(out.buf, out.start(m, at), out.finisher(m)(extract(value, lane), at))
        emit_tile(kb, tile, [kred], ops, lambda i, j: as_expr(0.0, np.float32), finish,
                  mr=rows, nr=-(-channels // lanes))

    def positions(p, channels):
        for first in range(0, columns, MAX_ROWS):
            panel(p, channels, first, min(MAX_ROWS, columns - first))

    if full:
        with kb.loop(full, name="panel") as p:
            positions(p, width)
    if tail:
        positions(as_expr(full), tail)
