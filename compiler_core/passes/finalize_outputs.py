"""Every graph output gets its own buffer written by a node (the caller owns output memory)."""
from __future__ import annotations

from ..ir import Graph, Node, Value


def finalize_outputs(graph: Graph) -> Graph:
    produced = {v for n in graph.nodes for v in n.outputs}
    seen: set[Value] = set()
    outputs, nodes = [], list(graph.nodes)
    for v in graph.outputs:
        if v in seen or v not in produced or v in graph.inputs:
            copy = Value(v.name, v.shape, v.dtype)  # callers look outputs up by name
            nodes.append(Node("Copy", [v], [copy], {}, f"output {v.name}"))
            v = copy
        seen.add(v)
        outputs.append(v)
    return Graph(graph.inputs, outputs, nodes, graph.name, graph.opset)
