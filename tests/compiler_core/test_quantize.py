import numpy as np
import pytest
from onnx import helper

from .helpers import assert_matches, make_model, rand

F = np.float32


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_roundtrip(dtype, per_axis):
    x = rand(2, 3, 4, low=-3, high=3)
    scale = np.array([0.02, 0.05, 0.1], F) if per_axis else np.array(0.03, F)
    zp = np.full(scale.shape, 3 if dtype == np.int8 else 128, dtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    m = make_model(nodes, [("x", F, x.shape)], [("q", dtype, x.shape), ("y", F, x.shape)],
                   [("s", scale), ("z", zp)], opset=13)
    got = assert_matches(m, {"x": x})
    info = np.iinfo(dtype)
    assert got["q"].min() >= info.min and got["q"].max() <= info.max


def test_dynamic_quantize_linear():
    x = rand(5, 7, low=-2, high=5)
    m = make_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                   [("x", F, x.shape)], [("y", np.uint8, x.shape), ("s", F, ()),
                                         ("z", np.uint8, ())], opset=11)
    assert_matches(m, {"x": x})
