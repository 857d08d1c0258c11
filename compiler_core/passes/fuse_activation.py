"""Fuse a Relu that is the only reader of a Conv/Gemm output into that node's store.

The producer gets attrs["activation"] = "Relu" and writes the Relu's output directly, so
the activation costs no extra pass over memory (kernels/matmul.apply_activation).
"""
from __future__ import annotations

from ..ir import Graph, Node

PRODUCERS = {"Conv", "Gemm"}
ACTIVATIONS = {"Relu"}


def fuse_activation(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    rewritten: dict[Node, Node] = {}  # producer -> producer with the activation fused
    absorbed: set[Node] = set()
    for n in graph.nodes:
        if n.op not in PRODUCERS or n.guards or n.attrs.get("activation"):
            continue
        y = n.outputs[0]
        readers = uses.get(y, [])
        if y in outputs or len(readers) != 1:
            continue
        act = readers[0]
        if act.op in ACTIVATIONS and not act.guards and act.inputs[0] is y:
            rewritten[n] = Node(n.op, list(n.inputs), [act.outputs[0], *n.outputs[1:]],
                                dict(n.attrs, activation=act.op), n.name)
            absorbed.add(act)
    nodes = [rewritten.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)
