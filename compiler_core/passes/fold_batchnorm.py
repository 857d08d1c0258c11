"""Fold inference BatchNormalization and per-channel affine ops into the Conv/Gemm before them.

    Conv(x, W, b) -> BatchNormalization / Mul / Add / Sub / Div by per-channel constants
becomes Conv(x, W * a, b * a + c) where the consumer computes y * a + c per output channel.
Requires constant weights, a producer whose output has no other reader and is not a graph
output, and no guards on either node. Chains (BN, then Mul, then Add) fold one by one.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, covering

FOLDS_INTO = {"Conv", "DepthwiseConv", "Gemm"}
AFFINE_OPS = {"BatchNormalization", "Mul", "Add", "Sub", "Div"}


def fold_batchnorm(graph: Graph) -> Graph:
    nodes = list(graph.nodes)
    outputs = set(graph.outputs)
    k = 0
    while k < len(nodes):
        folded = _try_fold(nodes, k, outputs)
        if folded is None:
            k += 1
            continue
        producer_at, consumer_at, node = folded
        nodes[producer_at] = node
        del nodes[consumer_at]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _try_fold(nodes: list[Node], k: int, outputs: set[Value]):
    """If nodes[k] folds into its consumer: (k, consumer index, the rewritten producer)."""
    producer = nodes[k]
    if producer.op not in FOLDS_INTO or producer.guards or producer.attrs.get("activation"):
        return None
    y = producer.outputs[0]
    readers = [j for j, n in enumerate(nodes) if any(v is y for v in n.inputs)
               or any(g.cond is y for g in n.guards)]
    if y in outputs or len(readers) != 1:
        return None
    consumer = nodes[readers[0]]
    if consumer.op not in AFFINE_OPS or consumer.guards:
        return None
    affine = channel_affine(consumer, y, _channels(producer))
    if affine is None:
        return None
    node = _scaled(producer, *affine, consumer.outputs[0])
    if node is None:
        return None
    node.sources = covering(producer, consumer)
    return k, readers[0], node


def _channels(producer: Node) -> int:
    return producer.outputs[0].shape[1]


def channel_affine(node: Node, y: Value, channels: int):
    """(a, c) with node(y) == y * a[ch] + c[ch] per channel ch of y, or None."""
    if node.op == "BatchNormalization":
        if node.inputs[0] is not y or len(node.outputs) != 1:
            return None
        params = [_const(v) for v in node.inputs[1:5]]
        if any(p is None or p.shape != (channels,) for p in params):
            return None
        scale, bias, mean, var = params
        a = scale / np.sqrt(var + node.attrs["epsilon"])
        return a, bias - mean * a
    other = [v for v in node.inputs if v is not y]
    if len(node.inputs) != 2 or len(other) != 1:
        return None
    k = _per_channel(other[0], y, channels)
    if k is None or node.outputs[0].shape != y.shape:
        return None
    first = node.inputs[0] is y
    if node.op == "Mul":
        return k, np.zeros_like(k)
    if node.op == "Add":
        return np.ones_like(k), k
    if node.op == "Sub" and first:
        return np.ones_like(k), -k
    if node.op == "Div" and first:
        return 1.0 / k, np.zeros_like(k)
    return None


def _const(v: Value | None) -> np.ndarray | None:
    return None if v is None or not v.is_const else np.asarray(v.const, np.float64)


def _per_channel(v: Value, y: Value, channels: int) -> np.ndarray | None:
    """The (channels,) vector a constant holds if it varies along y's axis 1 only."""
    k = _const(v)
    if k is None or k.ndim > len(y.shape) or v.dtype != y.dtype:
        return None
    aligned = k.reshape((1,) * (len(y.shape) - k.ndim) + k.shape)
    if any(d != 1 for axis, d in enumerate(aligned.shape) if axis != 1):
        return None
    if aligned.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(aligned.reshape(-1), (channels,)).copy()


def _scaled(producer: Node, a: np.ndarray, c: np.ndarray, out: Value) -> Node | None:
    """The producer rewritten to compute y * a + c and write `out`."""
    if producer.op in ("Conv", "DepthwiseConv"):
        return _scaled_conv(producer, a, c, out)
    return _scaled_gemm(producer, a, c, out)


def _scaled_conv(conv: Node, a, c, out):
    w, b = conv.inputs[1], conv.inputs[2]
    if not w.is_const or (b is not None and not b.is_const):
        return None
    bias = _const(b) if b is not None else np.zeros(w.shape[0])
    w_new = w.const * a.reshape((-1,) + (1,) * (len(w.shape) - 1))
    inputs = list(conv.inputs)
    inputs[1] = _new_const(w, w_new)
    inputs[2] = _new_const(w, bias * a + c, f"{out.name}_bias")
    return Node(conv.op, inputs, [out, *conv.outputs[1:]], dict(conv.attrs), conv.name)


def _scaled_gemm(gemm: Node, a, c, out):
    """alpha*A(B a) + (beta*C*a + c): B's columns (or rows, if transposed) scale by a."""
    a_in, b, cin = (list(gemm.inputs) + [None])[:3]
    if not b.is_const or (cin is not None and not cin.is_const):
        return None
    scale = a[:, None] if gemm.attrs["transB"] else a[None, :]
    shift = c if cin is None else gemm.attrs["beta"] * _const(cin) * a + c
    attrs = dict(gemm.attrs, beta=1.0)
    inputs = [a_in, _new_const(b, b.const * scale), _new_const(b, shift, f"{out.name}_bias")]
    return Node(gemm.op, inputs, [out], attrs, gemm.name)


def _new_const(like: Value, data: np.ndarray, name: str | None = None) -> Value:
    data = np.ascontiguousarray(data, like.dtype)
    return Value(name or f"{like.name}_folded", data.shape, like.dtype, const=data)
