"""Constant weights with mostly zero blocks become SparseGemm (kernels/sparse_gemm.py).

Per weight matrix, analysis/sparsity.py finds the block shape the zeros have and decides
by a cost estimate whether the block-sparse kernel beats the dense one; matrices that lose
(every dense one) keep their dense kernels.

* PackedGemm (MatMul/Gemm with a constant weight, not yet packed, no residual): its
  W (K, N) is looked at as (N, K) = W^T and, when sparse wins, the node becomes SparseGemm
  with the same bias and activation.
* A single-step GRU (linear_before_reset=1) or LSTM whose W or R is worth it: the step
  becomes gx = x @ W^T + Wb and gh = h @ R^T + Rb, each SparseGemm or PackedGemm as its
  own matrix decides, and a gate kernel (kernels/recurrent_step.py). Multi-step sequences,
  sequence_lens, clipping, peepholes and bidirectional nodes keep the recurrent kernel.

A specialized node records what was decided in attrs["sparsity"] (the weight, its block
shape and density, the estimated speedup); meta.json lists them (`sparse_layers`).
"""
from __future__ import annotations

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
    if n.guards:
        return None
    if n.op == "PackedGemm" and not n.attrs.get("packed") and _no_residual(n):
        return _sparse_gemm(n, lanes)
    if n.op in ("GRU", "LSTM") and _single_step(n):
        return _recurrent_step(n, lanes)
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
              and a["clip"] is None and n.inputs[1].is_const and n.inputs[2].is_const)
    if n.op == "GRU":
        return simple and a["linear_before_reset"] == 1
    return (simple and not a["input_forget"] and n.inputs[6] is not None
            and (len(n.inputs) < 8 or n.inputs[7] is None))


def _recurrent_step(n: Node, lanes: int) -> list[Node] | None:
    x, wt, rt, bias, _, h0 = n.inputs[:6]
    batch, width = math.prod(x.shape[:-1]), wt.shape[2]
    w_nk, r_nk = wt.const[0].T, rt.const[0].T
    choices = [best_block_shape(w_nk, batch, lanes), best_block_shape(r_nk, batch, lanes)]
    if choices == [None, None]:
        return None  # dense weights: the recurrent kernel stays
    biases = (None, None) if bias is None else (bias.const[0, :width], bias.const[0, width:])
    gx, gh = (Value(f"{n.outputs[0].name}_{part}", (batch, width), np.float32)
              for part in ("gx", "gh"))
    products = [_product(n, operand, w, b, out, choice, f"{n.name}_{part}")
                for part, operand, w, b, out, choice in
                zip(("W", "R"), (x, h0), (w_nk, r_nk), biases, (gx, gh), choices)]
    hidden = n.attrs["hidden_size"]
    state = h0 if n.op == "GRU" else n.inputs[6]
    results = n.outputs[:2] if n.op == "GRU" else n.outputs[:3]
    gates = Node(f"{n.op}StepGates", [gx, gh, state], list(results),
                 {"hidden_size": hidden, "activations": n.attrs["activations"][0]}, n.name,
                 sources=n.onnx_nodes)
    return products + [gates]


def _product(n: Node, a, w_nk, bias, out, choice, weight_name) -> Node:
    """One of a step's two products (named after its weight), computing part of node n."""
    if choice is not None:
        return sparse_gemm_node(n.name, a, w_nk, bias, out, choice, None, weight_name,
                                n.onnx_nodes)
    w = Value(f"{weight_name}_kn", w_nk.T.shape, np.float32,
              const=np.ascontiguousarray(w_nk.T, np.float32))
    b = None if bias is None else Value(f"{weight_name}_bias", bias.shape, np.float32,
                                        const=np.ascontiguousarray(bias, np.float32))
    return Node("PackedGemm", [a, w, b, None], [out], {"activation": None}, n.name,
                sources=n.onnx_nodes)
