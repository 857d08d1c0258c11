"""Constant weights with mostly zero blocks become SparseGemm (kernels/sparse_gemm.py).

Per weight matrix, analysis/sparsity.py finds the block shape the zeros have and decides
by a cost estimate whether the block-sparse kernel beats the dense one; matrices that lose
(every dense one) keep their dense kernels.

* PackedGemm (MatMul/Gemm with a constant weight, not yet packed, no residual): its
  W (K, N) is looked at as (N, K) = W^T and, when sparse wins, the node becomes SparseGemm
  with the same bias and activation.
* A single-step GRU (linear_before_reset=1) or LSTM, sparse or dense: the step becomes
  products over [x, h] with [W | R] for the gates whose two parts are summed (all four of
  LSTM, z and r of GRU) and, for GRU's new gate, x @ W_n^T and h @ R_n^T apart; each
  SparseGemm or PackedGemm as its own matrix decides; then a gate kernel
  (kernels/recurrent_step.py). Dense steps take this form too: a batch-1 step is
  matrix-vector products, which PackedGemm streams in register tiles and splits over
  threads by static ranges of output columns (each thread's weights stay in its core's
  L2 call after call), while the recurrent kernel runs on one thread. Multi-step sequences,
  sequence_lens, clipping, peepholes and bidirectional nodes keep the recurrent kernel.

A specialized node records what was decided in attrs["sparsity"] (the weight, its block
shape and density, the estimated speedup); meta.json lists them (`sparse_layers`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..analysis.sparsity import SparseChoice, best_block_shape
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node, Value
from ..kernels.sparse_gemm import pack_block_sparse


def use_sparse_weights_for(spec: MachineSpec):
    lanes = spec.vector_bits // 32

    def use_sparse_weights(graph: Graph) -> Graph:
        nodes = []
        for n in graph.nodes:
            nodes.extend(_rewrite(n, lanes) or [n])
        return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)
    return use_sparse_weights


def _rewrite(n: Node, lanes: int) -> list[Node] | None:
    if n.op == "PackedGemm" and not n.attrs.get("packed") and _no_residual(n) and not n.guards:
        return _sparse_gemm(n, lanes)
    if n.op in ("GRU", "LSTM") and _single_step(n):
        # a step in a branch of an If (Silero VAD's, per sample rate) runs when the branch
        # is taken: every node of its rewrite carries the same guards, and the values
        # between them live only in that branch
        return [dataclasses.replace(m, guards=n.guards) for m in _recurrent_step(n, lanes)]
    return None


def _no_residual(n: Node) -> bool:
    return len(n.inputs) < 4 or n.inputs[3] is None


def _sparse_gemm(n: Node, lanes: int) -> list[Node] | None:
    a, w, bias = n.inputs[:3]
    m = math.prod(a.shape[:-1])
    choice = best_block_shape(w.const.T, m, lanes)
    if choice is None:
        return None
    return [sparse_gemm_node(n.name, a, w.const.T, None if bias is None else bias.const,
                             n.outputs[0], choice, n.attrs.get("activation"), w.name,
                             n.sources)]


def sparse_gemm_node(name, a, w_nk, bias, out, choice: SparseChoice, activation, weight_name,
                     sources=()) -> Node:
    """Y = act(A @ W^T + bias) for W (N, K) in choice's blocks."""
    packed = pack_block_sparse(w_nk, choice.block)
    prefix = f"{weight_name}_{choice.name}"
    inputs = [a, Value(f"{prefix}_values", packed.values.shape, np.float32, const=packed.values),
              Value(f"{prefix}_cols", packed.cols.shape, packed.cols.dtype, const=packed.cols),
              Value(f"{prefix}_rows", packed.rows.shape, packed.rows.dtype, const=packed.rows),
              None if bias is None else Value(f"{prefix}_bias", bias.shape, np.float32,
                                              const=np.ascontiguousarray(bias, np.float32))]
    sparsity = {"weight": weight_name, "shape": list(w_nk.shape), "block": choice.name,
                "density": round(choice.density, 4),
                "estimated_speedup": round(choice.estimated_speedup, 2)}
    attrs = {"block": choice.block, "groups": packed.groups, "activation": activation,
             "sparsity": sparsity}
    return Node("SparseGemm", inputs, [out], attrs, name, sources=sources)


# ---------------------------------------------------------------- recurrent steps

def _single_step(n: Node) -> bool:
    a = n.attrs
    x, lens, h0 = n.inputs[0], n.inputs[4], n.inputs[5]
    seq = x.shape[0] if a["layout"] == 0 else x.shape[1]
    simple = (seq == 1 and len(a["directions"]) == 1 and lens is None and h0 is not None
              and a["clip"] is None and n.inputs[1].is_const and n.inputs[2].is_const
              and (n.inputs[3] is None or n.inputs[3].is_const))
    if n.op == "GRU":
        return simple and a["linear_before_reset"] == 1
    return (simple and not a["input_forget"] and n.inputs[6] is not None
            and (len(n.inputs) < 8 or n.inputs[7] is None))


def _recurrent_step(n: Node, lanes: int) -> list[Node]:
    x, wt, rt, bias, _, h0 = n.inputs[:6]
    batch, width = math.prod(x.shape[:-1]), wt.shape[2]
    w_nk, r_nk = wt.const[0].T, rt.const[0].T
    wb, rb = ((np.zeros(width, np.float32),) * 2 if bias is None
              else (bias.const[0, :width], bias.const[0, width:]))
    hidden = n.attrs["hidden_size"]
    # gates whose input and hidden parts are summed before their activation: one product
    # over [x, h] with [W | R], one horizontal sum per output instead of two
    joint = 2 * hidden if n.op == "GRU" else width
    xh = Value(f"{n.outputs[0].name}_xh", (*x.shape[:-1], x.shape[-1] + h0.shape[-1]), np.float32)
    nodes = [Node("Concat", [x, h0], [xh], {"axis": len(x.shape) - 1}, n.name,
                  sources=n.onnx_nodes)]
    parts = [(xh, np.concatenate([w_nk[:joint], r_nk[:joint]], axis=1), wb[:joint] + rb[:joint],
              "WR")]
    if n.op == "GRU":  # r scales the hidden part of the new gate: its two products stay apart
        parts += [(x, w_nk[joint:], wb[joint:], "Wn"), (h0, r_nk[joint:], rb[joint:], "Rn")]
    rows = []
    for a, w, b, part in parts:
        rows.append(Value(f"{n.outputs[0].name}_{part}", (batch, w.shape[0]), np.float32))
        nodes.append(_product(n, a, w, b, rows[-1], lanes, f"{n.name}_{part}"))
    state = h0 if n.op == "GRU" else n.inputs[6]
    results = n.outputs[:2] if n.op == "GRU" else n.outputs[:3]
    nodes.append(Node(f"{n.op}StepGates", [*rows, state], list(results),
                      {"hidden_size": hidden, "activations": n.attrs["activations"][0]}, n.name,
                      sources=n.onnx_nodes))
    return nodes


def _product(n: Node, a, w_nk, bias, out, lanes, weight_name) -> Node:
    """One of a step's products (named after its weights), computing part of node n: sparse
    when its own matrix is worth it, else dense."""
    choice = best_block_shape(w_nk, math.prod(a.shape[:-1]), lanes)
    if choice is not None:
        return sparse_gemm_node(n.name, a, w_nk, bias, out, choice, None, weight_name,
                                n.onnx_nodes)
    w = Value(f"{weight_name}_kn", w_nk.T.shape, np.float32,
              const=np.ascontiguousarray(w_nk.T, np.float32))
    b = Value(f"{weight_name}_bias", bias.shape, np.float32,
              const=np.ascontiguousarray(bias, np.float32))
    return Node("PackedGemm", [a, w, b, None], [out], {"activation": None}, n.name,
                sources=n.onnx_nodes)
