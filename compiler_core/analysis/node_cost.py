"""How much work a graph node does: floating-point operations and bytes moved.

FLOPs count a multiply-add as 2, as GFLOP/s figures (and numpy's sgemm peak) do:
* Conv (and DepthwiseConv, one input channel per group): 2 * output elements * (input
  channels / group) * kernel taps (strides and dilations only change the output size);
  ConvTranspose: 2 * input elements * (OC / group) * taps;
  bias, a fused residual add and a fused activation add one per output element each.
* MatMul: 2 * M * N * K per batch entry, plus a fused softmax's 5 per element; Gemm the
  same plus one per element for C;
  PackedGemm (a MatMul/Gemm with constant weights) the same plus its fused epilogue.
* LSTM/GRU/RNN: per step, batch entry and direction 2 * gates * hidden * (input + hidden) for
  the input and recurrent products, plus ~4 per gate value for the cell arithmetic.
* Einsum: 2 * the product of every index extent (one multiply-add per point of the nest).
* Pools: kernel taps per output element; global pools and reductions: one per input element.
* Norms: BatchNormalization 2 per element (folded scale and shift); layer, instance and group
  norms 8 (mean, variance, normalise, scale, shift); Softmax/LogSoftmax 5 (max, subtract,
  exp, sum, divide).
* Elementwise: one per output element per op (a Fused node: per step of its program).
* Pure data movement (Reshape, Transpose, Concat, Gather, Pad, ...): none.
* Anything else: one per output element.
Bytes: weights are the constant inputs (read once per run), activations read are the other
inputs, activations written are all outputs (a kernel's scratch buffers included).
Shapes are the IR's, which keep channels on axis 1 for convolutions and pools.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Node


@dataclass(frozen=True)
class Cost:
    flops: int
    weight_bytes: int
    read_bytes: int
    written_bytes: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.read_bytes + self.written_bytes

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops, self.weight_bytes + other.weight_bytes,
                    self.read_bytes + other.read_bytes, self.written_bytes + other.written_bytes)

    def as_dict(self) -> dict:
        return {"flops": self.flops, "bytes": self.bytes, "weight_bytes": self.weight_bytes,
                "read_bytes": self.read_bytes, "written_bytes": self.written_bytes}


ZERO = Cost(0, 0, 0, 0)
MOVEMENT = {"Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
            "GatherND", "Pad", "ConvPad", "PadBlocked", "Copy", "Expand", "Tile", "Identity", "Squeeze",
            "Unsqueeze", "Flatten", "Cast", "ScatterND", "ScatterElements", "ReverseSequence",
            "RepeatAlongAxis", "OneHot", "Trilu", "BitCast", "DepthToSpace", "SpaceToDepth",
            "Unreachable"}
PER_ELEMENT = {"BatchNormalization": 2, "LayerNormalization": 8, "InstanceNormalization": 8,
               "GroupNormalization": 8, "BatchNormalizationTraining": 8, "LpNormalization": 3,
               "Softmax": 5, "LogSoftmax": 5, "Hardmax": 2, "LRN": 4}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
REDUCE_INPUT = {"GlobalPool", "GlobalPoolBlocked", "ArgMax", "ArgMin", "TopK", "CumSum", "CumProd"}


def node_cost(node: Node) -> Cost:
    inputs = [v for v in node.inputs if v is not None]
    weights = sum(v.nbytes for v in inputs if v.is_const)
    read = sum(v.nbytes for v in inputs if not v.is_const)
    written = sum(v.nbytes for v in node.outputs)
    return Cost(int(node_flops(node)), weights, read, written)


def node_flops(node: Node) -> int:
    rule = FLOP_RULES.get(node.op)
    if rule is not None:
        return rule(node)
    if node.op in MOVEMENT:
        return 0
    if node.op in PER_ELEMENT:
        return PER_ELEMENT[node.op] * _out(node)
    if node.op in REDUCE_INPUT or node.op.startswith("Reduce"):
        return node.inputs[0].size
    return _out(node)


def _out(node: Node) -> int:
    return node.outputs[0].size


def _epilogue(node: Node, operands=(2, 4)) -> int:
    """Bias, fused residual (inputs at `operands`) and fused activation: one per output
    element each."""
    extras = sum(1 for k in operands if len(node.inputs) > k and node.inputs[k] is not None)
    return (extras + bool(node.attrs.get("activation"))) * _out(node)


def _conv(node: Node, epilogue_operands=(2, 4)) -> int:
    taps = int(np.prod(node.attrs["kernel_shape"], dtype=np.int64))
    per_group = node.inputs[0].shape[1] // node.attrs["group"]
    return 2 * _out(node) * per_group * taps + _epilogue(node, epilogue_operands)


def _conv_with_residual(node: Node) -> int:
    """WinogradConv (counted as the direct convolution it replaces, so its GFLOP/s compare
    with the direct kernels': an effective rate above the peak) and DepthwiseConv; inputs:
    x, weights, bias, residual."""
    return _conv(node, (2, 3))


def _conv_blocked(node: Node) -> int:
    """ConvBlocked: blocked tensors (N, C / x, H, W, x), one group; inputs as WinogradConv's."""
    taps = int(np.prod(node.attrs["kernel_shape"], dtype=np.int64))
    channels = node.inputs[0].shape[1] * node.inputs[0].shape[-1]
    return 2 * _out(node) * channels * taps + _epilogue(node, (2, 3))


def _depthwise_blocked(node: Node) -> int:
    """DepthwiseBlocked: one channel a group; inputs x, weights, bias, residual."""
    taps = int(np.prod(node.attrs["kernel_shape"], dtype=np.int64))
    return 2 * _out(node) * taps + _epilogue(node, (2, 3))


def _attention(node: Node) -> int:
    """Attention (kernels/attention.py), counted as the MatMuls it replaces: two products,
    the scores' epilogue and softmax, the output's scaling by the row sums."""
    q, kt, v = node.inputs[:3]
    *batch, s, d = q.shape
    scores = int(np.prod(batch, dtype=np.int64)) * s * kt.shape[-1]
    per_score = PER_ELEMENT["Softmax"] + bool(node.attrs.get("activation"))
    return 2 * scores * (d + v.shape[-1]) + per_score * scores + _out(node)


def _sparse_gemm(node: Node) -> int:
    """The multiply-adds it does: each row of A times the stored (nonzero-block) weights."""
    a, values = node.inputs[0], node.inputs[1]
    rows = int(np.prod(a.shape[:-1], dtype=np.int64))
    return 2 * rows * values.size + _epilogue(node, (4,))


def _conv_transpose(node: Node) -> int:
    x, y = node.inputs[0], node.outputs[0]
    taps = int(np.prod(node.inputs[1].shape[2:], dtype=np.int64))
    extra = _out(node) if len(node.inputs) > 2 and node.inputs[2] is not None else 0
    return 2 * x.size * (y.shape[1] // node.attrs["group"]) * taps + extra


def _matmul(node: Node) -> int:
    products = 2 * _out(node) * node.inputs[0].shape[-1] if node.inputs[0].shape else _out(node)
    softmax = PER_ELEMENT["Softmax"] * _out(node) if node.attrs.get("softmax") else 0
    return products + _epilogue(node, ()) + softmax


def _gemm(node: Node) -> int:
    a = node.inputs[0]
    k = a.shape[0] if node.attrs.get("transA") else a.shape[1]
    return 2 * _out(node) * k + _epilogue(node)


def _packed_gemm(node: Node) -> int:
    """inputs: A (..., K), packed W, bias, residual."""
    return 2 * _out(node) * node.inputs[0].shape[-1] + _epilogue(node, (2, 3))


def _pool(node: Node) -> int:
    return _out(node) * int(np.prod(node.attrs["kernel_shape"], dtype=np.int64))


def _recurrent(node: Node) -> int:
    x, w = node.inputs[0], node.inputs[1]
    hidden, gates = node.attrs["hidden_size"], GATES[node.op]
    dirs = len(node.attrs["directions"])
    steps_x_batch = x.size // x.shape[-1]
    inputs = w.size // (dirs * gates * hidden)
    per_step = 2 * gates * hidden * (inputs + hidden) + 4 * gates * hidden
    return steps_x_batch * dirs * per_step


def _einsum(node: Node) -> int:
    return 2 * int(np.prod(list(node.attrs["extents"].values()), dtype=np.int64))


def _fused(node: Node) -> int:
    return len(node.attrs["program"]) * _out(node)


FLOP_RULES = {"Conv": _conv, "DepthwiseConv": _conv_with_residual,
              "WinogradConv": _conv_with_residual, "ConvBlocked": _conv_blocked,
              "DepthwiseBlocked": _depthwise_blocked, "Attention": _attention,
              "ConvTranspose": _conv_transpose,
              "MatMul": _matmul, "Gemm": _gemm, "PackedGemm": _packed_gemm,
              "SparseGemm": _sparse_gemm, "RowPool": _pool, "PoolBlocked": _pool,
              "MaxPoolWithIndices": _pool,
              "LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent, "Einsum": _einsum,
              "Fused": _fused}


def graph_costs(nodes: list[Node]) -> dict[str, Cost]:
    """Cost per ONNX node (IR nodes carry their ONNX node's name), in model order."""
    costs: dict[str, Cost] = {}
    for n in nodes:
        costs[n.name] = costs.get(n.name, ZERO) + node_cost(n)
    return costs
