"""Convolutions computed one output row at a time, stored straight into y.

kernels/conv.py's implicit GEMM runs over the wide q grid (every q column of every output
row), into a scratch that a last pass crops into y. Where the wide output is big (a stem: a
few input channels into many, at 112 x 112 or more) the scratch and y are both past L2, and
scratch and crop cost SqueezeNet's stem 0.18 of its 0.48 ms (Xeon, 1 thread). Here the
columns of a GEMM are one output row's positions, a run of whole vectors and a masked last
one:

    for each output row r (work items are runs of rows):
        for each tile of mr output channels, for each tile of nr vectors along the row:
            acc[i][j] += W[m0 + i, k] * xq[koff[k] + q_offset(r) + p0 + j * lanes : + lanes]
            y[m0 + i, r * width + p0 + j * lanes : + lanes] = act(acc + bias + residual)

B is read in place from the row's windows (the tap table koff as in conv.py), the weights
as passes/pack_weights.py packs them for tiles of mr rows.
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import INDEX, Get, as_expr
from .conv_skinny import OutputRows, output_rows
from .epilogue import apply_activation
from .microkernel import Tile, TileOperands, emit_tile


def row_blocks(blocks: int, rows: int) -> tuple[int, int, int]:
    """(rows per block, block count, rows of the last block) of `rows` output rows in
    about `blocks` blocks."""
    size = max(1, rows // max(1, blocks))
    count = rows // size
    return size, count, rows - (count - 1) * size


def lower_conv_rows(node, kb, ins, outs):
    xq, w, bias, koff, residual = (ins + [None])[:5]
    y, sched = outs[0], node.schedule
    group = node.attrs["group"]
    N, C = xq.shape[:2]
    OC, out_spatial = y.shape[1], y.shape[2:]
    rows = output_rows(out_spatial, xq.shape[-len(out_spatial):])
    icg, ocg = C // group, OC // group
    chan = int(np.prod(xq.shape[2:], dtype=np.int64))
    plane = int(np.prod(out_spatial, dtype=np.int64))
    size, count, tail = row_blocks(sched.blocks, rows.count)
    conv = _RowConv(kb, node, w, bias, koff, residual, xq, y, rows, plane)
    kind = "parallel" if sched.parallel else "serial"
    with kb.loop(N * group * count, kind=kind, name="item") as item:
        n, g, blk = item // (group * count), (item // count) % group, item % count
        x_base, y_base = (n * C + g * icg) * chan, (n * OC + g * ocg) * plane
        if count == 1 or tail == size:
            conv.block(g, x_base, y_base, blk * size, size)
        else:
            with kb.if_(blk < count - 1) as branch:
                conv.block(g, x_base, y_base, blk * size, size)
            with kb.else_(branch):
                conv.block(g, x_base, y_base, as_expr((count - 1) * size), tail)


class _RowConv:
    def __init__(self, kb, node, w, bias, koff, residual, xq, y, rows: OutputRows, plane: int):
        self.kb, self.w, self.bias, self.koff, self.residual = kb, w, bias, koff, residual
        self.xq, self.y, self.rows, self.plane = xq, y, rows, plane
        self.act = node.attrs.get("activation")
        self.ocg = y.shape[1] // node.attrs["group"]
        self.kred = koff.shape[0]
        lanes = kb.lanes(y.dtype)
        self.packed_mr = node.attrs.get("packed_mr")
        mr = self.packed_mr or min(node.schedule.tiles.mr, self.ocg)
        self.tile = Tile(mr, max(1, node.schedule.tiles.nr // lanes), lanes)

    def block(self, g, x_base, y_base, first, n_rows):
        kb, rows = self.kb, self.rows
        with kb.loop(n_rows, name="row") as i:
            q0 = kb.local(INDEX, x_base + rows.q_offset(first + i), "q0")
            p0 = kb.local(INDEX, y_base + (first + i) * rows.width, "p0")
            self._row(g, q0, p0)

    def _row(self, g, q0, p0):
        kb, mr = self.kb, self.tile.mr
        full, edge = divmod(self.ocg, mr)
        if full:
            with kb.loop(full, name="mt") as t:
                self._row_tile(g, t * mr, mr, q0, p0)
        if edge:
            self._row_tile(g, as_expr(full * mr), edge, q0, p0)

    def _row_tile(self, g, m0, mrows, q0, p0):
        """Output channels m0 .. m0 + mrows - 1 of group g along the row: tiles of nr
        vectors, then one of the vectors left, its last one masked."""
        kb, tile = self.kb, self.tile
        full, rest = divmod(self.rows.width, tile.width)
        if full:
            with kb.loop(full, name="ct") as c:
                self._tile(g, m0, mrows, c * tile.width, tile.nr, None, q0, p0)
        if rest:
            vectors = -(-rest // tile.lanes)
            last = rest - (vectors - 1) * tile.lanes
            self._tile(g, m0, mrows, as_expr(full * tile.width), vectors,
                       last if last < tile.lanes else None, q0, p0)

    def _tile(self, g, m0, mrows, col0, vectors, last_valid, q0, p0):
        kb, lanes, K = self.kb, self.tile.lanes, self.kred
        if self.packed_mr:  # (g, m // MR, k, m % MR): one stream per tile
            rows = -(-self.ocg // self.packed_mr) * self.packed_mr
            a_at, offsets = (lambda k: (g * rows + m0) * K + k * self.packed_mr,
                             tuple(range(mrows)))
        else:
            a_at, offsets = lambda k: (g * self.ocg + m0) * K + k, tuple(i * K for i in range(mrows))
        ops = TileOperands(self.w, lambda ks: a_at(ks[0]), offsets,
                           self.xq, lambda ks: Get(q0) + self.koff[ks[0]] + col0)

        def valid(j):
            return last_valid if j == vectors - 1 else None

        def init(i, j):
            if self.bias is None:
                return as_expr(0.0, self.y.dtype)
            return self.bias.flat(g * self.ocg + m0 + i)

        def finish(i, j, value):
            at = kb.local(INDEX, Get(p0) + (m0 + i) * self.plane + col0 + j * lanes, "y_at")
            if self.residual is not None:
                value = value + self.residual.vec(Get(at), lanes, valid(j))
            kb.store_flat(self.y, Get(at), apply_activation(self.act, value), valid(j))

        emit_tile(kb, self.tile, [K], ops, init, finish, mr=mrows, nr=vectors,
                  dtype=self.y.dtype, b_valid=last_valid)
