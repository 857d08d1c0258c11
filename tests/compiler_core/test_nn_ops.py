"""Convolutions, matrix products, pooling and normalisation against ONNX Runtime."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import assert_matches, make_model, rand

F = np.float32


def _model(op, inputs, attrs=None, consts=(), opset=17, outputs=("y",)):
    """One `op` node; `inputs` are (name, array) fed at run time, `consts` initializers.
    Output types come from onnx shape inference."""
    names = [n for n, _ in inputs] + [n for n, _ in consts]
    node = helper.make_node(op, names, list(outputs), **(attrs or {}))
    model = make_model([node], [(n, a.dtype, a.shape) for n, a in inputs], [], consts, opset)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {v.name: v for v in inferred.graph.value_info}
    like_input = helper.make_tensor_value_info  # ops defined as functions infer nothing
    model.graph.output.extend(types.get(o) or like_input(o, 1, inputs[0][1].shape) for o in outputs)
    return model


def _check(op, inputs, attrs=None, consts=(), opset=17, outputs=("y",), **kw):
    return assert_matches(_model(op, inputs, attrs, consts, opset, outputs), dict(inputs), **kw)


# ---------------------------------------------------------------- Conv

CONV_CASES = [
    ("basic", (1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("strided_dilated", (2, 4, 13, 11), (6, 4, 3, 2),
     {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ("groups", (1, 6, 10, 10), (9, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    ("depthwise", (1, 8, 12, 12), (8, 1, 3, 3), {"group": 8, "strides": [2, 2],
                                                 "pads": [1, 1, 1, 1]}),
    ("same_upper", (1, 3, 10, 7), (5, 3, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("same_lower", (1, 3, 10, 7), (5, 3, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [3, 1]}),
    ("valid", (1, 2, 8, 8), (3, 2, 5, 5), {"auto_pad": "VALID"}),
    ("1x1", (1, 32, 7, 7), (40, 32, 1, 1), {}),
    ("1d", (2, 3, 20), (4, 3, 5), {"strides": [2], "pads": [2, 1], "dilations": [2]}),
    ("3d", (1, 2, 6, 5, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 2]}),
    # several column blocks, column and row tails, wide output rounded up to whole tiles
    ("blocked", (1, 20, 40, 37), (13, 20, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("depthwise_wide", (2, 4, 30, 33), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("name,xs,ws,attrs", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv(name, xs, ws, attrs):
    bias = name != "basic"
    x, w = rand(*xs, seed=1), rand(*ws, seed=2)
    consts = [("w", w)] + ([("b", rand(ws[0], seed=3))] if bias else [])
    _check("Conv", [("x", x)], attrs, consts)


def test_deep_conv_with_fused_relu():
    """K = 48 * 9 > K_CHUNK: partial sums are kept in the output between k chunks, and the
    bias and Relu are applied once at the end."""
    x, w, b = rand(1, 48, 6, 7), rand(20, 48, 3, 3, seed=2), rand(20, seed=3)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["c"], ["y"])],
                       [("x", F, x.shape)], [("y", F, (1, 20, 6, 7))], [("w", w), ("b", b)])
    assert_matches(model, {"x": x})


def test_conv_weights_as_input():
    x, w, b = rand(1, 4, 9, 9), rand(6, 2, 3, 3, seed=2), rand(6, seed=3)
    _check("Conv", [("x", x), ("w", w), ("b", b)], {"group": 2, "strides": [2, 2]})


def test_conv_rejects_mismatched_groups():
    m = _model("Conv", [("x", rand(1, 4, 5, 5))], {"group": 1}, [("w", rand(3, 4, 3, 3))])
    m.graph.node[0].attribute[0].i = 2
    with pytest.raises(cc.CompileError, match="group=2"):
        cc.compile(m)


CONV_T_CASES = [
    ("basic", (1, 3, 5, 5), (3, 2, 3, 3), {}),
    ("strided_padded", (2, 2, 4, 5), (2, 3, 3, 3),
     {"strides": [2, 3], "pads": [1, 0, 1, 1], "output_padding": [1, 2]}),
    ("groups_dilated", (1, 4, 5, 4), (4, 1, 3, 2), {"group": 2, "dilations": [2, 2]}),
    ("output_shape", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ("same_upper", (1, 2, 4, 4), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("1d", (1, 2, 6), (2, 3, 4), {"strides": [2]}),
]


@pytest.mark.parametrize("name,xs,ws,attrs", CONV_T_CASES, ids=[c[0] for c in CONV_T_CASES])
def test_conv_transpose(name, xs, ws, attrs):
    x, w, b = rand(*xs, seed=1), rand(*ws, seed=2), rand(ws[1] * attrs.get("group", 1), seed=3)
    _check("ConvTranspose", [("x", x)], attrs, [("w", w), ("b", b)])


# ---------------------------------------------------------------- MatMul / Gemm

@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 33)), ((7,), (7, 20)), ((3, 7), (7,)), ((7,), (7,)),
                                   ((2, 1, 9, 6), (3, 6, 17)), ((4, 13, 30), (30, 2))])
def test_matmul(sa, sb):
    _check("MatMul", [("a", rand(*sa, seed=1)), ("b", rand(*sb, seed=2))])


def test_gemm_long_reduction_with_bias_and_relu():
    a, w, c = rand(7, 900), rand(900, 40, seed=2), rand(40, seed=3)
    model = make_model([helper.make_node("Gemm", ["a", "w", "c"], ["g"], alpha=0.5, beta=2.0),
                        helper.make_node("Relu", ["g"], ["y"])],
                       [("a", F, a.shape)], [("y", F, (7, 40))], [("w", w), ("c", c)])
    assert_matches(model, {"a": a})


def test_matmul_constant_weights_and_int():
    a = rand(3, 64)
    _check("MatMul", [("a", a)], consts=[("w", rand(64, 100, seed=2))])
    ai, bi = rand(4, 5, dtype=np.int64, seed=1), rand(5, 19, dtype=np.int64, seed=2)
    _check("MatMul", [("a", ai), ("b", bi)])


@pytest.mark.parametrize("attrs,cshape", [({}, (20,)), ({"transA": 1}, (1, 20)),
                                          ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (9, 20)),
                                          ({"transA": 1, "transB": 1}, (9, 1)), ({}, None)])
@pytest.mark.parametrize("const_b", [True, False])
def test_gemm(attrs, cshape, const_b):
    a = rand(*((11, 9) if attrs.get("transA") else (9, 11)), seed=1)
    b = rand(*((20, 11) if attrs.get("transB") else (11, 20)), seed=2)
    inputs = [("a", a)] + ([] if const_b else [("b", b)])
    consts = [("b", b)] if const_b else []
    if cshape is not None:
        consts.append(("c", rand(*cshape, seed=3)))
    _check("Gemm", inputs, attrs, consts, 13)


# ---------------------------------------------------------------- pooling

POOL_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [1, 2]}),
    ("LpPool", {"kernel_shape": [2, 2], "strides": [2, 2], "p": 2}),
]


@pytest.mark.parametrize("op,attrs", POOL_CASES)
def test_pool(op, attrs):
    _check(op, [("x", rand(2, 3, 11, 10))], attrs, opset=18)


# RowPool's rows are long enough for whole vectors and a remainder, at strides 2 and 3
ROW_POOL_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [2, 0, 1, 2]}),
    ("MaxPool", {"kernel_shape": [2, 4], "strides": [3, 2], "pads": [1, 3, 0, 1], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 2, 1],
                     "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [3, 2], "pads": [1, 0, 2, 1],
                     "ceil_mode": 1, "count_include_pad": 1}),
    ("LpPool", {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1], "p": 3}),
]


@pytest.mark.parametrize("op,attrs", ROW_POOL_CASES)
def test_row_pool(op, attrs):
    _check(op, [("x", rand(2, 3, 37, 45))], attrs, opset=19)


# Rows of at most two vectors pool in registers (kernels/pool.py, _pool_row_in_registers):
# 13 columns are one vector of 16 lanes or two of 8, 7 columns one of either; up to 32
# output rows are static code (the last vectors of all but the last row stored whole), 40
# are a loop. A max pool's inputs are all below zero, where lanes past a row read as 0
# would win.
REGISTER_ROW_CASES = [
    ("MaxPool", (2, 3, 14, 13), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 42, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 3, 9, 7), {"kernel_shape": [2, 3], "strides": [1, 2], "ceil_mode": 1,
                               "dilations": [2, 1], "pads": [0, 2, 1, 1]}),
    ("MaxPool", (1, 2, 13), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", (2, 3, 14, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                     "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 2, 80, 7), {"kernel_shape": [2, 2], "strides": [2, 1], "ceil_mode": 1,
                                    "count_include_pad": 1, "pads": [0, 1, 0, 1]}),
    ("AveragePool", (1, 2, 3, 5, 7), {"kernel_shape": [2, 3, 3], "pads": [1, 1, 1, 0, 1, 1]}),
    ("LpPool", (1, 3, 9, 13), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1],
                               "p": 3}),
]


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])
@pytest.mark.parametrize("op,shape,attrs", REGISTER_ROW_CASES)
def test_pool_rows_in_registers(op, shape, attrs, target):
    x = rand(*shape, low=-2.0, high=-1.0) if op == "MaxPool" else rand(*shape)
    _check(op, [("x", x)], attrs, opset=19, target=target)


def test_max_pool_int8_and_nan():
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    x = (rand(1, 2, 21, 35, seed=4) * 127).astype(np.int8)
    _check("MaxPool", [("x", x)], attrs, opset=12)
    for columns in (35, 13):  # rows past two vectors (the row buffer), rows in registers
        x = rand(1, 1, 21, columns)
        x[0, 0, 5, 7] = np.nan  # in the windows of outputs (2..3, 3..4): NaN propagates
        y = cc.compile(_model("MaxPool", [("x", x)], attrs, opset=12)).run({"x": x})["y"][0, 0]
        assert np.isnan(y[2:4, 3:5]).all() and np.isnan(y).sum() == 4


@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(storage_order):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
             "storage_order": storage_order}
    _check("MaxPool", [("x", rand(2, 3, 9, 8))], attrs, opset=12, outputs=("y", "i"))


def test_pool_1d_and_3d():
    _check("MaxPool", [("x", rand(1, 2, 17))], {"kernel_shape": [4], "strides": [3]})
    _check("AveragePool", [("x", rand(1, 2, 5, 6, 7))], {"kernel_shape": [2, 3, 2],
                                                          "pads": [1, 1, 0, 0, 1, 1]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pool(op):
    _check(op, [("x", rand(2, 5, 7, 9))])


# ---------------------------------------------------------------- normalisation

@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm(opset):
    c = 6
    consts = [("s", rand(c, seed=2)), ("b", rand(c, seed=3)), ("m", rand(c, seed=4)),
              ("v", rand(c, seed=5, low=0.5, high=2.0))]
    _check("BatchNormalization", [("x", rand(2, c, 5, 4))], {"epsilon": 1e-3}, consts, opset)


def test_batch_norm_training_mode():
    c = 3
    consts = [(n, rand(c, seed=k, low=0.5, high=1)) for k, n in enumerate("sbmv")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1, momentum=0.8)
    m = make_model([node], [("x", F, (2, c, 4))],
                   [("y", F, (2, c, 4)), ("rm", F, (c,)), ("rv", F, (c,))], consts, opset=15)
    assert_matches(m, {"x": rand(2, c, 4, seed=9)}, reference="onnx")


def test_batch_norm_legacy_training_outputs_are_refused():
    c = 3
    consts = [(n, rand(c, seed=k, low=0.5, high=1)) for k, n in enumerate("sbmv")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean"])
    m = make_model([node], [("x", F, (2, c, 4))], [("y", F, (2, c, 4)), ("mean", F, (c,))],
                   consts, opset=9)
    with pytest.raises(cc.CompileError, match="training"):
        cc.compile(m)


def test_instance_norm():
    _check("InstanceNormalization", [("x", rand(2, 4, 6, 5))], {"epsilon": 1e-4},
           [("s", rand(4, seed=2)), ("b", rand(4, seed=3))])


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm(axis):
    x = rand(3, 4, 10)
    inner = x.shape[axis:] if axis > 0 else x.shape[-1:]
    _check("LayerNormalization", [("x", x)], {"axis": axis},
           [("s", rand(*inner, seed=2)), ("b", rand(*inner, seed=3))], outputs=("y", "mean", "inv"))


def test_layer_norm_without_bias():
    _check("LayerNormalization", [("x", rand(2, 3, 8))], {}, [("s", rand(8, seed=2))])


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm(opset):
    count = 2 if opset < 21 else 6
    _check("GroupNormalization", [("x", rand(2, 6, 4, 3))], {"num_groups": 2},
           [("s", rand(count, seed=2)), ("b", rand(count, seed=3))], opset, atol=1e-4)


@pytest.mark.parametrize("beta", [0.75, 0.6])
@pytest.mark.parametrize("size,shape", [(3, (1, 7, 5, 5)), (5, (2, 9, 4, 6)), (4, (1, 6, 3, 3)),
                                        (5, (1, 2, 4, 4))])  # even windows; fewer channels
def test_lrn(beta, size, shape):
    attrs = {"size": size, "alpha": 0.01, "beta": beta, "bias": 1.5}
    x = rand(*shape, low=-3, high=3)
    if size % 2:
        _check("LRN", [("x", x)], attrs)
        return
    # ONNX Runtime refuses an even window, and onnx's reference evaluator sums the window
    # of channel c only for c below the batch size: the spec's formula in numpy
    got = cc.compile(_model("LRN", [("x", x)], attrs)).run({"x": x})["y"]
    lo, hi = (size - 1) // 2, size // 2
    squares = np.stack([(x[:, max(0, c - lo):c + hi + 1] ** 2).sum(axis=1)
                        for c in range(shape[1])], axis=1)
    np.testing.assert_allclose(got, x / (1.5 + 0.01 / size * squares) ** beta, rtol=1e-5,
                               atol=1e-6)


# ---------------------------------------------------------------- a whole small CNN

def test_mobile_cnn_model():
    """tests/models/mobile_cnn.onnx (see tests/models/make_models.py): depthwise-separable
    convolutions, BatchNormalization, HardSwish/HardSigmoid, Resize and ConvTranspose."""
    model = onnx.load(Path(__file__).parent.parent / "models" / "mobile_cnn.onnx")
    assert_matches(model, {"image": rand(1, 3, 32, 32, seed=7)})


def test_conv_with_large_stride_like_an_stft():
    """Stride 32 has more phases than are specialised: one bounds-checked padding nest."""
    x, w = rand(2, 1, 300, seed=1), rand(12, 1, 64, seed=2)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[32], pads=[16, 16])
    out = (2, 12, (300 + 32 - 64) // 32 + 1)
    m = make_model([node], [("x", np.float32, x.shape)], [("y", np.float32, out)], [("w", w)])
    assert_matches(m, {"x": x})
