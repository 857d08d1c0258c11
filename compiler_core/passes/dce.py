"""Dead code elimination: drop nodes whose outputs nothing reads."""
from __future__ import annotations

from ..ir import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(v in live for v in n.outputs):
            kept.append(n)
            live.update(v for v in n.inputs if v is not None)
            live.update(g.cond for g in n.guards)
    return Graph(graph.inputs, graph.outputs, kept[::-1], graph.name, graph.opset)
