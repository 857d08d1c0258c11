"""Fuse what follows a Conv/Gemm into the producer's store: a residual Add (convs only) and
then an activation, when each is the only reader of the value before it.

    Conv -> Add(·, r) -> Relu   becomes   Conv(..., residual=r, activation="Relu")
The residual becomes the Conv's fifth input (DepthwiseConv's fourth) and the fused node
takes the Add's place in the node order (so r is always computed by then); the activation
costs no extra pass over memory either (kernels/epilogue.apply_activation). Relu is fused
early (fuse_activation); any other elementwise chain over the result and scalar constants
once operator fusion has built it (fuse_epilogue, the last pass).
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, covering
from ..kernels.elementwise import SCALAR

PRODUCERS = {"Conv", "DepthwiseConv", "Gemm", "PackedGemm"}
# where a fused residual goes in each conv's inputs (Conv's fourth is its tap offsets)
RESIDUAL_INPUT = {"Conv": 4, "DepthwiseConv": 3}
# the kernels whose stores go through kernels/epilogue.apply_activation
EPILOGUE_PRODUCERS = PRODUCERS | {"SparseGemm", "WinogradConv"}
ACTIVATIONS = {"Relu"}
ADDS = {"Add", "Sum"}


def fuse_activation(graph: Graph) -> Graph:
    # twice for PackedGemm: MatMul -> Add(bias) -> Add(residual), as encoders are exported
    graph = _fuse_dense_add(_fuse_dense_add(graph))
    return _fuse_relu(_fuse_residual(graph))


def _fuse_residual(graph: Graph) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}  # Add -> fused Conv
    absorbed: set[Node] = set()  # the original Convs
    for n in graph.nodes:
        at = RESIDUAL_INPUT.get(n.op)
        if at is None or n.guards or n.attrs.get("activation") or len(n.inputs) > at:
            continue
        y = n.outputs[0]
        readers = uses.get(y, [])
        if y in outputs or len(readers) != 1 or readers[0].guards:
            continue
        add = readers[0]
        other = _other_operand(add, y)
        if other is None or add in replaced:  # Add(conv1, conv2): fuse one of them
            continue
        inputs = list(n.inputs) + [None] * (at - len(n.inputs)) + [other]
        replaced[add] = Node(n.op, inputs, [add.outputs[0], *n.outputs[1:]], dict(n.attrs),
                             n.name, sources=covering(n, add))
        absorbed.add(n)
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _fuse_dense_add(graph: Graph) -> Graph:
    """PackedGemm -> Add(·, c): a constant c along the last axis becomes the bias, a tensor
    of the result's shape the residual (PyTorch exports nn.Linear on a 3-D input as MatMul,
    then Add of the bias). The fused node takes the Add's place in the node order."""
    uses = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}  # Add -> fused PackedGemm
    absorbed: set[Node] = set()
    for n in graph.nodes:
        if n.op != "PackedGemm" or n.guards or n.attrs.get("activation"):
            continue
        y = n.outputs[0]
        readers = uses.get(y, [])
        if y in outputs or len(readers) != 1 or readers[0].guards or readers[0] in replaced:
            continue
        add = readers[0]
        inputs = (list(n.inputs) + [None] * 4)[:4]
        residual, bias = _other_operand(add, y), _bias_operand(add, y)
        if residual is not None and inputs[3] is None:
            inputs[3] = residual
        elif bias is not None and inputs[2] is None:
            inputs[2] = bias
        else:
            continue
        replaced[add] = Node(n.op, inputs, [add.outputs[0]], dict(n.attrs), n.name,
                             sources=covering(n, add))
        absorbed.add(n)
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _bias_operand(add: Node, y: Value) -> Value | None:
    """The Add's other operand as a (N,) bias, if it is a constant that varies along y's last
    axis only."""
    if add.op != "Add" or len(add.inputs) != 2 or add.outputs[0].shape != y.shape:
        return None
    a, b = add.inputs
    c = b if a is y else a if b is y else None
    n = y.shape[-1]
    if (c is None or c is y or not c.is_const or c.dtype != y.dtype or c.size != n
            or len(c.shape) > len(y.shape) or c.shape[-1:] != (n,)):
        return None
    return c if c.shape == (n,) else Value(f"{c.name}_as_bias", (n,), c.dtype,
                                           const=c.const.reshape(n))


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


def fuse_epilogue(graph: Graph) -> Graph:
    """After fuse_elementwise: an elementwise node or Fused chain that reads only a
    producer's result (which nothing else reads) and scalar constants becomes that
    producer's epilogue (kernels/epilogue.py), so SiLU after a Conv, HardSwish or an
    exporter's Erf GELU after a MatMul cost no pass over memory of their own."""
    uses = graph.consumers()
    outputs = set(graph.outputs)
    made_by = {n.outputs[0]: n for n in graph.nodes if n.outputs}
    rewritten: dict[Node, Node] = {}  # producer -> producer with the epilogue
    absorbed: set[Node] = set()
    for e in graph.nodes:
        found = _epilogue_of(e)
        if found is None:
            continue
        y, activation = found
        p = made_by.get(y)
        if (p is None or p.op not in EPILOGUE_PRODUCERS or p.guards or p in rewritten
                or p.attrs.get("activation") or y in outputs or uses.get(y) != [e]):
            continue
        rewritten[p] = Node(p.op, list(p.inputs), [e.outputs[0], *p.outputs[1:]],
                            dict(p.attrs, activation=activation), p.name, p.guards,
                            p.schedule, covering(p, e))
        absorbed.add(e)
    nodes = [rewritten.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _epilogue_of(e: Node) -> tuple[Value, dict] | None:
    """(the one tensor e reads, e as an activation program) when e is elementwise over that
    tensor and scalar constants of its dtype, with a result of the same shape and dtype."""
    if e.guards or len(e.outputs) != 1 or not (e.op == "Fused" or e.op in SCALAR):
        return None
    tensors = [v for v in e.inputs if v is not None and v.const is None]
    if len(tensors) != 1:
        return None
    y, out = tensors[0], e.outputs[0]
    if out.shape != y.shape or out.dtype != y.dtype or y.dtype.kind != "f":
        return None
    inputs = []
    for v in e.inputs:
        if v is y or v is None:
            inputs.append(None)
        elif v.size == 1 and v.dtype == y.dtype:
            inputs.append(float(v.const.reshape(-1)[0]))
        else:
            return None
    program = e.attrs["program"] if e.op == "Fused" else [
        (e.op, e.attrs, [None if v is None else ("input", k) for k, v in enumerate(e.inputs)])]
    return y, {"program": program, "inputs": inputs}
