"""Fuse what follows a Conv/Gemm into the producer's store: a residual Add (Conv only) and
then a Relu, when each is the only reader of the value before it.

    Conv -> Add(·, r) -> Relu   becomes   Conv(..., residual=r, activation="Relu")
The residual becomes the Conv's fifth input and the fused node takes the Add's place in
the node order (so r is always computed by then); the activation costs no extra pass over
memory either (kernels/matmul.apply_activation, kernels/conv.lower_conv).
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, covering

PRODUCERS = {"Conv", "Gemm", "PackedGemm"}
ACTIVATIONS = {"Relu"}
ADDS = {"Add", "Sum"}


def fuse_activation(graph: Graph) -> Graph:
    return _fuse_relu(_fuse_residual(graph))


def _fuse_residual(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}  # Add -> fused Conv
    absorbed: set[Node] = set()  # the original Convs
    for n in graph.nodes:
        if n.op != "Conv" or n.guards or n.attrs.get("activation") or len(n.inputs) > 4:
            continue
        y = n.outputs[0]
        readers = uses.get(y, [])
        if y in outputs or len(readers) != 1 or readers[0].guards:
            continue
        add = readers[0]
        other = _other_operand(add, y)
        if other is None or add in replaced:  # Add(conv1, conv2): fuse one of them
            continue
        inputs = list(n.inputs) + [None] * (4 - len(n.inputs)) + [other]
        replaced[add] = Node(n.op, inputs, [add.outputs[0], *n.outputs[1:]], dict(n.attrs),
                             n.name, sources=covering(n, add))
        absorbed.add(n)
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _other_operand(add: Node, y: Value) -> Value | None:
    """The Add's other operand, if it has y's exact shape and dtype (no broadcasting)."""
    if add.op not in ADDS or len(add.inputs) != 2 or add.outputs[0].shape != y.shape:
        return None
    a, b = add.inputs
    other = b if a is y else a if b is y else None
    if other is None or other is y or other.shape != y.shape or other.dtype != y.dtype:
        return None
    return other


def _fuse_relu(graph: Graph) -> Graph:
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
                                dict(n.attrs, activation=act.op), n.name,
                                sources=covering(n, act))
            absorbed.add(act)
    nodes = [rewritten.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)
