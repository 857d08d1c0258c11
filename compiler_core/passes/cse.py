"""Common subexpression elimination: one node computes each (op, inputs, attrs) once."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, covering


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _attr_key(x)) for k, x in v.items()))
    return v if isinstance(v, (int, float, str, bool, type(None))) else id(v)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    replace: dict[Value, Value] = {}
    seen: dict[tuple, Node] = {}
    kept = []
    for n in graph.nodes:
        n.inputs = [replace.get(v, v) if v is not None else None for v in n.inputs]
        key = (n.op, tuple(id(v) for v in n.inputs), _attr_key(n.attrs),
               tuple((id(g.cond), g.when) for g in n.guards))
        if key in seen and not any(v in graph.outputs for v in n.outputs):
            replace.update(zip(n.outputs, seen[key].outputs))
            seen[key].sources = covering(seen[key], n)  # it computes both now
            continue
        seen.setdefault(key, n)
        kept.append(n)
    outputs = [replace.get(v, v) for v in graph.outputs]
    return Graph(graph.inputs, outputs, kept, graph.name, graph.opset)
