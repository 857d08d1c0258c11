"""Ops that ONNX defines as functions are expanded into their bodies at import."""
import numpy as np
from onnx import helper

from compiler_core.frontend.onnx import import_model

from .helpers import assert_matches, make_model, rand

F = np.float32


def test_mean_variance_normalization_uses_schema_default_axes():
    x = rand(2, 3, 4, 5)
    m = make_model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
                   [("x", F, x.shape)], [("y", F, x.shape)], opset=13)
    assert_matches(m, {"x": x})
    reduce_axes = [n.attrs["axes"] for n in import_model(m).nodes if n.op == "ReduceMean"]
    assert reduce_axes and all(list(a) == [0, 2, 3] for a in reduce_axes)


def test_rms_normalization_matches_reference():
    x, scale = rand(2, 5, 8), rand(8, seed=1)
    m = make_model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5)],
                   [("x", F, x.shape)], [("y", F, x.shape)], [("s", scale)], opset=23)
    assert_matches(m, {"x": x}, reference="onnx")


def test_attention_matches_reference():
    q, k, v = rand(1, 2, 4, 8, seed=1), rand(1, 2, 6, 8, seed=2), rand(1, 2, 6, 8, seed=3)
    m = make_model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                   [("q", F, q.shape), ("k", F, k.shape), ("v", F, v.shape)],
                   [("y", F, (1, 2, 4, 8))], opset=23)
    assert_matches(m, {"q": q, "k": k, "v": v}, reference="onnx")
