"""Y = act(A @ W + bias) with W constant and mostly zero blocks: only the nonzero blocks
are stored, loaded and multiplied (passes/sparse_weights.py decides which layers).

Orientation: W is seen as (N outputs, K inputs), as Gemm with transB=1 and the W/R of
LSTM/GRU store it in the model file. A block of shape bh x bw covers bh consecutive outputs
and bw consecutive inputs; either bh or bw is 1 (BLOCK_SHAPES):

* 1 x bw: one output, bw inputs. A bw-lane accumulator per output row gets
  acc += W_block * A[m, col : col + bw]; its lanes are summed once at the end of the row.
* bh x 1: bh outputs, one input. The accumulator holds the bh outputs:
  acc += W_block * broadcast(A[m, col]); no horizontal sum.

Layout (pack_block_sparse), everything in the order the kernel uses it:
    values[b, :]  the b-th nonzero block (bh * bw floats), one sequential stream
    cols[b]       the block column of block b (its first input / bw), in the narrowest
                  unsigned type that holds K / bw: weights stream from memory at batch 1,
                  and one byte per block instead of four is 10% of a 1x8 block's bytes
    rows[r]       the block row (bh outputs) that the r-th processed row writes
Block rows are sorted by their number of blocks and run in groups of equal count; the
node's attrs["groups"] = ((count, rows), ...) is compile-time structure, so each group is
a loop whose body is `count` blocks unrolled (UNROLL at a time past that): no branch per
block, and the loop branches repeat the same trip count, so they are predicted. The block
pattern (counts, not values or columns) is part of the kernel's key, like a shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.loops import INDEX, Get, as_expr, broadcast, cast, chain_add, reduce_lanes
from .epilogue import apply_activation
from .registry import lowering

BLOCK_SHAPES = ((1, 1), (1, 4), (1, 8), (1, 16), (4, 1), (8, 1), (16, 1))
UNROLL = 16      # blocks per unrolled body; longer rows loop over bodies of this size
# independent FMA chains per row: a block is an FMA with two loads (its slice of A, its
# values), three loads a cycle keep ~1.5 FMAs in flight per cycle, and an FMA takes 4
ACCUMULATORS = 4


@dataclass(frozen=True)
class BlockSparse:
    """W (N, K) as its nonzero bh x bw blocks, in use order (see the module docstring)."""
    block: tuple[int, int]
    values: np.ndarray   # (blocks, bh * bw) float32
    cols: np.ndarray     # (blocks,) uint8/uint16/int32: block column of each block
    rows: np.ndarray     # (block rows,) uint8/uint16/int32: block row of each processed row
    groups: tuple        # ((blocks per row, rows), ...) in processing order
    density: float       # nonzero blocks / all blocks

    @property
    def nnz_blocks(self) -> int:
        return len(self.cols)


def block_mask(w: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """(N / bh, K / bw) booleans: which blocks of W (N, K) hold a nonzero."""
    bh, bw = block
    n, k = w.shape
    return (w.reshape(n // bh, bh, k // bw, bw) != 0).any(axis=(1, 3))


def fits(shape: tuple[int, int], block: tuple[int, int]) -> bool:
    return shape[0] % block[0] == 0 and shape[1] % block[1] == 0


def pack_block_sparse(w: np.ndarray, block: tuple[int, int]) -> BlockSparse:
    """W (N, K) -> its nonzero blocks in use order, block rows sorted by block count."""
    if not fits(w.shape, block):
        raise ValueError(f"{block[0]}x{block[1]} blocks do not tile a {w.shape} matrix")
    bh, bw = block
    mask = block_mask(w, block)
    counts = mask.sum(axis=1)
    order = np.argsort(-counts, kind="stable")
    tiles = w.reshape(w.shape[0] // bh, bh, w.shape[1] // bw, bw).transpose(0, 2, 1, 3)
    values, cols = [], []
    for r in order:
        (nz,) = np.nonzero(mask[r])
        values.append(tiles[r, nz].reshape(len(nz), bh * bw))
        cols.append(nz)
    distinct, sizes = np.unique(-counts[order], return_counts=True)
    groups = tuple((int(-c), int(s)) for c, s in zip(distinct, sizes))
    return BlockSparse(block, np.ascontiguousarray(np.concatenate(values), np.float32),
                       np.concatenate(cols).astype(column_dtype(w.shape[1] // bw)),
                       order.astype(column_dtype(len(order))), groups,
                       float(mask.mean()))


def column_dtype(count: int) -> np.dtype:
    """The narrowest index type for 0 .. count - 1 (block columns or block rows)."""
    for dtype in (np.uint8, np.uint16):
        if count <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int32)


@lowering("SparseGemm")
def lower_sparse_gemm(node, kb, ins, outs):
    _SparseGemm(node, kb, ins, outs).emit()


class _SparseGemm:
    """ins: A (..., K), values, cols, rows, bias (N,) or None, int8 scales (N,) or None;
    attrs: block, groups, activation."""

    def __init__(self, node, kb, ins, outs):
        self.kb = kb
        self.a, self.values, self.cols, self.rows, self.bias, self.scale = (ins + [None])[:6]
        self.y = outs[0]
        self.bh, self.bw = node.attrs["block"]
        self.groups = node.attrs["groups"]
        self.act = node.attrs.get("activation")
        self.K, self.N = self.a.shape[-1], self.y.shape[-1]
        self.M = math.prod(self.a.shape[:-1])
        self.lanes = self.bh * self.bw  # accumulator width: one block

    def emit(self):
        with self.kb.loop(self.M, name="m") as m:
            first_block, first_row = 0, 0
            for count, rows in self.groups:
                with self.kb.loop(rows, name="r") as r:
                    self._row(m, first_row + r, first_block + r * count, count)
                first_block += count * rows
                first_row += rows

    def _row(self, m, r, b0, count):
        """One block row: `count` blocks starting at block b0, then the epilogue."""
        kb = self.kb
        accs = [kb.local(np.float32, 0.0, "acc", self.lanes)
                for _ in range(min(ACCUMULATORS, max(count, 1)))]
        whole = count // UNROLL
        if whole:
            with kb.loop(whole, name="u") as u:
                self._blocks(accs, m, b0 + u * UNROLL, UNROLL)
        self._blocks(accs, m, as_expr(b0 + whole * UNROLL), count % UNROLL)
        total = Get(accs[0])
        for acc in accs[1:]:  # reassociating these would fold the chains into one again
            total = chain_add(total, Get(acc))
        self._finish(m, cast(self.rows.flat(r), INDEX), total)

    def _blocks(self, accs, m, b0, n):
        for j in range(n):
            acc = accs[j % len(accs)]
            self.kb.set(acc, chain_add(Get(acc), self._product(m, b0 + j)))

    def _product(self, m, b):
        """W block b times its slice of A[m]: a vector of bh * bw products."""
        # float16 / int8 values (passes/weight_precision.py) are widened in registers
        w = cast(self.values.vec(b * self.lanes, self.lanes), np.float32)
        col = m * self.K + cast(self.cols.flat(b), INDEX) * self.bw
        if self.bh == 1:
            return w * self.a.vec(col, self.bw)
        return w * broadcast(self.a.flat(col), self.bh)

    def _finish(self, m, block_row, total):
        if self.bh == 1:  # 1 x bw: the lanes are parts of one output
            out = block_row
            value = reduce_lanes("add", total)
        else:             # bh x 1: the lanes are bh consecutive outputs
            out = block_row * self.bh
            value = total
        if self.scale is not None:  # int8 values: each output's scale, once
            value = value * self.scale.vec(out, self.bh)
        if self.bias is not None:
            value = value + self.bias.vec(out, self.bh)
        self.kb.store_flat(self.y, m * self.N + out, apply_activation(self.act, value))
