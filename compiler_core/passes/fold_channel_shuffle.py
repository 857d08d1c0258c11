"""Fold a channel shuffle into the depthwise conv that reads it.

ShuffleNet mixes its groups between a grouped conv and a depthwise one:
    Reshape (N, C, H, W) -> (N, A, B, ...), Transpose perm (0, 2, 1, ...), Reshape -> (N, C, H, W)
Channel c of the result is channel (c % A) * B + c // A of the input. A depthwise conv
reads each channel's plane on its own, so it can read plane (c % A) * B + c // A of the
unshuffled tensor as its channel c (attrs["channel_shuffle"] = A, kernels/depthwise.py),
and the Transpose, a pass over the whole tensor (ShuffleNet's 16 took 4% of the model,
znver4, 1 thread), goes once nothing else reads it.
"""
from __future__ import annotations

import math

from ..ir import Graph, Node, Value


def fold_channel_shuffle(graph: Graph) -> Graph:
    producers = {v: n for n in graph.nodes for v in n.outputs}
    nodes = []
    for n in graph.nodes:
        found = _shuffle_read_by(n, producers) if _plain_depthwise(n) else None
        if found is not None:
            source, groups = found
            n = Node(n.op, [source, *n.inputs[1:]], n.outputs,
                     {**n.attrs, "channel_shuffle": groups}, n.name, n.guards, n.schedule,
                     n.sources)
        nodes.append(n)
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset, graph.onnx_ops)


def _plain_depthwise(n: Node) -> bool:
    return n.op == "DepthwiseConv" and not n.guards and "channel_shuffle" not in n.attrs


def _shuffle_read_by(n: Node, producers: dict) -> tuple[Value, int] | None:
    """(the unshuffled tensor, A) if the depthwise conv's input is a channel shuffle."""
    x = n.inputs[0]
    after = producers.get(x)
    transpose = _input_producer(after, producers, "Reshape")
    before = _input_producer(transpose, producers, "Transpose")
    if before is None or before.op != "Reshape" or before.guards:
        return None
    source, split = before.inputs[0], transpose.inputs[0]
    if source.shape != x.shape or source.dtype != x.dtype or len(split.shape) < 4:
        return None
    N, C, H, W = x.shape
    rank = len(split.shape)
    A, B = split.shape[1:3]
    if (tuple(transpose.attrs.get("perm", ())) != (0, 2, 1, *range(3, rank))
            or split.shape[0] != N or A * B != C or math.prod(split.shape[3:]) != H * W):
        return None
    return source, A


def _input_producer(node: Node | None, producers: dict, op: str) -> Node | None:
    """The node that computes `node`'s first input, when `node` is an unguarded `op`."""
    if node is None or node.op != op or node.guards:
        return None
    return producers.get(node.inputs[0])
