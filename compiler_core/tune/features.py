"""Features of (node, schedule) for the cost model: the workload's size, every knob of the
schedule, and for the GEMM-shaped families the loop features the knobs imply (tile counts,
edge waste, work items, cache footprints), as AutoTVM's knob and loop features.

Vectors have one fixed layout per op (its schedule class fixes the knobs), so the cost model
keeps one model per op. Sizes enter as log2(1 + x): times scale with sizes multiplicatively.
"""
from __future__ import annotations

import math
import zlib

from ..analysis.node_cost import node_cost
from ..ir import Node
from .space import flat_knobs

FLOAT_BYTES = 4


def _log(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def knob_values(schedule) -> list[float]:
    """Every knob as a number; strings as a stable code."""
    return [_number(v) for v in flat_knobs(schedule)]


def _number(v) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return _log(v)
    return float(zlib.crc32(str(v).encode()) % 997)


def gemm_loop_features(M: int, N: int, K: int, mr: int, nr: int, kc: int,
                       rows_per_item: int, cols_per_item: int) -> list[float]:
    """A GEMM tiled mr x nr (columns), in k chunks of kc, in work items of
    rows_per_item x cols_per_item."""
    m_tiles, n_tiles, chunks = -(-M // mr), -(-N // nr), -(-K // kc)
    items = -(-M // max(rows_per_item, 1)) * -(-N // max(cols_per_item, 1))
    return [_log(M), _log(N), _log(K), _log(m_tiles), _log(n_tiles), _log(chunks),
            m_tiles * mr / M, n_tiles * nr / N, _log(items),
            _log(kc * nr * FLOAT_BYTES), _log(kc * mr * FLOAT_BYTES),
            _log(rows_per_item * kc * FLOAT_BYTES), _log(cols_per_item * kc * FLOAT_BYTES)]


def _packed_gemm(node: Node, s) -> list[float]:
    from ..kernels.packed_gemm import loop_dims
    M, N, K = loop_dims(node, s)
    return gemm_loop_features(M, N, K, s.mr, s.width, s.kc, s.mc, s.nc * s.width) + \
        [float(s.strassen)]


def _conv(node: Node, s) -> list[float]:
    from ..kernels.conv import conv_gemm_shape, split_blocks
    shape, pieces = conv_gemm_shape(node)
    size, count, _ = split_blocks(s, shape)
    rows, cols = (shape.M, size) if s.split == "columns" else (size, shape.N)
    t = s.tiles
    return gemm_loop_features(shape.M, shape.N, shape.K, t.mr, t.nr, t.kc, rows,
                              min(cols, t.nc)) + [_log(pieces * count), float(s.by_rows)]


def _matmul(node: Node, t) -> list[float]:
    from ..kernels.matmul import matmul_dims
    M, N, K = matmul_dims(node)  # one work item per matrix of the batch
    return gemm_loop_features(M, N, K, t.mr, t.nr, t.kc, M, min(N, t.nc))


LOOP_FEATURES = {"PackedGemm": _packed_gemm, "Conv": _conv, "MatMul": _matmul}


def features(node: Node, schedule) -> list[float]:
    cost = node_cost(node)
    loops = LOOP_FEATURES.get(node.op)
    return ([_log(cost.flops), _log(cost.bytes)] + knob_values(schedule)
            + (loops(node, schedule) if loops else []))
