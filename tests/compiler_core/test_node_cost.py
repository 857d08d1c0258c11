"""FLOPs and bytes per node (compiler_core/analysis/node_cost.py), and meta.json's record of
them per kernel with the ONNX nodes each kernel computes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.analysis.node_cost import node_cost
from compiler_core.ir import Node, Value

from .helpers import make_model

F32 = np.float32


def v(name, *shape, const=False):
    data = np.zeros(shape, F32) if const else None
    return Value(name, shape, F32, const=data)


def only_kernel(model, op, **shapes) -> dict:
    kernels = [k for k in cc.compile(model, input_shapes=shapes or None).meta["kernels"]
               if k["op"] == op]
    assert len(kernels) == 1, kernels
    return kernels[0]


def test_grouped_strided_dilated_conv_counts_multiply_adds_per_output():
    x = np.zeros((1, 8, 17, 17), F32)
    w = np.ones((6, 4, 3, 3), F32)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=2,
                                         strides=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1])],
                       [("x", F32, x.shape)], [("y", F32, None)],
                       [("w", w), ("b", np.zeros(6, F32))])
    k = only_kernel(model, "Conv")
    out = 1 * 6 * 8 * 8  # (17 + 2 - 5) // 2 + 1 = 8
    assert k["flops"] == 2 * out * 4 * 9 + out  # 4 input channels per group, 9 taps, bias
    assert k["onnx_nodes"] == ["conv"]
    assert k["written_bytes"] >= out * 4 and k["weight_bytes"] >= w.nbytes


def test_conv_transpose_counts_per_input_element():
    node = Node("ConvTranspose", [v("x", 1, 4, 5, 5), v("w", 4, 3, 2, 2, const=True), None],
                [v("y", 1, 6, 10, 10)], {"group": 2})
    assert node_cost(node).flops == 2 * 100 * 3 * 4  # 100 inputs, 3 outputs per group, 4 taps


def test_batched_matmul_and_gemm():
    mm = Node("MatMul", [v("a", 2, 3, 4, 5), v("b", 5, 6, const=True)], [v("c", 2, 3, 4, 6)])
    assert node_cost(mm).flops == 2 * (2 * 3 * 4 * 6) * 5
    gemm = Node("Gemm", [v("a", 5, 4), v("b", 5, 7, const=True), v("c", 7, const=True)],
                [v("y", 4, 7)], {"transA": 1, "transB": 0, "activation": "Relu"})
    assert node_cost(gemm).flops == 2 * 28 * 5 + 28 + 28  # products, C, Relu


def test_bytes_split_into_weights_reads_and_writes():
    mm = Node("MatMul", [v("a", 3, 4), v("b", 4, 5, const=True)], [v("c", 3, 5)])
    cost = node_cost(mm)
    assert (cost.weight_bytes, cost.read_bytes, cost.written_bytes) == (80, 48, 60)
    assert cost.bytes == 188 and cost.as_dict()["bytes"] == 188


@pytest.mark.parametrize("op,per_element", [("Softmax", 5), ("LayerNormalization", 8),
                                            ("BatchNormalization", 2), ("Relu", 1),
                                            ("SomeFutureOp", 1), ("Transpose", 0)])
def test_per_element_ops(op, per_element):
    node = Node(op, [v("x", 2, 3, 4)], [v("y", 2, 3, 4)], {})
    assert node_cost(node).flops == per_element * 24


def test_pools_count_taps_and_reductions_count_inputs():
    pool = only_kernel(make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3],
                                                    strides=[1, 1])],
                                  [("x", F32, (1, 2, 6, 6))], [("y", F32, None)]), "RowPool")
    assert pool["flops"] == 2 * 4 * 4 * 9
    node = Node("ReduceMean", [v("x", 4, 10)], [v("y", 4, 1)], {})
    assert node_cost(node).flops == 40


def test_gru_counts_both_products_per_step():
    hidden, inputs, steps = 16, 8, 5
    node = Node("GRU", [v("x", steps, 1, inputs), v("w", 1, inputs, 3 * hidden, const=True),
                        v("r", 1, hidden, 3 * hidden, const=True)],
                [v("y", steps, 1, 1, hidden)], {"hidden_size": hidden, "directions": ["forward"]})
    products = 2 * 3 * hidden * (inputs + hidden)
    assert node_cost(node).flops == steps * (products + 4 * 3 * hidden)


def test_einsum_counts_every_point_of_the_nest():
    node = Node("Einsum", [v("a", 3, 4), v("b", 4, 5)], [v("c", 3, 5)],
                {"extents": {"i": 3, "j": 4, "k": 5}})
    assert node_cost(node).flops == 2 * 60


def residual_block():
    c = 4
    rng = np.random.default_rng(0)
    bn = [("s", np.ones(c, F32)), ("bias", np.zeros(c, F32)), ("m", np.zeros(c, F32)),
          ("var", np.ones(c, F32))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bias", "m", "var"], ["bn"],
                              name="bn"),
             helper.make_node("Add", ["bn", "x"], ["sum"], name="residual"),
             helper.make_node("Relu", ["sum"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["g"], name="gate"),
             helper.make_node("Mul", ["r", "g"], ["y"], name="silu")]
    inits = [("w", rng.normal(0, 0.3, (c, c, 3, 3)).astype(F32)), *bn]
    return make_model(nodes, [("x", F32, (1, c, 8, 8))], [("y", F32, (1, c, 8, 8))], inits)


def test_fusion_keeps_the_onnx_nodes_each_kernel_computes():
    meta = cc.compile(residual_block()).meta
    covered = [k["onnx_nodes"] for k in meta["kernels"] if k["op"] != "ConvPad"]
    assert ["conv", "bn", "residual", "relu"] in covered
    assert any(set(nodes) >= {"gate", "silu"} for nodes in covered)
    conv = next(k for k in meta["kernels"] if k["op"] == "Conv")
    assert conv["flops"] == 2 * 4 * 64 * 4 * 9 + 3 * 4 * 64  # bias, residual, relu epilogue


def test_meta_lists_the_cost_of_every_onnx_node_before_fusion():
    meta = cc.compile(residual_block()).meta
    layers = {layer["onnx_node"]: layer for layer in meta["layers"]}
    assert set(layers) >= {"conv", "bn", "residual", "relu", "gate", "silu"}
    assert layers["conv"]["flops"] == 2 * 4 * 64 * 4 * 9
    assert layers["bn"]["flops"] == 2 * 256 and layers["bn"]["weight_bytes"] == 4 * 16
    assert meta["stats"]["flops"] == sum(k["flops"] for k in meta["kernels"])


def test_dense_layer_kernel_covers_gemm_scale_and_relu():
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="fc", transB=1),
             helper.make_node("Mul", ["g", "s"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    inits = [("w", rng.normal(0, 0.3, (6, 5)).astype(F32)), ("b", np.zeros(6, F32)),
             ("s", np.full((1, 6), 2.0, F32))]
    meta = cc.compile(make_model(nodes, [("x", F32, (4, 5))], [("y", F32, (4, 6))],
                                 inits)).meta
    [dense] = [k for k in meta["kernels"] if k["flops"]]
    assert dense["onnx_nodes"] == ["fc", "scale", "relu"]
    assert dense["flops"] == 2 * 24 * 5 + 24 + 24  # products, bias, relu
