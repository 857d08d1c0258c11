"""The nine full-size CNNs that ship with onnx (onnx/backend/test/data/light).

Their weights are ConstantOfShape fills that the importer folds to constants. The expected
outputs (light_*_output_0.pb) were produced by onnx's backend runner for the input it
generates with `generate_dummy_data(random=False)`: arange(size) / size in the input's shape.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import compiler_core as cc

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
FAST = ["squeezenet"]
SLOW = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
        "vgg19", "zfnet512"]


def dummy_input(value_info) -> np.ndarray:
    """The backend runner's deterministic input: arange(n) / n."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                  for d in value_info.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def light_case(name: str):
    model = onnx.load(LIGHT / f"light_{name}.onnx")
    initializers = {t.name for t in model.graph.initializer}
    feeds = {i.name: dummy_input(i) for i in model.graph.input if i.name not in initializers}
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    return model, feeds, expected


def check_light_model(name: str) -> None:
    model, feeds, expected = light_case(name)
    got = cc.compile(model).run(feeds)
    out = got[model.graph.output[0].name]
    assert out.shape == expected.shape
    atol = 1e-4 + 1e-3 * float(np.max(np.abs(expected)))
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("name", FAST)
def test_light_model(name):
    check_light_model(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_light_model_slow(name):
    check_light_model(name)
