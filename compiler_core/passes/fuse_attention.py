"""Fuse attention's two products into one Attention node (kernels/attention.py).

    E, R = MatMul(Q, K^T, softmax="deferred"); Y = MatMul(E, V) * R     becomes
    Y = Attention(Q, K^T, V, <the scores' epilogue operands>)

where E is read by the second MatMul only (defer_softmax_division's result), every operand
is float32 with the same batch dims, and a block of rows' exps fits a scratch array. Runs
after defer_softmax_division.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, covering
from ..kernels.attention import scores_fit
from .defer_softmax_division import SCALE_ROWS


def fuse_attention(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}
    gone: set[Node] = set()
    for n in graph.nodes:
        if not (n.op == "MatMul" and n.attrs.get("softmax") == "deferred" and not n.guards):
            continue
        scores, sums = n.outputs
        readers = uses.get(scores, [])
        if len(readers) != 1 or uses.get(sums, []) != readers or {scores, sums} & outputs:
            continue
        m = readers[0]
        if not _fusable(n, m):
            continue
        q, kt = n.inputs[:2]
        replaced[m] = Node("Attention", [q, kt, m.inputs[1], *n.inputs[2:]], list(m.outputs),
                           {"activation": n.attrs.get("activation")}, m.name,
                           sources=covering(n, m))
        gone.add(n)
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in gone]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _fusable(n: Node, m: Node) -> bool:
    """m reads n's exps as A and its row sums as the only epilogue; the three operands are
    float32 matrices with the same batch dims (no broadcasting between them)."""
    if not (m.op == "MatMul" and not m.guards and len(m.inputs) == 3
            and m.inputs[0] is n.outputs[0] and m.inputs[2] is n.outputs[1]
            and m.attrs.get("activation") == SCALE_ROWS):
        return False
    q, kt, v = n.inputs[0], n.inputs[1], m.inputs[1]
    shapes = [q.shape, kt.shape, v.shape]
    return (all(len(s) >= 2 for s in shapes)
            and q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]
            and q.shape[-1] == kt.shape[-2] and kt.shape[-1] == v.shape[-2]
            and all(x.dtype == np.float32 for x in (q, kt, v, m.outputs[0]))
            and scores_fit(q.shape[-2], kt.shape[-1]))
