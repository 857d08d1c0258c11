"""Attention's two products in one kernel (passes/fuse_attention.py), a block of rows at a
time:

    for each matrix of the batch (a head) and block of ROWS query rows:
        E = scores(Q[rows] K^T)        ROWS x S2 in a scratch array, the scores' epilogue
                                       (scale, mask) on the register tiles
        E, r = exp(E - max), 1 / sum   each row as its block finishes (a deferred softmax)
        Y[rows] = (E V) * r

The block's exps stay in L1 between the products, where two MatMuls wrote every head's
(S x S2) exps to memory and read them back: BERT-384's 7 MB a layer, out of L2. The
blocks of all heads are the parallel loop's items.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..ir.loops import MAX_SCRATCH_BYTES, as_expr, broadcast_index
from .elementwise import loop_kind
from .epilogue import apply_activation, is_arithmetic, is_heavy
from .matmul import MAX_MR, GemmShape, Operand, Output, default_tiles, emit_gemm
from .reduce import normalise_row
from .registry import lowering

# Query rows per block: two register tiles of rows. At sequence 384 the block's exps are
# 18 KB, in L1 with room for the tiles' slices of K^T and V.
ROWS = 2 * MAX_MR


def scores_fit(rows: int, keys: int) -> bool:
    """Whether a block's exps fit a scratch array."""
    return min(ROWS, rows) * keys * 4 <= MAX_SCRATCH_BYTES


@lowering("Attention")
def lower_attention(node, kb, ins, outs):
    """Inputs Q (..., S, D), K^T (..., D, S2), V (..., S2, Dv), all with the same batch
    dims, then the tensors the scores' epilogue reads (broadcasting to (..., S, S2));
    attrs: activation (the scores' epilogue, kernels/epilogue.py) or None."""
    q, kt, v, *operands = ins
    y = outs[0]
    *batch, S, D = q.shape
    S2, Dv = kt.shape[-1], v.shape[-1]
    heads = math.prod(batch)
    rows = min(ROWS, S)
    full, tail = divmod(S, rows)
    flops = 2 * heads * S * S2 * (D + Dv)
    for count, first_block, size in ((full, 0, rows), (1 if tail else 0, full, tail)):
        if not count:
            continue
        with kb.loop(heads * count, kind=loop_kind(flops // 64, heads * count),
                     name="item") as item:
            h, block = item // count, item % count + first_block
            _block(kb, node, (q, kt, v, y, operands), _unravel(h, batch), h, block * rows, size)


def _block(kb, node, bufs, idx, h, m0, rows: int):
    """Query rows [m0, m0 + rows) of matrix h (batch index idx)."""
    q, kt, v, y, operands = bufs
    *batch, S, D = q.shape
    S2, Dv = kt.shape[-1], v.shape[-1]
    act = node.attrs.get("activation")
    lanes = kb.lanes(np.float32)
    scores = kb.scratch("scores", np.float32, rows * S2)
    inverse = kb.scratch("inverse_sums", np.float32, rows)
    scores_shape = (*batch, S, S2)

    def score_epilogue(m):
        def finish(value, n):
            at = (*idx, m0 + m, n)
            return apply_activation(act, value, [t[broadcast_index(at, t.shape, scores_shape)]
                                                 for t in operands])
        return finish

    def softmax(m):
        normalise_row(kb, scores, scores, m * S2, S2, log=False, inverse_sum_at=(inverse, m))

    # one k chunk and one block of columns: each row is final with its row block
    tiles = default_tiles(GemmShape(rows, S2, D), lanes)
    tiles = dataclasses.replace(tiles, kc=D, nc=S2)
    emit_gemm(kb, GemmShape(rows, S2, D),
              Operand(q, lambda m, k: (h * S + m0 + m) * D + k, D),
              Operand(kt, lambda k, n: (h * D + k) * S2 + n),
              Output(scores, lambda m, n0: m * S2 + n0, act and score_epilogue,
                     is_heavy(act) and not is_arithmetic(act), softmax),
              np.float32, tiles)
    tiles = dataclasses.replace(default_tiles(GemmShape(rows, Dv, S2), lanes), kc=S2)
    emit_gemm(kb, GemmShape(rows, Dv, S2),
              Operand(scores, lambda m, k: m * S2 + k, S2),
              Operand(v, lambda k, n: (h * S2 + k) * Dv + n),
              Output(y, lambda m, n0: (h * S + m0 + m) * Dv + n0,
                     lambda m: (lambda value, n: value * inverse.flat(m))),
              np.float32, tiles)


def _unravel(flat, shape) -> tuple:
    """The index along each of `shape`'s dims of flat index `flat`."""
    idx, stride = [], math.prod(shape)
    for n in shape:
        stride //= n
        idx.append(flat // stride % n if n > 1 else as_expr(0))
    return tuple(idx)
