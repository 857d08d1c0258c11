"""Is a constant weight matrix worth multiplying block-sparse, and with which blocks?

W is seen as (N outputs, K inputs) (kernels/sparse_gemm.py). For every block shape that
tiles it, the fraction of blocks holding a nonzero is measured. The shapes the data has are
those whose kept blocks are mostly nonzero (FILL; 1x1 always is); among them a cost estimate
in cycles of one core picks the cheapest and compares it with the dense kernel (PackedGemm)
at the layer's M rows. A layer goes sparse only when the estimate wins by MARGIN, so dense layers
stay dense: a matrix without zero blocks can never be chosen.

The estimate (rates measured on AMD EPYC znver3 with AVX2 at batch 1): a layer costs the larger of streaming its weights and its arithmetic.
* Weights stream at the rate of the cache level they fit in (bytes per cycle below).
* Dense: one FMA per weight and row of A, two 8-lane FMA ports (2 * lanes per cycle).
* Block-sparse: per block and row of A, its column and a vector of A and of W per vector of
  the block are loaded, two loads per cycle (the load ports are the limit); bh * bw floats and a 4-byte column per block streamed, and a
  few cycles per block row for the horizontal sum of 1 x bw rows and the store.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.sparse_gemm import BLOCK_SHAPES, block_mask, fits

MARGIN = 0.8          # sparse must be estimated at least 20% faster than dense
MIN_ZERO_FRACTION = 0.3  # below this many zero weights no block shape can win: skip the search
FILL = 0.75           # a block shape the data has: its kept blocks are at least this full
L1_BYTES, L2_BYTES = 32 << 10, 512 << 10
ROW_CYCLES = {"sum": 2, "store": 1}


@dataclass(frozen=True)
class SparseChoice:
    block: tuple[int, int]
    density: float          # nonzero blocks / blocks
    sparse_cycles: float
    dense_cycles: float

    @property
    def name(self) -> str:
        return f"{self.block[0]}x{self.block[1]}"

    @property
    def estimated_speedup(self) -> float:
        return self.dense_cycles / self.sparse_cycles


def stream_rate(nbytes: int) -> float:
    """Bytes per cycle one core reads a stream of this size at, from the cache it fits in."""
    if nbytes <= L1_BYTES:
        return 64.0
    return 20.0 if nbytes <= L2_BYTES else 16.0


def dense_cycles(m: int, n: int, k: int, lanes: int) -> float:
    nbytes = 4 * n * k
    return max(nbytes / stream_rate(nbytes), m * n * k / (2 * lanes))


def sparse_cycles(m: int, n: int, nnz_blocks: int, block: tuple[int, int], lanes: int) -> float:
    bh, bw = block
    nbytes = nnz_blocks * (4 * bh * bw + 4) + 4 * (n // bh)
    per_block = (1 + 2 * max(1.0, bh * bw / lanes)) / 2
    per_row = ROW_CYCLES["store"] + (ROW_CYCLES["sum"] if bh == 1 and bw > 1 else 0)
    arithmetic = m * (nnz_blocks * per_block + (n // bh) * per_row)
    return max(nbytes / stream_rate(nbytes), arithmetic)


def best_block_shape(w: np.ndarray, m: int, lanes: int) -> SparseChoice | None:
    """The cheapest block shape for W (N, K) at M rows, when sparse beats dense by MARGIN."""
    if w.ndim != 2 or np.count_nonzero(w) > (1 - MIN_ZERO_FRACTION) * w.size:
        return None
    n, k = w.shape
    dense = dense_cycles(m, n, k, lanes)
    nonzero = np.count_nonzero(w)
    best = None
    for block in BLOCK_SHAPES:
        if not fits(w.shape, block):
            continue
        mask = block_mask(w, block)
        if nonzero < FILL * mask.sum() * block[0] * block[1]:
            continue  # mostly zeros inside the kept blocks: not a shape this data has
        cost = sparse_cycles(m, n, int(mask.sum()), block, lanes)
        if best is None or cost < best.sparse_cycles:
            best = SparseChoice(block, float(mask.mean()), cost, dense)
    return best if best is not None and best.sparse_cycles < MARGIN * dense else None
