"""Fuse a Softmax along the last axis into the MatMul whose result only it reads.

    MatMul(Q, K^T) -> [scale, mask epilogue] -> Softmax(axis=-1)   becomes
    MatMul(Q, K^T, ..., softmax=True)
Attention's scores are (heads, seq, seq): at sequence 384 that is 7 MB a layer, which an
unfused softmax reads and writes three times (max, exps and their sum, scaling) from L3 or
memory after the MatMul wrote it once. Fused, the MatMul normalises each block of rows
while it is still in L1 (kernels/matmul.py, Output.row_sweep). Runs after fuse_epilogue,
so the scores' scaling and mask are already the MatMul's epilogue.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, covering
from .fuse_activation import absorb_sole_reader


def fuse_softmax(graph: Graph) -> Graph:
    def fuse(n: Node, s: Node) -> Node | None:
        if not (_rows_are_matrix_rows(n) and _softmax_along_rows(s, n.outputs[0])):
            return None
        return Node(n.op, list(n.inputs), [s.outputs[0]], dict(n.attrs, softmax=True),
                    n.name, n.guards, n.schedule, covering(n, s))
    return absorb_sole_reader(graph, fuse)


def _rows_are_matrix_rows(n: Node) -> bool:
    """A float32 MatMul of matrices: its result's last axis is the product's columns (a
    vector B would make it the rows)."""
    return (n.op == "MatMul" and not n.guards and not n.attrs.get("softmax")
            and len(n.outputs) == 1 and n.outputs[0].dtype == np.float32
            and all(v is not None and len(v.shape) >= 2 for v in n.inputs[:2]))


def _softmax_along_rows(s: Node, y) -> bool:
    return (s.op == "Softmax" and not s.guards and len(s.outputs) == 1
            and s.inputs[0] is y and s.outputs[0].dtype == np.float32
            and s.attrs["axis"] == len(y.shape) - 1 and not s.attrs.get("coerce_2d"))
