"""Dense matrix products: the register-tiled GEMM core shared with Conv, plus MatMul and Gemm.

The core computes C[m, n] = sum_k A(m, k) * B(k, n) in tiles of MR x NR outputs held in
scalar locals. Each tile's k loop is marked "scalar" so LLVM's loop vectorizer leaves it
alone; the SLP vectorizer then packs the NR columns of every row into AVX registers, which
gives the classic broadcast-A / load-B / FMA micro-kernel (6 x 16 floats = 12 ymm
accumulators on AVX2). Callers describe A, B and the store as functions, so the same core
serves plain matrices, implicit convolution matrices and fused epilogues.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.loops import INDEX, Buf, Expr, Get, as_expr, broadcast_index, minimum, select
from .epilogue import apply_activation, is_arithmetic, is_heavy
from .elementwise import loop_kind
from .microkernel import PACKED_B_AHEAD_BYTES, PREFETCH_BYTES, PREFETCH_MIN_ROWS, prefetch_lines
from .recurrent import L1_BYTES
from .reduce import normalise_row
from .registry import lowering
from .schedule import default_rule, search_space

# The default tiles (see default_tiles): at most 6 rows per register tile, and vectors per
# row by rows so that a tile keeps about 8-12 vector accumulators whatever its height and the
# target's vector width (6 x 2 zmm on AVX-512: a Zen 5 core's two full-width FMA pipes need
# them; 6 x 1 zmm ran its convs at 65-75% of what 6 x 2 reaches).
MAX_MR = 6
VECTORS_FOR_MR = {1: 8, 2: 4, 3: 4, 4: 2, 5: 2, 6: 2}
AVX2_LANES = 8  # float lanes where a caller does not say (the narrowest x86 target)
SMALL_N = 4  # below this many columns, reduce along k with the loop vectorizer instead
# Longer reductions are split into chunks of about this many k so that a tile's slices of
# A (MR x KC) and B (KC x NR) stay in L1; partial sums wait in the output between chunks.
K_CHUNK = 384
L2_BUDGET = 384 * 1024


@dataclass(frozen=True)
class GemmShape:
    M: int
    N: int
    K: int


@dataclass(frozen=True)
class Operand:
    """Where a GEMM operand's elements live in a flat buffer.

    For A, element (m, k) is at base(m, k); for B, element (k, n) is at base(k, n).
    `step` is the flat distance between neighbouring rows of A / columns of B, so a tile
    computes one base per k and reaches its other elements by constant offsets.
    """
    buf: Buf
    base: Callable[[Expr, Expr], Expr]
    step: int = 1


@dataclass(frozen=True)
class Output:
    """Where C goes: C[m, n0 + j] is at flat offset start(m, n0) + j of `buf`.

    row_epilogue(m), if given, is called once per row and returns the (value, n) -> value
    function every element of that row goes through (bias, activation); it may emit locals.
    A `heavy` epilogue (a sigmoid, say) does not run on the register tiles, where it would
    keep LLVM's SLP vectorizer from vectorizing the tile, but in a vectorized sweep over
    each block of finished tiles while they are still in cache.

    row_sweep(m), if given, emits code that rewrites row m in place once every column of
    it is final (a fused softmax): right after each block of rows when one block of
    columns covers them all, the rows still in L1, else once the whole product is done.
    """
    buf: Buf
    start: Callable[[Expr, Expr], Expr]
    row_epilogue: Callable[[Expr], Callable[[Expr, Expr], Expr]] | None = None
    heavy: bool = False
    row_sweep: Callable[[Expr], None] | None = None

    def finisher(self, m):
        return self.row_epilogue(m) if self.row_epilogue is not None else (lambda v, n: v)


@dataclass(frozen=True)
class GemmTiles:
    """emit_gemm's knobs: mr x nr register tiles, reductions in chunks of kc (the tile's
    slices of A and B stay in L1), and nc columns of B per block (its KC x NC slice stays
    in L2)."""
    mr: int
    nr: int
    kc: int
    nc: int


def tile_columns(M: int, N: int, lanes: int = AVX2_LANES) -> int:
    """The width of the default register tiles for an M x N result, in columns."""
    return min(VECTORS_FOR_MR[min(MAX_MR, M)] * lanes, N)


def default_tiles(shape: GemmShape, lanes: int, itemsize: int = 4) -> GemmTiles:
    nr = tile_columns(shape.M, shape.N, lanes)
    kc = even_chunk_size(shape.K, K_CHUNK)
    return GemmTiles(min(MAX_MR, shape.M), nr, kc, l2_columns(kc, nr, itemsize))


def even_chunk_size(total: int, most: int) -> int:
    """The size of the fewest equal chunks of at most `most` that cover `total`."""
    return -(-total // -(-total // most))


def l2_columns(kc: int, nr: int, itemsize: int = 4) -> int:
    """Columns of B per block (whole tiles of nr) whose kc x nc slice stays in L2."""
    return max(1, L2_BUDGET // (kc * itemsize * nr)) * nr


def emit_gemm(kb, shape: GemmShape, a: Operand, b: Operand, out: Output, dtype=np.float32,
              tiles: GemmTiles | None = None, a_tiled: bool = False, b_panels: bool = False):
    """Emit loops computing every C[m, n] = sum_k A(m, k) B(k, n) into `out`. `a_tiled`: A
    is packed in register-tile rows, addressable only at tile starts, so even a block of
    few columns goes through the register tiles. Each is then one stream per row tile, as
    B is per column tile when `b_panels`: the tiles prefetch them."""
    if shape.N < SMALL_N and not a_tiled:
        _emit_dot_products(kb, shape, a, b, out, dtype)
        _sweep_rows(kb, shape.M, out)
    else:
        dtype = np.dtype(dtype)
        tiles = tiles or default_tiles(shape, kb.lanes(dtype), dtype.itemsize)
        _TiledGemm(kb, shape, a, b, out, dtype, tiles, a_tiled, b_panels).emit()


def _sweep_rows(kb, rows: int, out: Output, first: Expr | int = 0):
    if out.row_sweep is not None:
        with kb.loop(rows, name="m") as i:
            out.row_sweep(i + first)


class _TiledGemm:
    """Loop order (GotoBLAS-like): k chunks > column blocks (the block's KC x NC slice of B
    stays in L2) > row blocks of MR rows (their MR x KC slice of A stays in L1) > column
    tiles of NR > the k loop of one register tile."""

    def __init__(self, kb, shape: GemmShape, a: Operand, b: Operand, out: Output, dtype,
                 tiles: GemmTiles, a_tiled: bool = False, b_panels: bool = False):
        self.kb, self.shape, self.a, self.b, self.out, self.dtype = kb, shape, a, b, out, dtype
        # a schedule made for a bigger block of the same GEMM may be wider than this one
        self.mr = min(tiles.mr, shape.M)
        self.nr = min(tiles.nr, shape.N)
        self.chunk_size = even_chunk_size(shape.K, min(tiles.kc, shape.K))
        self.chunks = -(-shape.K // self.chunk_size)
        self.nc = min(shape.N, max(self.nr, tiles.nc - tiles.nc % self.nr))
        # elements ahead of each step to prefetch: A (weights) into L2 as microkernel.py's
        # tiles do; B, already in L2 for every row tile after the first, into L1
        self.a_ahead = (PREFETCH_BYTES // dtype.itemsize
                        if a_tiled and self.mr >= PREFETCH_MIN_ROWS else 0)
        self.b_ahead = PACKED_B_AHEAD_BYTES // dtype.itemsize if b_panels else 0
        self.rows_final_by_block = self.chunks == 1 and self.nc >= shape.N

    def emit(self):
        K = self.shape.K
        if self.chunks == 1:
            self._column_blocks((as_expr(0), as_expr(K)), None)
        else:
            size = self.chunk_size
            with self.kb.loop(self.chunks, name="kc") as c:
                self._column_blocks((c * size, minimum(c * size + size, as_expr(K))), c)
            if self.out.row_epilogue is not None:
                with self.kb.loop(self.shape.M, name="m") as m:
                    self._finish_row(m, as_expr(0), self.shape.N)
        if not self.rows_final_by_block:
            _sweep_rows(self.kb, self.shape.M, self.out)

    def _column_blocks(self, k_range, chunk):
        full, tail = divmod(self.shape.N, self.nc)
        if full == 1 and not tail:
            self._row_blocks(as_expr(0), self.nc, k_range, chunk)
            return
        if full:
            with self.kb.loop(full, name="cb") as cb:
                self._row_blocks(cb * self.nc, self.nc, k_range, chunk)
        if tail:
            self._row_blocks(as_expr(full * self.nc), tail, k_range, chunk)

    def _row_blocks(self, n_lo, width, k_range, chunk):
        full, tail = divmod(self.shape.M, self.mr)
        if full:
            with self.kb.loop(full, name="mb") as mb:
                self._row_block(mb * self.mr, self.mr, n_lo, width, k_range, chunk)
        if tail:
            self._row_block(as_expr(full * self.mr), tail, n_lo, width, k_range, chunk)

    def _row_block(self, m0, mr, n_lo, width, k_range, chunk):
        self._column_tiles(m0, mr, n_lo, width, k_range, chunk)
        if chunk is None and self._sweeps_epilogue:
            with self.kb.loop(mr, name="m") as i:
                self._finish_row(m0 + i, n_lo, width)
        if self.rows_final_by_block:
            _sweep_rows(self.kb, mr, self.out, m0)

    @property
    def _sweeps_epilogue(self) -> bool:
        return self.out.row_epilogue is not None and self.out.heavy

    def _column_tiles(self, m0, mr, n_lo, width, k_range, chunk):
        full, tail = divmod(width, self.nr)
        if full:
            with self.kb.loop(full, name="nb") as nb:
                self._tile(k_range, m0, mr, n_lo + nb * self.nr, self.nr, chunk)
        if tail:
            self._tile(k_range, m0, mr, n_lo + full * self.nr, tail, chunk)

    def _tile(self, k_range, m0, mr, n0, nr, chunk):
        """One mr x nr register tile over k in k_range. When chunked (chunk is the chunk
        index) it starts from the partial sums in `out` after the first chunk and stores
        raw sums; the epilogue runs once all chunks are done."""
        kb, a, b, out, dtype = self.kb, self.a, self.b, self.out, self.dtype
        acc = [self._initial_row(m0 + i, n0, nr, chunk) for i in range(mr)]
        with kb.loop(k_range[1], start=k_range[0], kind="scalar", name="k") as k:
            # every operand value is loaded once into a local, which keeps the IR small
            b_at = kb.local(INDEX, b.base(k, n0), "b_at")
            b_row = [kb.local(dtype, b.buf.flat(Get(b_at) + j * b.step), "b") for j in range(nr)]
            a_at = kb.local(INDEX, a.base(m0, k), "a_at")
            if self.a_ahead:
                prefetch_lines(kb, a.buf, Get(a_at) + self.a_ahead, mr)
            if self.b_ahead:
                prefetch_lines(kb, b.buf, Get(b_at) + self.b_ahead, nr, level=1)
            for i in range(mr):
                a_val = kb.local(dtype, a.buf.flat(Get(a_at) + i * a.step), "a")
                for j in range(nr):
                    kb.set(acc[i][j], Get(acc[i][j]) + Get(a_val) * Get(b_row[j]))
        raw = chunk is not None or self._sweeps_epilogue
        for i in range(mr):
            at = kb.local(INDEX, out.start(m0 + i, n0), "c_at")
            finish = (lambda v, n: v) if raw else out.finisher(m0 + i)
            for j in range(nr):
                kb.store_flat(out.buf, Get(at) + j, finish(Get(acc[i][j]), n0 + j))

    def _initial_row(self, m, n0, nr, chunk) -> list:
        kb, zero = self.kb, as_expr(0.0, self.dtype)
        if chunk is None:
            return [kb.local(self.dtype, zero) for _ in range(nr)]
        at = kb.local(INDEX, self.out.start(m, n0), "c_at")
        first = chunk.eq(0)
        return [kb.local(self.dtype, select(first, zero, self.out.buf.flat(Get(at) + j)))
                for j in range(nr)]

    def _finish_row(self, m, n_lo, width):
        """The epilogue over `width` finished columns of row m from n_lo, in one vectorizable
        loop (a chunked GEMM's, once the last chunk is done; a heavy one's)."""
        kb, out = self.kb, self.out
        at = kb.local(INDEX, out.start(m, n_lo), "c_at")
        finish = out.finisher(m)
        with kb.loop(width, name="n") as n:
            kb.store_flat(out.buf, Get(at) + n, finish(out.buf.flat(Get(at) + n), n_lo + n))


def _emit_dot_products(kb, shape, a, b, out, dtype):
    """Few columns (matrix-vector): one reduction over k per output, vectorized along k."""
    with kb.loop(shape.M, name="m") as m:
        finish = out.finisher(m)
        for j in range(shape.N):
            acc = kb.local(dtype, 0.0)
            with kb.loop(shape.K, name="k") as k:
                kb.set(acc, Get(acc) + a.buf.flat(a.base(m, k)) * b.buf.flat(b.base(k, as_expr(j))))
            kb.store_flat(out.buf, out.start(m, as_expr(j)), finish(Get(acc), as_expr(j)))


# ---------------------------------------------------------------- MatMul

def _batch_offsets(idx, shape, out_batch):
    """Flat offset of the matrix at batch index `idx` in an operand with batch dims `shape`."""
    lead = len(out_batch) - len(shape)
    off: Expr = as_expr(0)
    stride = 1
    for d in reversed(range(len(shape))):
        if shape[d] != 1:
            off = off + idx[lead + d] * stride
        stride *= shape[d]
    return off


def _as_matrices(a: tuple, b: tuple) -> tuple[tuple, tuple]:
    """numpy matmul's operand shapes as (batch..., rows, columns): a vector A is one row, a
    vector B one column."""
    return (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))


def matmul_dims(node) -> tuple[int, int, int]:
    """(M, N, K) of each matrix product of a MatMul node."""
    a_mat, b_mat = _as_matrices(node.inputs[0].shape, node.inputs[1].shape)
    return a_mat[-2], b_mat[-1], a_mat[-1]


def _tiled_float32(node) -> bool:
    """Whether the MatMul runs on float32 register tiles (kernels of other dtypes keep
    emit_gemm's defaults for their own lanes; few columns reduce along k instead)."""
    return node.outputs[0].dtype == np.float32 and matmul_dims(node)[1] >= SMALL_N


# A product of one column tile (an attention's P V: 32 columns, a head's width) reads the
# same KC x NR slice of B in every row block: in chunks of k whose slice takes at most this
# much of L1, it stays there. Xeon (LLVM: rocketlake), BERT-384's P V (384 x 32 over k =
# 384, 12 heads), in 2 chunks of 192 instead of one of 384 (a 48 KB slice), 1 | 2 threads:
# 0.94-0.97 | 0.92-0.98 of the time in the model; whole model new/old, interleaved, 0.973,
# 0.991 and 0.989 at 1 thread, 1.002 and 0.988 at 2.
ONE_TILE_B_SLICE_BYTES = L1_BYTES * 3 // 4


@default_rule("MatMul")
def default_matmul_tiles(node, spec) -> GemmTiles | None:
    """emit_gemm's default tiles, with k in chunks whose slice of B stays in L1 where every
    row block reads the same one. Taller tiles for a product two vectors wide (12 x 32,
    24 accumulators) did not pay as a default: AMD EPYC (LLVM: znver4), BERT-384's P V
    (384 x 32 over k = 384, 12 heads), whole model new/old 0.977-1.003 at 1 thread over five
    interleaved runs, the kernel 1.31 against 1.30-1.46 ms in the model; Xeon (LLVM:
    rocketlake), both in chunks of 192, 0.999 | 1.001 at 1 | 2 threads."""
    if not _tiled_float32(node):
        return None
    M, N, K = matmul_dims(node)
    tiles = default_tiles(GemmShape(M, N, K), spec.vector_bits // 32)
    if N > tiles.nr:
        return tiles
    kc = even_chunk_size(K, min(tiles.kc, ONE_TILE_B_SLICE_BYTES // (4 * tiles.nr)))
    return dataclasses.replace(tiles, kc=kc, nc=l2_columns(kc, tiles.nr))


@search_space("MatMul")
def matmul_space(node, spec) -> list[GemmTiles]:
    """Tiles of 1-4 vectors by 4-12 rows whose accumulators leave registers for B's
    vectors and A's broadcast, times k chunks."""
    if not _tiled_float32(node):
        return []
    M, N, K = matmul_dims(node)
    lanes = spec.vector_bits // 32
    out = []
    for vectors in (1, 2, 3, 4):
        nr = min(vectors * lanes, N)
        for mr in (4, 6, 8, 12):
            if mr * vectors > spec.vector_registers - vectors - 1:
                continue
            for kc in sorted({min(K, c) for c in (128, 256, K_CHUNK, 512)}):
                out.append(GemmTiles(min(mr, M), nr, kc, l2_columns(kc, nr)))
    return list(dict.fromkeys([default_matmul_tiles(node, spec)] + out))


@lowering("MatMul")
def lower_matmul(node, kb, ins, outs):
    """numpy matmul (_as_matrices); batch dims broadcast. A fused epilogue
    (passes/fuse_activation.fuse_epilogue) may read the tensors after A and B, which
    broadcast to Y (an attention's mask). Plain arithmetic runs on the register tiles:
    AMD EPYC (LLVM: znver4), 1 thread, BERT-384's scores scaled and masked by the Q K^T
    MatMul (new/old) 1.012-1.015 on the tiles, 0.998-1.001 in a sweep over each block of
    finished tiles. A fused softmax along the rows (attrs "softmax",
    passes/fuse_softmax.py) runs over each block of finished rows; a "deferred" one leaves
    the division by the row sums to the MatMul that reads Y, and writes 1 / each row's sum
    to its second output (passes/defer_softmax_division.py). The tiles are the node's
    schedule (default_matmul_tiles), or emit_gemm's defaults where it has none."""
    a, b, operands = ins[0], ins[1], ins[2:]
    y = outs[0]
    act = node.attrs.get("activation")
    a_mat, b_mat = _as_matrices(a.shape, b.shape)
    M, K = a_mat[-2:]
    N = b_mat[-1]
    batch = tuple(np.broadcast_shapes(a_mat[:-2], b_mat[:-2]))
    # the threshold counts elements of a memory-bound kernel; a GEMM does its FLOPs about
    # 64 times faster than such a kernel moves elements, hence the scaling
    with kb.loops(batch, kind=loop_kind(2 * M * N * K * math.prod(batch) // 64)) as idx:
        a_base = _batch_offsets(idx, a_mat[:-2], batch) * (M * K)
        b_base = _batch_offsets(idx, b_mat[:-2], batch) * (K * N)
        rows_before = _batch_offsets(idx, batch, batch) * M  # Y's rows in earlier matrices
        y_base = rows_before * N

        def row_epilogue(m):
            def finish(value, n):
                at = (*idx, m, n)
                return apply_activation(act, value, [t[broadcast_index(at, t.shape, y.shape)]
                                                     for t in operands])
            return finish

        def softmax(m):
            sums = (outs[1], rows_before + m) if node.attrs["softmax"] == "deferred" else None
            normalise_row(kb, y, y, y_base + m * N, N, log=False, inverse_sum_at=sums)

        emit_gemm(kb, GemmShape(M, N, K),
                  Operand(a, lambda m, k: a_base + m * K + k, K),
                  Operand(b, lambda k, n: b_base + k * N + n),
                  Output(y, lambda m, n0: y_base + m * N + n0, act and row_epilogue,
                         is_heavy(act) and not is_arithmetic(act),
                         softmax if node.attrs.get("softmax") else None), y.dtype,
                  node.schedule)


# ---------------------------------------------------------------- Gemm

@lowering("Gemm")
def lower_gemm(node, kb, ins, outs):
    """Y = alpha * A' B' + beta * C, with A' = A or A^T and B' = B or B^T (attrs transA/B)."""
    a, b, c = (ins + [None])[:3]
    y = outs[0]
    at, bt = node.attrs["transA"], node.attrs["transB"]
    M, N = y.shape
    K = a.shape[0] if at else a.shape[1]
    alpha, beta = node.attrs["alpha"], node.attrs["beta"]
    a_op = (Operand(a, lambda m, k: k * M + m) if at else Operand(a, lambda m, k: m * K + k, K))
    b_op = (Operand(b, lambda k, n: n * K + k, K) if bt else Operand(b, lambda k, n: k * N + n))

    act = node.attrs.get("activation")

    def row_epilogue(m):
        def finish(value, n):
            value = value * alpha if alpha != 1.0 else value
            if c is not None and beta != 0.0:
                bias = c[_broadcast2(c.shape, m, n)]
                value = value + (bias * beta if beta != 1.0 else bias)
            return apply_activation(act, value)
        return finish

    emit_gemm(kb, GemmShape(M, N, K), a_op, b_op,
              Output(y, lambda m, n0: m * N + n0, row_epilogue, is_heavy(act)), y.dtype)


def _broadcast2(shape, m, n) -> tuple:
    """Index into a C operand of rank <= 2 that broadcasts to (M, N)."""
    full = [m, n][2 - len(shape):]
    return tuple(as_expr(0) if d == 1 else i for d, i in zip(shape, full))
