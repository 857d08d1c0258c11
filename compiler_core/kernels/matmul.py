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

from ..ir.loops import Expr, Get, as_expr, maximum
from .registry import lowering

# A(m0, i, k): element (m0 + i, k) where m0 is the tile's first row (Expr), i its row (int).
LoadA = Callable[[Expr, int, Expr], Expr]
LoadB = Callable[[Expr, Expr], Expr]                 # B(k, n)
Store = Callable[[Expr, Expr, Expr], None]           # store(m, n, acc)

MAX_MR = 6
# Columns per tile by rows per tile: keep about 8-12 ymm accumulators whatever the height.
NR_FOR_MR = {1: 64, 2: 32, 3: 32, 4: 16, 5: 16, 6: 16}
SMALL_N = 4  # below this many columns, reduce along k with the loop vectorizer instead


@dataclass(frozen=True)
class GemmShape:
    M: int
    N: int
    K: int


def emit_gemm(kb, shape: GemmShape, load_a: LoadA, load_b: LoadB, store: Store,
              dtype=np.float32) -> None:
    """Emit loops computing every C[m, n] and handing it to `store`."""
    if shape.N < SMALL_N:
        _emit_dot_products(kb, shape, load_a, load_b, store, dtype)
        return
    mr = min(MAX_MR, shape.M)
    nr = min(NR_FOR_MR[mr], shape.N)
    full_m, tail_m = divmod(shape.M, mr)
    # Row blocks outside: the block's MR rows of A stay in L1 while B streams past.
    if full_m:
        with kb.loop(full_m, name="mb") as mb:
            _row_block(kb, shape, mb * mr, mr, nr, load_a, load_b, store, dtype)
    if tail_m:
        _row_block(kb, shape, as_expr(full_m * mr), tail_m, nr, load_a, load_b, store, dtype)


def _row_block(kb, shape, m0, mr, nr, load_a, load_b, store, dtype):
    """Rows m0 .. m0 + mr of C: full column tiles, then the leftover columns."""
    full_n, tail_n = divmod(shape.N, nr)
    if full_n:
        with kb.loop(full_n, name="nb") as nb:
            _tile(kb, shape.K, m0, mr, nb * nr, nr, load_a, load_b, store, dtype)
    if tail_n:
        _tile(kb, shape.K, m0, mr, as_expr(full_n * nr), tail_n, load_a, load_b, store, dtype)


def _tile(kb, K, m0, mr, n0, nr, load_a, load_b, store, dtype):
    acc = [[kb.local(dtype, 0.0) for _ in range(nr)] for _ in range(mr)]
    with kb.loop(K, kind="scalar", name="k") as k:
        b_row = [load_b(k, n0 + j) for j in range(nr)]
        for i in range(mr):
            a = load_a(m0, i, k)
            for j in range(nr):
                kb.set(acc[i][j], Get(acc[i][j]) + a * b_row[j])
    for i in range(mr):
        for j in range(nr):
            store(m0 + i, n0 + j, Get(acc[i][j]))


def _emit_dot_products(kb, shape, load_a, load_b, store, dtype):
    """Few columns (matrix-vector): one reduction over k per output, vectorized along k."""
    with kb.loop(shape.M, name="m") as m:
        for j in range(shape.N):
            acc = kb.local(dtype, 0.0)
            with kb.loop(shape.K, name="k") as k:
                kb.set(acc, Get(acc) + load_a(m, 0, k) * load_b(k, as_expr(j)))
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
                  lambda m0, i, k: a.flat(a_base + (m0 + i) * K + k),
                  lambda k, n: b.flat(b_base + k * N + n),
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
    load_a = (lambda m0, i, k: a[k, m0 + i]) if at else (lambda m0, i, k: a[m0 + i, k])
    load_b = (lambda k, n: b[n, k]) if bt else (lambda k, n: b[k, n])

    def store(m, n, acc):
        value = acc * alpha if alpha != 1.0 else acc
        if c is not None and beta != 0.0:
            bias = c[_broadcast2(c.shape, m, n)]
            value = value + (bias * beta if beta != 1.0 else bias)
        value = apply_activation(node.attrs.get("activation"), value)
        kb.store(y, (m, n), value)

    emit_gemm(kb, GemmShape(M, N, K), load_a, load_b, store, y.dtype)


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
