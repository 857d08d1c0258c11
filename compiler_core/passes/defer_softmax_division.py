"""Move a fused softmax's division by its row sums into the MatMul that reads it.

    P = MatMul(Q, K^T, softmax=True); Y = MatMul(P, V)       becomes
    E, R = MatMul(Q, K^T, softmax="deferred"); Y = MatMul(E, V) * R
E holds the rows' exps (each less its row's max) and R = 1 / each row's sum of them, of
shape (..., rows, 1). (E / s) V = (E V) / s row by row, and the second MatMul scales its
register tiles by R on their way out (a fused epilogue), where the softmax's last pass read
and wrote every row of E once more (BERT at sequence 384: 12 x 384 rows of 384 a layer).
Runs after fuse_softmax; P must have no reader but the second MatMul, which reads it as A.
"""
from __future__ import annotations

from ..ir import Graph, Node, Value

# Y * R as an epilogue program (kernels/epilogue.py): the product times operand 0
SCALE_ROWS = {"program": [("Mul", {}, [("input", 0), ("input", 1)])],
              "inputs": [None, ["operand", 0]]}


def defer_softmax_division(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}
    for n in graph.nodes:
        p = n.outputs[0] if n.outputs else None
        readers = uses.get(p, [])
        if not (_normalises_rows(n) and p not in outputs and len(readers) == 1
                and _reads_as_a(readers[0], p)):
            continue
        m = readers[0]
        r = Value(f"{p.name}_inverse_sums", (*p.shape[:-1], 1), p.dtype)
        replaced[n] = Node(n.op, list(n.inputs), [p, r], dict(n.attrs, softmax="deferred"),
                           n.name, n.guards, n.schedule, n.sources)
        replaced[m] = Node(m.op, [*m.inputs, r], list(m.outputs),
                           dict(m.attrs, activation=SCALE_ROWS), m.name, m.guards,
                           m.schedule, m.sources)
    nodes = [replaced.get(n, n) for n in graph.nodes]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _normalises_rows(n: Node) -> bool:
    return n.op == "MatMul" and n.attrs.get("softmax") is True and len(n.outputs) == 1


def _reads_as_a(m: Node, p: Value) -> bool:
    """m is an unguarded MatMul of matrices with p as its A only, nothing fused into it."""
    return (m.op == "MatMul" and not m.guards and len(m.inputs) == 2 and m.inputs[0] is p
            and m.inputs[1] is not p and not m.attrs.get("activation")
            and not m.attrs.get("softmax") and len(p.shape) >= 2
            and len(m.inputs[1].shape) >= 2)
