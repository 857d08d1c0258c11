"""The register tile every dense kernel is built on: broadcast A, vector B, FMA.

A tile holds `mr` rows by `nr` vectors of `lanes` outputs in registers (explicit vector
locals, so the shape is exactly what the schedule says on every target):

    for each reduction index ks (nested loops over k_extents):
        b[j]   = B[b_at(ks) + j * lanes : + lanes]           j < nr   (one vector load each)
        a      = broadcast(A[a_at(ks) + a_offsets[i]])        i < mr   (one scalar each)
        acc[i][j] += a * b[j]                                  (contract: one FMA)

With int8 weights (`pairs`), B holds pairs of reduction rows interleaved per column
(B(2k, n), B(2k+1, n) adjacent), A holds int32 words of two int16 activations, and one
step does two reduction rows: acc[i][j] += pair_dot(widen(b[j]), broadcast(a)), int32
accumulators (ir/loops.py PairDot).

GEMM with packed B, NCHWc convolution (A = input pixels of one output row, B = weights
packed by output-channel block) and batched MatMul are all this loop with other address
functions. The caller owns the loops around the tile, the initial values (zero, bias or
partial sums) and the epilogue that stores each accumulator vector.
"""
from __future__ import annotations

import contextlib

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.loops import INDEX, INT32, Buf, Expr, Get, broadcast, cast, pair_dot

Index = Callable[[tuple], Expr]
CACHE_LINE = 64  # bytes
# How far ahead of a register tile's step its weights are prefetched into L2 (b_ahead).
# conv_skinny reads a panel of weights once per tile along the plane, the first time from
# memory: a 3x3 conv of 512 channels at 7x7 (9.4 MB of weights), Intel Xeon (LLVM:
# rocketlake), 1 thread, weights out of the caches: 2.14 ms without, 1.65 / 1.50 / 1.48 /
# 1.47 ms with 2 / 4 / 8 / 16 KB ahead (1.60 ms prefetching into L1).
PREFETCH_BYTES = 8192
# Tiles of fewer rows use each weight too few times to outrun the hardware's prefetchers,
# and the prefetches take load slots: with them AlexNet's batch-1 fully connected layers
# (1 row) took 1.07x the time, BERT's MatMuls at sequence 128 (tiles of 8 rows) 0.87x.
PREFETCH_MIN_ROWS = 4
# A conv's input packed in panels (conv.py _panel_packer) is read by every row tile of the
# GEMM from L2: prefetched this far ahead into L1 (ResNet-50's 256 -> 64 1x1 conv at 56x56
# alone, same Xeon: 754 -> 720 us warm; the whole model 0.98x).
PACKED_B_AHEAD_BYTES = 3072


@dataclass(frozen=True)
class Tile:
    mr: int     # rows (broadcast A values)
    nr: int     # vectors per row (B loads)
    lanes: int  # elements per vector

    @property
    def width(self) -> int:
        return self.nr * self.lanes


@dataclass(frozen=True)
class TileOperands:
    a: Buf
    a_at: Index        # flat index of A(row 0, ks)
    a_offsets: tuple[int, ...]  # flat distance of each row of A from row 0
    b: Buf
    b_at: Index        # flat index of B(ks, column 0); vector j starts at + j * lanes
    # B elements ahead of each step's row to bring into L2 at that step (0: none): weights
    # too big for the caches stream from memory while the tile computes
    b_ahead: int = 0


def register_tiles(spec_registers: int, lanes: int, rows_hint: int = 64) -> list[Tile]:
    """Tiles that fill the register file: nr * mr accumulators + nr B vectors + 1 broadcast."""
    tiles = []
    for nr in (1, 2, 3, 4):
        mr = (spec_registers - nr - 1) // nr
        if mr >= 1:
            tiles.append(Tile(min(mr, rows_hint), nr, lanes))
    return tiles


def emit_tile(kb, tile: Tile, k_extents: list, ops: TileOperands,
              init: Callable[[int, int], Expr], finish: Callable[[int, int, Expr], None],
              mr: int | None = None, nr: int | None = None, dtype=np.float32,
              pairs: bool = False, b_valid: int | None = None) -> None:
    """One register tile (optionally a smaller mr x nr edge tile of the same loop nest).

    init(i, j) gives accumulator (i, j)'s starting vector (or a scalar to splat);
    finish(i, j, value) receives the final vector and emits its store. With `pairs` the
    reduction indices count pairs of rows and the accumulators are int32 (see above).
    `b_valid`: only the first b_valid lanes of each step's last B vector are read (the
    rest are 0), for a tile at the ragged end of a row.
    """
    mr, nr = mr or tile.mr, nr or tile.nr
    lanes = tile.lanes
    acc_type, b_type, b_lanes = ((INT32, np.int16, 2 * lanes) if pairs
                                 else (dtype, dtype, lanes))
    acc = [[kb.local(acc_type, init(i, j), "acc", lanes) for j in range(nr)] for i in range(mr)]
    with _reduction_loops(kb, k_extents) as ks:
        b_at = kb.local(INDEX, ops.b_at(ks), "b_at")
        # B may be stored narrower (float16, int8 weights): widened in registers
        bv = [kb.local(b_type, cast(ops.b.vec(Get(b_at) + j * b_lanes, b_lanes,
                                              b_valid if j == nr - 1 else None), b_type),
                       "b", b_lanes) for j in range(nr)]
        if ops.b_ahead and mr >= PREFETCH_MIN_ROWS:
            prefetch_lines(kb, ops.b, Get(b_at) + ops.b_ahead, nr * b_lanes)
        a_at = kb.local(INDEX, ops.a_at(ks), "a_at")
        for i in range(mr):
            av = broadcast(ops.a.flat(Get(a_at) + ops.a_offsets[i]), lanes)
            for j in range(nr):
                step = pair_dot(Get(bv[j]), av) if pairs else av * Get(bv[j])
                kb.set(acc[i][j], Get(acc[i][j]) + step)
    for i in range(mr):
        for j in range(nr):
            finish(i, j, Get(acc[i][j]))


def prefetch_lines(kb, buf: Buf, at: Expr, count: int, level: int = 2) -> None:
    """Prefetch the cache lines of `count` elements of buf from flat index `at`."""
    for line in range(0, count * buf.dtype.itemsize, CACHE_LINE):
        kb.prefetch(buf, at + line // buf.dtype.itemsize, level)


@contextlib.contextmanager
def _reduction_loops(kb, extents):
    """Nested "scalar" loops (LLVM must not re-vectorize a register tile) over `extents`;
    an extent is an int or a (start, stop) pair. Yields the tuple of indices."""
    with contextlib.ExitStack() as stack:
        ks = []
        for e in extents:
            start, stop = e if isinstance(e, tuple) else (0, e)
            ks.append(stack.enter_context(kb.loop(stop, start=start, kind="scalar", name="k")))
        yield tuple(ks)
