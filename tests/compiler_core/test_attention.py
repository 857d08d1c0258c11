"""Attention's products fused block by block (passes/fuse_attention.py, kernels/attention.py)."""
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model
from compiler_core.kernels import attention
from compiler_core.passes.pipeline import run_pipeline

from .helpers import make_model, ort_run, rand

F = np.float32


def _attention(q_shape, kt_shape, v_shape, mask_shape=None):
    """softmax(Q K^T / 4 + mask) V, as encoders are exported."""
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "scale"], ["scaled"])]
    scores = "scaled"
    inputs = [("q", F, q_shape), ("kt", F, kt_shape), ("v", F, v_shape)]
    if mask_shape:
        nodes.append(helper.make_node("Add", ["scaled", "mask"], ["masked"]))
        inputs.append(("mask", F, mask_shape))
        scores = "masked"
    nodes += [helper.make_node("Softmax", [scores], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    return make_model(nodes, inputs, [("y", F, None)], [("scale", np.array(4.0, F))])


def _feeds(model):
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input}
    feeds = {name: rand(*shape, seed=k, low=-2, high=2) for k, (name, shape)
             in enumerate(shapes.items())}
    if "mask" in feeds:  # padded keys: a large negative score
        feeds["mask"] = np.where(feeds["mask"] > 1.5, F(-1e4), F(0)).astype(F)
    return feeds


def _ops(model):
    return [n.op for n in run_pipeline(import_model(model), 3).nodes]


def _run(artifact, feeds, threads):
    with tempfile.TemporaryDirectory() as d:
        artifact.save(d)
        return cc.load(d, threads=threads).run(feeds)["y"]


@pytest.mark.parametrize("q_shape, kt_shape, v_shape, mask_shape", [
    ((1, 4, 48, 32), (1, 4, 32, 48), (1, 4, 48, 32), (1, 1, 1, 48)),  # whole row blocks
    ((2, 3, 50, 16), (2, 3, 16, 50), (2, 3, 50, 24), (2, 1, 1, 50)),  # a last block of 2
    ((3, 20, 8), (3, 8, 37), (3, 37, 5), None),  # keys unlike queries, few output columns
    ((7, 40), (40, 9), (9, 20), (7, 9)),  # one matrix, a mask per score
    ((1, 12, 5, 64), (1, 12, 64, 5), (1, 12, 5, 64), (1, 1, 1, 5)),  # fewer rows than a block
])
def test_fused_attention_matches_onnxruntime_at_one_and_two_threads(q_shape, kt_shape, v_shape,
                                                                    mask_shape):
    model = _attention(q_shape, kt_shape, v_shape, mask_shape)
    ops = _ops(model)
    assert ops.count("Attention") == 1 and "MatMul" not in ops
    feeds = _feeds(model)
    artifact = cc.compile(model)
    one = _run(artifact, feeds, 1)
    np.testing.assert_array_equal(one, _run(artifact, feeds, 2))
    np.testing.assert_allclose(one, ort_run(model, feeds)["y"], rtol=1e-4, atol=1e-5)


def test_scores_past_a_scratch_array_stay_two_products():
    keys = attention.MAX_SCRATCH_BYTES // (4 * attention.ROWS) + 1
    model = _attention((1, 2, 24, 4), (1, 2, 4, keys), (1, 2, keys, 4))
    assert "Attention" not in _ops(model)
    feeds = _feeds(model)
    np.testing.assert_allclose(cc.compile(model).run(feeds)["y"], ort_run(model, feeds)["y"],
                               rtol=1e-4, atol=1e-5)


def test_keys_shared_by_every_head_stay_two_products():
    """K^T broadcast over the heads: the kernel indexes every operand by the same matrix."""
    model = _attention((1, 4, 16, 8), (1, 1, 8, 16), (1, 4, 16, 8))
    assert "Attention" not in _ops(model)
