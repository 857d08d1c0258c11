import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import assert_matches, disassembly, make_model, rand

F = np.float32


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                    ((), (2, 2))])
def test_binary_broadcast(op, shapes):
    a, b = rand(*shapes[0], seed=1), rand(*shapes[1], seed=2)
    if op == "Pow":
        a = np.asarray(np.abs(a) + 0.5, F)
    if op == "Div":
        b = np.asarray(b + np.sign(b) * 0.5, F)
    out = np.broadcast_shapes(a.shape, b.shape)
    m = make_model([helper.make_node(op, ["a", "b"], ["y"])],
                   [("a", F, a.shape), ("b", F, b.shape)], [("y", F, out)])
    assert_matches(m, {"a": a, "b": b})


@pytest.mark.parametrize("exponent", [np.float32(2.0), np.array([2.0], F), np.int64(2),
                                      np.float32(3.0), np.ones((2, 1, 1), F) * 2])
def test_constant_exponents_match_and_squares_become_products(exponent):
    from compiler_core.frontend.onnx import import_model

    x = rand(3, 4, low=-2, high=2)
    out = np.broadcast_shapes(x.shape, np.shape(exponent))
    m = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", F, x.shape)],
                   [("y", F, out)], [("e", np.asarray(exponent))])
    assert_matches(m, {"x": x})
    ops = [n.op for n in import_model(m).nodes]
    squares = float(np.asarray(exponent).reshape(-1)[0]) == 2.0 and out == x.shape
    assert ("Mul" in ops and "Pow" not in ops) == squares


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil",
                                "Round", "Sign", "Erf", "Sin", "Cos", "Relu", "Sigmoid", "Tanh",
                                "Softplus", "HardSwish", "Softsign"])
@pytest.mark.parametrize("shape", [(3, 17), (5, 16)])  # rows of 16: one vector each
def test_unary(op, shape):
    x = rand(*shape, low=-3, high=3)
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + 0.1
    m = make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, x.shape)], [("y", F, x.shape)])
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}),
                                      ("Selu", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                      ("Gelu", {}), ("Gelu", {"approximate": "tanh"})])
@pytest.mark.parametrize("shape", [(4, 9), (2, 3, 8)])
def test_activation_attributes(op, attrs, shape):
    x = rand(*shape, low=-4, high=4)
    m = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, x.shape)],
                   [("y", F, x.shape)], opset=20)
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("op", ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_compare(op, dtype):
    a, b = rand(5, 4, dtype=dtype, seed=3), rand(4, dtype=dtype, seed=4)
    a[0, :] = b
    m = make_model([helper.make_node(op, ["a", "b"], ["y"])],
                   [("a", dtype, a.shape), ("b", dtype, b.shape)], [("y", np.bool_, (5, 4))])
    assert_matches(m, {"a": a, "b": b})


def test_where_and_logic():
    c, a, b = rand(2, 3, dtype=np.bool_), rand(2, 3), rand(3)
    m = make_model([helper.make_node("Where", ["c", "a", "b"], ["w"]),
                    helper.make_node("Not", ["c"], ["n"]),
                    helper.make_node("Xor", ["c", "n"], ["x"])],
                   [("c", np.bool_, c.shape), ("a", F, a.shape), ("b", F, b.shape)],
                   [("w", F, (2, 3)), ("x", np.bool_, (2, 3))])
    assert_matches(m, {"c": c, "a": a, "b": b})


@pytest.mark.parametrize("opset", [9, 13])
def test_clip_versions(opset):
    x = rand(6, 5, low=-3, high=3)
    if opset < 11:
        node = helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=0.5)
        inits = []
    else:
        node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
        inits = [("lo", np.array(-1.0, F)), ("hi", np.array(0.5, F))]
    m = make_model([node], [("x", F, x.shape)], [("y", F, x.shape)], inits, opset=opset)
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("to", [np.int32, np.int64, np.float64, np.bool_, np.float16])
def test_cast(to):
    x = rand(3, 4, low=-5, high=5)
    m = make_model([helper.make_node("Cast", ["x"], ["y"],
                                     to=helper.np_dtype_to_tensor_dtype(np.dtype(to)))],
                   [("x", F, x.shape)], [("y", to, x.shape)])
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8])
def test_bitshift_out_of_range_amounts(direction, dtype):
    x = np.array([-8, 4, -1, 7], dtype) if dtype == np.int32 else np.array([8, 4, 255, 7], dtype)
    s = np.array([1, 40, -3 if dtype == np.int32 else 200, 8 * np.dtype(dtype).itemsize], dtype)
    m = make_model([helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)],
                   [("x", dtype, x.shape), ("s", dtype, s.shape)], [("y", dtype, x.shape)], opset=11)
    got = cc.compile(m).run({"x": x, "s": s})["y"]
    wide = x.astype(np.int64)
    legal = (s.astype(np.int64) >= 0) & (s.astype(np.int64) < 8 * np.dtype(dtype).itemsize)
    shifted = wide << np.where(legal, s, 0) if direction == "LEFT" else wide >> np.where(legal, s, 0)
    fill = np.where((wide < 0) & (direction == "RIGHT"), -1, 0)
    np.testing.assert_array_equal(got, np.where(legal, shifted, fill).astype(dtype))


def test_dropout_in_training_mode_is_refused():
    m = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
                   [("x", F, (4,)), ("t", np.bool_, ())], [("y", F, (4,))],
                   [("r", np.array(0.5, F))], opset=13)
    with pytest.raises(cc.CompileError, match="training mode"):
        cc.compile(m)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v4"])
def test_channel_scaling_uses_no_gathers(target):
    """Squeeze-excite's x[c, i] * s[c]: LLVM's cost model once vectorized it for AVX-512
    with gathers and scatters, 8x slower than plain vector loads on znver4."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"])]
    m = make_model(nodes, [("x", F, (1, 96, 28, 28)), ("s", F, (1, 96, 1, 1))],
                   [("y", F, (1, 96, 28, 28))])
    lines = disassembly(cc.compile(m, target=target))
    assert not [line for line in lines if "gather" in line or "scatter" in line]
    assert_matches(m, {"x": rand(1, 96, 28, 28, seed=1), "s": rand(1, 96, 1, 1, seed=2)})


@pytest.mark.parametrize("target,lanes", [("x86-64-v4", 16), ("x86-64-v3", 8)])
def test_rows_of_a_vector_are_vectors(target, lanes):
    """The blocked layout's batch norm and Relu, x[n, cb, h, w, :] * a[cb, :] + b[cb, :]:
    each row of the last axis one vector, not lanes inserted one by one from positions."""
    shape, per_block = (1, 3, 8, 8, lanes), (1, 3, 1, 1, lanes)
    nodes = [helper.make_node("Mul", ["x", "a"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    m = make_model(nodes, [("x", F, shape)], [("y", F, shape)],
                   [("a", rand(*per_block, seed=2)), ("b", rand(*per_block, seed=3))])
    lines = disassembly(cc.compile(m, target=target))
    assert not [line for line in lines if "insertps" in line or "gather" in line]
    assert_matches(m, {"x": rand(*shape, seed=1)}, target=target)
