"""The generated models of tests/models/catalog.py against ONNX Runtime, and the generators
themselves (cache, block sparsity, BatchNormalization calibration)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import compiler_core as cc
from compiler_core.runtime.benchmark import numerical_check, ort_outputs
from tests.models import catalog
from tests.models.graph_builder import GraphBuilder, calibrate_batch_norms
from tests.models.wavernn_step import BLOCK


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if s.slow else n for n, s in catalog.MODELS.items()])
def test_generated_model_matches_onnxruntime(name):
    path = catalog.model_path(name)
    compiled = cc.compile(path, input_shapes=catalog.input_shapes(name))
    for seed in (0, 1):
        feeds = catalog.feeds(name, seed)
        reference = ort_outputs(path, feeds)
        assert all(np.isfinite(r).all() for r in reference.values())
        check = numerical_check(compiled.run(feeds), reference)
        assert check["allclose"], f"{name} seed {seed}: {check}"


def test_model_cache_is_keyed_on_the_script(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "CACHE", tmp_path)
    path = catalog.model_path("wavernn")
    stamp = path.stat().st_mtime_ns
    assert catalog.model_path("wavernn") == path and path.stat().st_mtime_ns == stamp
    sparse = catalog.model_path("wavernn_sparse80")
    assert sparse != path and path.exists()  # other parameters, other file, both kept
    stale = path.with_name(path.name.replace(path.stem[-12:], "0" * 12))
    path.rename(stale)  # as if written by an older version of the script
    assert catalog.model_path("wavernn") == path and not stale.exists()


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="yolo_320"):
        catalog.model_path("yolo")


def _weights(name: str) -> dict[str, np.ndarray]:
    model = onnx.load(catalog.model_path(name))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    gru = next(n for n in model.graph.node if n.op_type == "GRU")
    gemms = [n.input[1] for n in model.graph.node if n.op_type == "Gemm"]
    return {k: inits[k] for k in [gru.input[1], gru.input[2], *gemms]}


def test_sparse_sampling_net_has_80_percent_zero_1x8_blocks():
    for name, w in _weights("wavernn_sparse80").items():
        blocks = w.reshape(-1, BLOCK)
        zero = ~blocks.any(axis=1)
        assert zero.mean() == pytest.approx(0.8, abs=1e-3), name
        assert (blocks[~zero] != 0).all(), name  # kept blocks are dense, zeros only whole


def test_dense_sampling_net_has_no_zero_blocks():
    for name, w in _weights("wavernn").items():
        assert w.reshape(-1, BLOCK).any(axis=1).all(), name


def test_batch_norm_calibration_normalises_each_channel():
    b = GraphBuilder(seed=0)
    y = b.batch_norm(b.conv("x", 3, 4, 3), 4)
    b.node("Identity", [y], out="y")
    model = b.model("bn", [("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                    [("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    x = 5.0 + 3.0 * np.random.default_rng(1).standard_normal((1, 3, 8, 8), np.float32)
    model = calibrate_batch_norms(model, {"x": x})
    out = ort_outputs(model, {"x": x})["y"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), inits[bn.input[2]], atol=1e-3)
    np.testing.assert_allclose(out.std(axis=(0, 2, 3)), inits[bn.input[1]], rtol=1e-3)
