"""The small models of tests/models/ (made by tests/models/make_seq_models.py) against
ONNX Runtime."""
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler_core.frontend.model_file import model_opset
from compiler_core.frontend.onnx import _nodes_needing_converters

from .helpers import assert_matches_each, rand

MODELS = Path(__file__).resolve().parents[1] / "models"


def load(name: str) -> onnx.ModelProto:
    model = onnx.load(MODELS / name)
    missing = sorted({n.op_type for n in _nodes_needing_converters(model.graph,
                                                                   model_opset(model))})
    if missing:
        pytest.skip(f"{name} needs converters that have not landed yet: {missing}")
    return model


def test_models_stay_small():
    for path in MODELS.glob("*.onnx"):
        assert path.stat().st_size < 1 << 20, path.name


def test_speech_lstm_gru():
    model = load("speech_lstm_gru.onnx")
    assert_matches_each(model, [{"features": rand(1, 50, 40, seed=1, low=-2, high=2)}])


def test_transformer_encoder():
    model = load("transformer_encoder.onnx")
    feeds = []
    for valid_tokens in (16, 11):  # no padding, then 5 padded positions masked out
        mask = np.zeros((1, 16), np.int64)
        mask[0, :valid_tokens] = 1
        feeds.append({"embeddings": rand(1, 16, 64, seed=valid_tokens), "attention_mask": mask})
    assert_matches_each(model, feeds)


def test_dynamic_if_takes_every_branch():
    model = load("dynamic_if.onnx")
    flat = rand(4, 8, seed=3, low=0.0, high=0.5)        # positive sum, max below 0.9
    peaked = flat.copy()
    peaked[2, 5] = 3.0
    assert_matches_each(model, [{"x": peaked}, {"x": flat}, {"x": -flat}])
