"""Reductions, ArgMax/ArgMin, TopK and the Softmax family against ONNX Runtime."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model

from .helpers import assert_matches, make_model, rand

F = np.float32
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _positive_if_needed(op, x):
    # log of a sum needs positive sums
    return np.abs(x) + 0.1 if op == "ReduceLogSum" else x


def reduce_model(op, shape, axes, keepdims, opset, dtype=F, noop=None):
    """axes go in an attribute before opset 13 (18 for all but ReduceSum), else an input."""
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inits, names = [], ["x"]
    if as_input and axes is not None:
        inits.append(("axes", np.array(axes, np.int64)))
        names.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op, names, ["y"], **attrs)
    return make_model([node], [("x", dtype, shape)], [("y", dtype, None)], inits, opset=opset)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims,opset", [([1], 1, 18), ([0, 2], 0, 18), (None, 1, 18),
                                                 ([-1], 0, 11)])
def test_reduce(op, axes, keepdims, opset):
    x = _positive_if_needed(op, rand(3, 4, 5, seed=7))
    assert_matches(reduce_model(op, x.shape, axes, keepdims, opset), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean"])
def test_reduce_outer_axis_accumulates_in_output(op):
    # axes (0, 1) of [6, 5, 32] keep a trailing contiguous axis: the vectorised loop order
    x = rand(6, 5, 32, seed=3)
    assert_matches(reduce_model(op, x.shape, [0, 1], 0, 18), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceSumSquare", "ReduceL2"])
def test_reduce_empty_axes_noop(op):
    x = rand(2, 3, seed=5)
    model = reduce_model(op, x.shape, [], 1, 18, noop=1)
    expected = {"ReduceSum": x, "ReduceSumSquare": x * x, "ReduceL2": np.abs(x)}[op]
    got = cc.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_reduce_empty_axes_means_all():
    x = rand(2, 3, 4, seed=6)
    assert_matches(reduce_model("ReduceSum", x.shape, [], 0, 13), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_integers(op):
    x = rand(4, 6, dtype=np.int32, seed=2, low=-0.4, high=0.4)
    assert_matches(reduce_model(op, x.shape, [1], 0, 18, dtype=np.int32), {"x": x})


def test_reduce_float16_accumulates_in_float32():
    x = rand(2, 300, seed=1).astype(np.float16)
    assert_matches(reduce_model("ReduceMean", x.shape, [1], 0, 18, dtype=np.float16), {"x": x},
                   atol=2e-3)


def test_reduce_axes_from_model_input_is_refused():
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    model = make_model([node], [("x", F, (2, 3)), ("axes", np.int64, (1,))], [("y", F, None)],
                       opset=13)
    with pytest.raises(cc.CompileError, match="axes must be known at compile time"):
        cc.compile(model)


# ---------------------------------------------------------------- ArgMax / ArgMin

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1)])
def test_arg_reduce(op, axis, keepdims, last):
    x = rand(4, 5, 3, dtype=np.int32, seed=4, low=-0.2, high=0.2).astype(F)  # many ties
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)
    model = make_model([node], [("x", F, x.shape)], [("y", np.int64, None)], opset=13)
    assert_matches(model, {"x": x})


# ---------------------------------------------------------------- TopK

@pytest.mark.parametrize("largest,axis", [(1, 1), (0, 0), (1, -1), (0, -1)])
def test_topk_with_ties(largest, axis):
    x = rand(6, 7, 3, dtype=np.int32, seed=9, low=-0.3, high=0.3).astype(F)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    model = make_model([node], [("x", F, x.shape)], [("v", F, None), ("i", np.int64, None)],
                       [("k", np.array([3], np.int64))], opset=11)
    assert_matches(model, {"x": x})


def test_topk_v1_attribute_k_and_full_sort():
    x = rand(2, 50, seed=2)
    node = helper.make_node("TopK", ["x"], ["v", "i"], k=50)
    model = make_model([node], [("x", F, x.shape)], [("v", F, None), ("i", np.int64, None)],
                       opset=9)
    assert_matches(model, {"x": x})


# ---------------------------------------------------------------- Softmax family

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis,opset", [(0, 11), (1, 11), (0, 13), (1, 13), (-1, 13)])
def test_softmax_family(op, axis, opset):
    # opset 11 flattens to 2-D at `axis`; 13 normalises along `axis` only (strided for 0, 1)
    x = rand(3, 4, 6, seed=11, low=-5, high=5)
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", F, x.shape)],
                       [("y", F, x.shape)], opset=opset)
    assert_matches(model, {"x": x})


def test_softmax_default_axis_old_opset():
    x = rand(2, 3, 4, seed=12)
    model = make_model([helper.make_node("Softmax", ["x"], ["y"])], [("x", F, x.shape)],
                       [("y", F, x.shape)], opset=9)
    assert_matches(model, {"x": x})


def test_softmax_large_values_do_not_overflow():
    x = np.array([[1000.0, 1001.0, 999.0], [-1e4, 0.0, 1e4]], F)
    for op in ["Softmax", "LogSoftmax"]:
        model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, x.shape)],
                           [("y", F, x.shape)], opset=13)
        assert_matches(model, {"x": x})


def _softmax64(x, log):
    shifted = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    total = np.exp(shifted).sum(axis=-1, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])  # 16 and 8 float lanes
@pytest.mark.parametrize("n", [3, 8, 16, 29, 37, 64, 1000])
def test_softmax_rows_in_vectors_with_a_masked_tail(target, n):
    # contiguous rows run in whole vectors plus a masked last one: rows shorter than a
    # vector, whole vectors, and tails of every kind; a NaN fills its row with NaNs
    x = rand(4, n, seed=n, low=-5, high=5)
    x[3, n // 2] = np.nan
    for op in ["Softmax", "LogSoftmax"]:
        model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1)], [("x", F, x.shape)],
                           [("y", F, x.shape)], opset=13)
        got = cc.compile(model, target=target).run({"x": x})["y"]
        want = _softmax64(x, op == "LogSoftmax")
        np.testing.assert_allclose(got[:3], want[:3], rtol=2e-6, atol=2e-6)
        assert np.isnan(got[3]).all()


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])  # 16 and 8 float lanes
@pytest.mark.parametrize("n", [7, 40, 90, 100])
def test_softmax_finds_its_rows_max_wherever_it_is(target, n):
    """Row r's max, 200 above the rest, is at column r: the exps, of values less the row's
    max, assume they are at most 0, and e^200 is past float32's range, so a vector that the
    max's running maxima skipped (the whole vectors are split over several of them, then a
    remainder, then the masked tail) spoils its row."""
    x = rand(n, n, seed=n, low=-5, high=5)
    x[np.arange(n), np.arange(n)] = 200.0
    for op in ["Softmax", "LogSoftmax"]:
        model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1)],
                           [("x", F, x.shape)], [("y", F, x.shape)], opset=13)
        got = cc.compile(model, target=target).run({"x": x})["y"]
        np.testing.assert_allclose(got, _softmax64(x, op == "LogSoftmax"), rtol=2e-6, atol=2e-6)


def test_softmax_float64():
    x = rand(5, 9, dtype=np.float64, seed=13)
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=0)],
                       [("x", np.float64, x.shape)], [("y", np.float64, x.shape)], opset=13)
    assert_matches(model, {"x": x})


def test_reduce_ir_attributes_are_canonical():
    # opset 11 attribute axes and opset 18 input axes give the same IR node
    for opset in (11, 18):
        graph = import_model(reduce_model("ReduceMean", (3, 4), [-1], 0, opset))
        assert [(n.op, n.attrs) for n in graph.nodes] == [
            ("ReduceMean", {"axes": [1], "keepdims": False})]
