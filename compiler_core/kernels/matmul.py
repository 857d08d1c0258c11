"""Dense matrix products: the register-tiled GEMM core shared with Conv, plus MatMul and Gemm.

The core computes C[m, n] = sum_k A(m, k) * B(k, n) in tiles of MR x NR outputs held in
scalar locals. Each tile's k loop is marked "scalar" so LLVM's loop vectorizer leaves it
alone; the SLP vectorizer then packs the NR columns of every row into AVX registers, which
gives the classic broadcast-A / load-B / FMA micro-kernel (6 x 16 floats = 12 ymm
accumulators on AVX2). Callers describe A, B and the store as functions, so the same core
serves plain matrices, implicit convolution matrices and fused epilogues.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.loops import INDEX, Buf, Expr, Get, as_expr, maximum
from .registry import lowering

Store = Callable[[Expr, Expr, Expr], None]  # store(m, n, acc)

MAX_MR = 6
# Columns per tile by rows per tile: keep about 8-12 ymm accumulators whatever the height.
NR_FOR_MR = {1: 64, 2: 32, 3: 32, 4: 16, 5: 16, 6: 16}
SMALL_N = 4  # below this many columns, reduce along k with the loop vectorizer instead


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


def emit_gemm(kb, shape: GemmShape, a: Operand, b: Operand, store: Store, dtype=np.float32):
    """Emit loops computing every C[m, n] = sum_k A(m, k) B(k, n) and handing it to `store`."""
    if shape.N < SMALL_N:
        _emit_dot_products(kb, shape, a, b, store, dtype)
        return
    mr = min(MAX_MR, shape.M)
    nr = min(NR_FOR_MR[mr], shape.N)
    full_m, tail_m = divmod(shape.M, mr)
    # Row blocks outside: the block's MR rows of A stay in L1 while B streams past.
    if full_m:
        with kb.loop(full_m, name="mb") as mb:
            _row_block(kb, shape, mb * mr, mr, nr, a, b, store, dtype)
    if tail_m:
        _row_block(kb, shape, as_expr(full_m * mr), tail_m, nr, a, b, store, dtype)


def _row_block(kb, shape, m0, mr, nr, a, b, store, dtype):
    """Rows m0 .. m0 + mr of C: full column tiles, then the leftover columns."""
    full_n, tail_n = divmod(shape.N, nr)
    if full_n:
        with kb.loop(full_n, name="nb") as nb:
            _tile(kb, shape.K, m0, mr, nb * nr, nr, a, b, store, dtype)
    if tail_n:
        _tile(kb, shape.K, m0, mr, as_expr(full_n * nr), tail_n, a, b, store, dtype)


def _tile(kb, K, m0, mr, n0, nr, a, b, store, dtype):
    acc = [[kb.local(dtype, 0.0) for _ in range(nr)] for _ in range(mr)]
    with kb.loop(K, kind="scalar", name="k") as k:
        # every operand value is loaded once into a local, which keeps the IR small
        b_at = kb.local(INDEX, b.base(k, n0), "b_at")
        b_row = [kb.local(dtype, b.buf.flat(Get(b_at) + j * b.step), "b") for j in range(nr)]
        a_at = kb.local(INDEX, a.base(m0, k), "a_at")
        for i in range(mr):
            a_val = kb.local(dtype, a.buf.flat(Get(a_at) + i * a.step), "a")
            for j in range(nr):
                kb.set(acc[i][j], Get(acc[i][j]) + Get(a_val) * Get(b_row[j]))
    for i in range(mr):
        for j in range(nr):
            store(m0 + i, n0 + j, Get(acc[i][j]))


def _emit_dot_products(kb, shape, a, b, store, dtype):
    """Few columns (matrix-vector): one reduction over k per output, vectorized along k."""
    with kb.loop(shape.M, name="m") as m:
        for j in range(shape.N):
            acc = kb.local(dtype, 0.0)
            with kb.loop(shape.K, name="k") as k:
                kb.set(acc, Get(acc) + a.buf.flat(a.base(m, k)) * b.buf.flat(b.base(k, as_expr(j))))
            store(m, as_expr(j), Get(acc))


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


@lowering("MatMul")
def lower_matmul(node, kb, ins, outs):
    """numpy matmul: a vector A is one row, a vector B one column; batch dims broadcast."""
    a, b = ins[:2]
    y = outs[0]
    a_mat = a.shape if len(a.shape) > 1 else (1, *a.shape)
    b_mat = b.shape if len(b.shape) > 1 else (*b.shape, 1)
    M, K = a_mat[-2:]
    N = b_mat[-1]
    batch = tuple(np.broadcast_shapes(a_mat[:-2], b_mat[:-2]))
    with kb.loops(batch) as idx:
        a_base = _batch_offsets(idx, a_mat[:-2], batch) * (M * K)
        b_base = _batch_offsets(idx, b_mat[:-2], batch) * (K * N)
        y_base = _batch_offsets(idx, batch, batch) * (M * N)
        emit_gemm(kb, GemmShape(M, N, K),
                  Operand(a, lambda m, k: a_base + m * K + k, K),
                  Operand(b, lambda k, n: b_base + k * N + n),
                  lambda m, n, acc: kb.store_flat(y, y_base + m * N + n, acc), y.dtype)


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

    def store(m, n, acc):
        value = acc * alpha if alpha != 1.0 else acc
        if c is not None and beta != 0.0:
            bias = c[_broadcast2(c.shape, m, n)]
            value = value + (bias * beta if beta != 1.0 else bias)
        value = apply_activation(node.attrs.get("activation"), value)
        kb.store(y, (m, n), value)

    emit_gemm(kb, GemmShape(M, N, K), a_op, b_op, store, y.dtype)


def _broadcast2(shape, m, n) -> tuple:
    """Index into a C operand of rank <= 2 that broadcasts to (M, N)."""
    full = [m, n][2 - len(shape):]
    return tuple(as_expr(0) if d == 1 else i for d, i in zip(shape, full))


def apply_activation(name: str | None, value: Expr) -> Expr:
    """Activations fused into a producer's store (see passes/fuse_activation.py)."""
    if not name:
        return value
    if name == "Relu":
        return maximum(value, as_expr(0.0, value.dtype))
    raise ValueError(f"unknown fused activation {name!r}")
