"""MatMul and Gemm with a constant 2-D weight become PackedGemm (kernels/packed_gemm.py):

    Y = act(A @ W + bias [+ residual])

W = alpha * B' (B' = B or B^T) stays (K, N) here; passes/pack_weights.py packs it into the
panels the node's schedule asks for. Gemm's C becomes the bias (beta * C, per column) when
it is constant and broadcasts along rows, or the residual when it is a full (M, N) operand
with beta 1. Other cases keep their generic kernels.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value


def use_packed_gemm(graph: Graph) -> Graph:
    nodes = [_rewrite(n) or n for n in graph.nodes]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _float32_weights(n: Node) -> bool:
    a, b = n.inputs[:2]
    return (b is not None and b.is_const and len(b.shape) == 2 and len(a.shape) >= 1
            and a.dtype == b.dtype == np.float32 and not n.guards)


def _rewrite(n: Node) -> Node | None:
    if n.op == "MatMul" and _float32_weights(n):
        return _packed(n, n.inputs[0], n.inputs[1].const, None, None)
    if n.op == "Gemm" and _float32_weights(n) and not n.attrs["transA"]:
        return _from_gemm(n)
    return None


def _from_gemm(n: Node) -> Node | None:
    a, b, c = (n.inputs + [None])[:3]
    w = b.const.T if n.attrs["transB"] else b.const
    w = w * np.float32(n.attrs["alpha"])
    bias = residual = None
    beta = n.attrs["beta"]
    if c is not None and beta != 0.0:
        M, N = n.outputs[0].shape
        if c.is_const and (len(c.shape) < 2 or c.shape[0] == 1):
            bias = np.broadcast_to(c.const.reshape(-1) * np.float32(beta), (N,))
        elif tuple(c.shape) == (M, N) and beta == 1.0:
            residual = c
        else:
            return None
    return _packed(n, a, w, bias, residual, n.attrs.get("activation"))


def _packed(n, a, w, bias, residual, activation=None) -> Node:
    w_value = Value(f"{n.name or 'dense'}_w", w.shape, np.float32,
                    const=np.ascontiguousarray(w, np.float32))
    b_value = None if bias is None else Value(f"{n.name or 'dense'}_b", bias.shape, np.float32,
                                              const=np.ascontiguousarray(bias, np.float32))
    return Node("PackedGemm", [a, w_value, b_value, residual], list(n.outputs),
                {"activation": activation}, n.name, n.guards, sources=n.sources)
