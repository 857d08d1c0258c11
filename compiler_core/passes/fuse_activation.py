"""Fuse what follows a Conv/Gemm into the producer's store: a residual Add (convs only) and
then an activation, when each is the only reader of the value before it.

    Conv -> Add(·, r) -> Relu   becomes   Conv(..., residual=r, activation="Relu")
The residual becomes the Conv's fifth input (DepthwiseConv's fourth) and the fused node
takes the Add's place in the node order (so r is always computed by then); the activation
costs no extra pass over memory either (kernels/epilogue.apply_activation). Relu is fused
early (fuse_activation); any other elementwise chain over the result and scalar constants
once operator fusion has built it (fuse_epilogue, the last pass). A batched MatMul's
epilogue may also read tensors that broadcast to its result: attention's scores are scaled
and masked on their way to memory, not in a pass of their own over (heads, seq, seq).
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, covering
from ..kernels.elementwise import SCALAR

PRODUCERS = {"Conv", "DepthwiseConv", "Gemm", "PackedGemm"}
# where a fused residual goes in each conv's inputs (Conv's fourth is its tap offsets)
RESIDUAL_INPUT = {"Conv": 4, "DepthwiseConv": 3}
# the kernels whose stores go through kernels/epilogue.apply_activation
EPILOGUE_PRODUCERS = PRODUCERS | {"SparseGemm", "WinogradConv", "MatMul", "ConvBlocked",
                                  "DepthwiseBlocked"}
# the kernels whose epilogue may read tensors besides their result (appended to the inputs)
OPERAND_EPILOGUE_PRODUCERS = {"MatMul"}
ACTIVATIONS = {"Relu"}
ADDS = {"Add", "Sum"}


def fuse_activation(graph: Graph) -> Graph:
    # twice for PackedGemm: MatMul -> Add(bias) -> Add(residual), as encoders are exported
    graph = _fuse_dense_add(_fuse_dense_add(graph))
    return _fuse_relu(_fuse_residual(graph))


def _fuse_residual(graph: Graph) -> Graph:
    def fuse(n: Node, add: Node) -> Node | None:
        at = RESIDUAL_INPUT.get(n.op)
        if at is None or n.guards or n.attrs.get("activation") or len(n.inputs) > at:
            return None
        other = _other_operand(add, n.outputs[0])
        if other is None:
            return None
        inputs = list(n.inputs) + [None] * (at - len(n.inputs)) + [other]
        return Node(n.op, inputs, [add.outputs[0], *n.outputs[1:]], dict(n.attrs), n.name,
                    sources=covering(n, add))
    return absorb_sole_reader(graph, fuse, at_reader=True)


def _fuse_dense_add(graph: Graph) -> Graph:
    """PackedGemm -> Add(·, c): a constant c along the last axis becomes the bias, a tensor
    of the result's shape the residual (PyTorch exports nn.Linear on a 3-D input as MatMul,
    then Add of the bias). The fused node takes the Add's place in the node order."""
    def fuse(n: Node, add: Node) -> Node | None:
        if n.op != "PackedGemm" or n.guards or n.attrs.get("activation"):
            return None
        y = n.outputs[0]
        inputs = (list(n.inputs) + [None] * 4)[:4]
        residual, bias = _other_operand(add, y), _bias_operand(add, y)
        if residual is not None and inputs[3] is None:
            inputs[3] = residual
        elif bias is not None and inputs[2] is None:
            inputs[2] = bias
        else:
            return None
        return Node(n.op, inputs, [add.outputs[0]], dict(n.attrs), n.name,
                    sources=covering(n, add))
    return absorb_sole_reader(graph, fuse, at_reader=True)


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
    def fuse(n: Node, act: Node) -> Node | None:
        if (n.op not in PRODUCERS or n.guards or n.attrs.get("activation")
                or act.op not in ACTIVATIONS or act.inputs[0] is not n.outputs[0]):
            return None
        return Node(n.op, list(n.inputs), [act.outputs[0], *n.outputs[1:]],
                    dict(n.attrs, activation=act.op), n.name, sources=covering(n, act))
    return absorb_sole_reader(graph, fuse)


def absorb_sole_reader(graph: Graph, fuse, at_reader: bool = False) -> Graph:
    """Each node whose first result is no graph output and has one reader (unguarded, not
    already fused) may absorb that reader: fuse(node, reader) gives the node that takes
    both places, or None to leave the two as they are. The fused node goes where the node
    was, or with `at_reader` where the reader was (when it reads tensors computed between
    the two)."""
    uses = graph.consumers()
    outputs = set(graph.outputs)
    rewritten: dict[Node, Node] = {}  # the node whose place the fused node takes -> it
    absorbed: set[Node] = set()
    for n in graph.nodes:
        if not n.outputs or n in absorbed or n.outputs[0] in outputs:
            continue
        readers = uses.get(n.outputs[0], [])
        if len(readers) != 1 or readers[0].guards or readers[0] in rewritten:
            continue
        fused = fuse(n, readers[0])
        if fused is not None:
            place, gone = (readers[0], n) if at_reader else (n, readers[0])
            rewritten[place] = fused
            absorbed.add(gone)
    nodes = [rewritten.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def fuse_epilogue(graph: Graph) -> Graph:
    """After fuse_elementwise: an elementwise node or Fused chain that reads a producer's
    result (which nothing else reads) and scalar constants becomes that producer's epilogue
    (kernels/epilogue.py), so SiLU after a Conv, HardSwish or an exporter's Erf GELU after a
    MatMul cost no pass over memory of their own; for OPERAND_EPILOGUE_PRODUCERS also
    tensors that broadcast to the result, and then the fused node takes the elementwise
    node's place in the node order (so those tensors are computed by then)."""
    uses = graph.consumers()
    outputs = set(graph.outputs)
    made_by = {n.outputs[0]: n for n in graph.nodes if n.outputs}
    replaced: dict[Node, Node] = {}  # producer or elementwise node -> fused producer
    absorbed: set[Node] = set()
    for e in graph.nodes:
        for y, activation, operands in _epilogues_of(e):
            p = made_by.get(y)
            if (p is None or p.op not in EPILOGUE_PRODUCERS or p.guards or p in replaced
                    or p in absorbed or p.attrs.get("activation") or y in outputs
                    or uses.get(y) != [e] or (operands and not _takes_operands(p))):
                continue
            fused = Node(p.op, list(p.inputs) + operands, [e.outputs[0], *p.outputs[1:]],
                         dict(p.attrs, activation=activation), p.name, p.guards, p.schedule,
                         covering(p, e))
            if operands:
                replaced[e] = fused
                absorbed.add(p)
            else:
                replaced[p] = fused
                absorbed.add(e)
            break
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in absorbed]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _takes_operands(p: Node) -> bool:
    """Whether p's lowering can read tensors in its epilogue: a MatMul of matrices (operands
    indexed by batch, row and column; each broadcasts to its result, as every input of the
    elementwise node does to that node's result, which has the same shape)."""
    return (p.op in OPERAND_EPILOGUE_PRODUCERS and len(p.inputs) == 2
            and all(len(v.shape) >= 2 for v in p.inputs))


def _epilogues_of(e: Node) -> list[tuple[Value, dict, list[Value]]]:
    """(result, e as an activation program, tensor operands) for each tensor e reads that
    could be the result of the producer e is fused into: e is elementwise over its tensors
    and scalar constants of the result's dtype, with a result of the same shape and dtype;
    the other tensors are the operands."""
    if e.guards or len(e.outputs) != 1 or not (e.op == "Fused" or e.op in SCALAR):
        return []
    tensors = list(dict.fromkeys(v for v in e.inputs if v is not None and not _scalar(v)))
    out, ways = e.outputs[0], []
    for y in (v for v in tensors if v.const is None):
        others = [v for v in tensors if v is not y]
        if (out.shape != y.shape or out.dtype != y.dtype or y.dtype.kind != "f"
                or any(v.dtype != y.dtype for v in others)):
            continue
        inputs = []
        for v in e.inputs:
            if v is y or v is None:
                inputs.append(None)
            elif v in others:
                inputs.append(["operand", others.index(v)])
            elif v.dtype == y.dtype:
                inputs.append(float(v.const.reshape(-1)[0]))
            else:
                return []
        ways.append((y, {"program": _program(e), "inputs": inputs}, others))
    return ways


def _scalar(v: Value) -> bool:
    return v.const is not None and v.size == 1


def _program(e: Node) -> list:
    return e.attrs["program"] if e.op == "Fused" else [
        (e.op, e.attrs, [None if v is None else ("input", k) for k, v in enumerate(e.inputs)])]
