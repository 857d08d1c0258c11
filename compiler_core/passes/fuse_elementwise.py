"""Operator fusion: chains of elementwise ops become one "Fused" node (one loop, one pass
over memory). A producer joins its consumer when the consumer is its only reader, they
have the same output shape (so broadcasting stays per input) and it is not a graph output.

A Fused node's attrs["program"] is a list of steps (op, attrs, args); each arg is
("input", k), ("step", j) or None; the last step's value is the output.
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, covering
from ..kernels.elementwise import SCALAR


def _fusible(n: Node) -> bool:
    return n.op in SCALAR and not n.guards and len(n.outputs) == 1


class _Group:
    def __init__(self):
        self.inputs: list[Value] = []
        self.program: list[tuple] = []
        self.nodes: list[Node] = []  # the nodes fused, for their ONNX names

    def input_ref(self, v: Value) -> tuple:
        for k, u in enumerate(self.inputs):
            if u is v:
                return ("input", k)
        self.inputs.append(v)
        return ("input", len(self.inputs) - 1)

    def absorb(self, other: "_Group") -> tuple:
        """Append another group's program; returns a reference to its result."""
        step_base = len(self.program)
        remap = {("input", k): self.input_ref(v) for k, v in enumerate(other.inputs)}
        for op, attrs, args in other.program:
            args = [None if a is None else remap[a] if a[0] == "input" else ("step", a[1] + step_base)
                    for a in args]
            self.program.append((op, attrs, args))
        self.nodes += other.nodes
        return ("step", len(self.program) - 1)


def fuse_elementwise(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    groups: dict[Node, _Group] = {}
    producer: dict[Value, Node] = {}
    absorbed: set[Node] = set()
    for n in graph.nodes:
        if not _fusible(n):
            continue
        group, args = _Group(), []
        for v in n.inputs:
            p = producer.get(v) if v is not None else None
            if p is not None and p not in absorbed and _can_join(v, n, uses, outputs):
                args.append(group.absorb(groups[p]))
                absorbed.add(p)
            else:
                args.append(None if v is None else group.input_ref(v))
        group.program.append((n.op, n.attrs, args))
        group.nodes.append(n)
        groups[n] = group
        producer[n.outputs[0]] = n
    nodes = [_rebuild(n, groups.get(n)) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _can_join(v: Value, consumer: Node, uses, outputs) -> bool:
    return (v not in outputs and len(uses.get(v, [])) == 1
            and v.shape == consumer.outputs[0].shape)


def _rebuild(n: Node, group: _Group | None) -> Node:
    if group is None or len(group.program) == 1:
        return n
    ops = "+".join(step[0] for step in group.program)
    return Node("Fused", group.inputs, n.outputs, {"program": group.program, "ops": ops}, n.name,
                sources=covering(*group.nodes))
