"""Block-sparse weights: detection of the block shape, the per-layer decision, the kernel
for every block shape, single-step GRU/LSTM, and dense models keeping dense kernels."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.analysis.sparsity import best_block_shape
from compiler_core.kernels.sparse_gemm import BLOCK_SHAPES, pack_block_sparse

from .helpers import assert_matches, make_model, ort_run, rand


def sparse_matrix(n, k, block, density, seed=0):
    """(n, k) with `density` of its bh x bw blocks random and the rest zero."""
    rng = np.random.default_rng(seed)
    bh, bw = block
    keep = rng.random((n // bh, k // bw)) < density
    mask = np.repeat(np.repeat(keep, bh, axis=0), bw, axis=1)
    return (rng.standard_normal((n, k)) * mask).astype(np.float32)


def gemm_model(w_nk, batch=1, relu=True):
    n, k = w_nk.shape
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["g"], transB=1)]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["g"], ["y"]))
    return make_model(nodes, [("a", np.float32, [batch, k])], [("y", np.float32, [batch, n])],
                      [("w", w_nk), ("c", rand(n, seed=5))])


def sparse_layers(model, shapes):
    return cc.compile(model, input_shapes=shapes).meta["sparse_layers"]


@pytest.mark.parametrize("block", BLOCK_SHAPES)
def test_each_block_shape_is_detected_and_matches_onnxruntime(block):
    w = sparse_matrix(256, 128, block, 0.03 if block == (1, 1) else 0.1, seed=block[0] + block[1])
    model = gemm_model(w)
    assert_matches(model, {"a": rand(1, 128)})
    (layer,) = sparse_layers(model, {"a": (1, 128)})
    assert layer["block"] == f"{block[0]}x{block[1]}"
    assert 0.0 < layer["density"] < 0.3 and layer["shape"] == [256, 128]


def test_matmul_weights_are_seen_as_outputs_by_inputs():
    """MatMul's B is (K, N): 8 consecutive K of one output are a 1x8 block of W^T."""
    w_kn = sparse_matrix(128, 256, (1, 8), 0.1).T.copy()
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [1, 256])], [("y", np.float32, [1, 128])], [("w", w_kn)])
    assert_matches(model, {"a": rand(1, 256)})
    assert sparse_layers(model, {"a": (1, 256)})[0]["block"] == "1x8"


def test_rows_without_blocks_give_bias_and_activation():
    w = sparse_matrix(64, 64, (1, 8), 0.15)
    w[:10] = 0
    assert_matches(gemm_model(w), {"a": rand(1, 64)})


def test_dense_and_barely_sparse_layers_stay_dense():
    dense = rand(128, 256, seed=3)
    half = sparse_matrix(128, 256, (1, 8), 0.7)
    assert best_block_shape(dense, 1, 8) is None and best_block_shape(half, 1, 8) is None
    meta = cc.compile(gemm_model(dense), input_shapes={"a": (1, 256)}).meta
    assert meta["sparse_layers"] == [] and "SparseGemm" not in {k["op"] for k in meta["kernels"]}


def test_many_rows_of_a_prefer_the_dense_kernel():
    """At batch 64 the dense register tile reuses each weight 64 times: 70% zeros is not
    enough for sparse to win there, though it wins at batch 1."""
    w = sparse_matrix(256, 256, (1, 8), 0.3)
    assert best_block_shape(w, 1, 8) is not None
    assert best_block_shape(w, 64, 8) is None


def test_long_rows_loop_over_unrolled_bodies():
    w = sparse_matrix(32, 1024, (1, 4), 0.3)
    assert_matches(gemm_model(w, batch=2, relu=False), {"a": rand(2, 1024)})


def test_packing_keeps_every_nonzero_once():
    w = sparse_matrix(48, 64, (4, 1), 0.25)
    packed = pack_block_sparse(w, (4, 1))
    assert packed.nnz_blocks == sum(rows * count for count, rows in packed.groups)
    assert np.count_nonzero(packed.values) == np.count_nonzero(w)
    assert sorted(packed.rows) == list(range(12)) and packed.cols.dtype == np.uint8


def recurrent_model(op, density, block=(1, 8), hidden=128, inputs=64, batch=1, lbr=1):
    gates = {"GRU": 3, "LSTM": 4}[op]
    w = sparse_matrix(gates * hidden, inputs, block, density, seed=1)[None] * 0.3
    r = sparse_matrix(gates * hidden, hidden, block, density, seed=2)[None] * 0.3
    b = rand(1, 2 * gates * hidden, seed=3)
    names = ["x", "w", "r", "b", "", "h0"] + (["c0"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    graph_inputs = [("x", np.float32, [1, batch, inputs]), ("h0", np.float32, [1, batch, hidden])]
    if op == "LSTM":
        graph_inputs.append(("c0", np.float32, [1, batch, hidden]))
    model = make_model([helper.make_node(op, names, outs, **attrs)], graph_inputs,
                       [(o, np.float32, None) for o in outs], [("w", w), ("r", r), ("b", b)])
    feeds = {name: rand(*shape, seed=k) for k, (name, _, shape) in enumerate(graph_inputs)}
    return model, feeds


@pytest.mark.parametrize("op,batch,sparse", [("GRU", 1, {"WR", "Rn"}), ("LSTM", 1, {"WR"}),
                                             ("GRU", 2, {"WR", "Rn"})])  # small W_n: dense
def test_sparse_recurrent_step_matches_onnxruntime(op, batch, sparse):
    model, feeds = recurrent_model(op, 0.2, batch=batch)
    assert_matches(model, feeds)
    meta = cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()}).meta
    assert {layer["weight"].rsplit("_", 1)[1] for layer in meta["sparse_layers"]} == sparse
    assert op not in {k["op"] for k in meta["kernels"]}


def test_gru_without_linear_before_reset_keeps_the_recurrent_kernel():
    model, feeds = recurrent_model("GRU", 0.2, lbr=0)
    assert_matches(model, feeds)
    meta = cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()}).meta
    assert meta["sparse_layers"] == [] and "GRU" in {k["op"] for k in meta["kernels"]}


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_dense_recurrent_step_becomes_dense_products_split_over_threads(op, tmp_path):
    """Same as ONNX Runtime at 1 and 2 threads, nothing made sparse, and the products are
    PackedGemm (whose parallel loop gives each thread a fixed range of weight columns)."""
    model, feeds = recurrent_model(op, 1.0)
    compiled = cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()})
    kernels = {k["op"] for k in compiled.meta["kernels"]}
    assert compiled.meta["sparse_layers"] == []
    assert op not in kernels and {"PackedGemm", f"{op}StepGates"} <= kernels
    expected = ort_run(model, feeds)
    compiled.save(tmp_path)
    for threads in (1, 2):
        got = cc.load(tmp_path, threads=threads).run(feeds)
        for name, ref in expected.items():
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)


def test_sparse_wavernn_matches_onnxruntime():
    from compiler_core.runtime.benchmark import ort_outputs
    from tests.models import catalog
    path, feeds = catalog.model_path("wavernn_sparse80"), catalog.feeds("wavernn_sparse80")
    compiled = cc.compile(path, input_shapes=catalog.input_shapes("wavernn_sparse80"))
    got, want = compiled.run(feeds), ort_outputs(path, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5)
    layers = compiled.meta["sparse_layers"]
    assert len(layers) == 5 and {layer["block"] for layer in layers} == {"1x8"}


def test_inspect_names_the_block_sparse_weights():
    from compiler_core.inspect_model import inspect_model
    w = sparse_matrix(256, 128, (8, 1), 0.1)
    info = inspect_model(gemm_model(w))
    (entry,) = info["sparse_weights"]
    assert entry["weight"] == "w" and entry["block"] == "8x1" and entry["shape"] == [256, 128]
    assert inspect_model(gemm_model(rand(256, 128)))["sparse_weights"] == []


def test_step_in_a_run_time_if_branch_keeps_its_guards():
    """Silero VAD's shape: a single LSTM step inside one branch of an If on an input. The
    rewrite's nodes all run under the branch's guard; both branches match ONNX Runtime."""
    from onnx import TensorProto

    from compiler_core.frontend.onnx import import_model
    from compiler_core.passes.pipeline import run_pipeline

    hidden, inputs = 16, 8
    step = helper.make_node("LSTM", ["x3", "W", "R", "B", "", "h0", "c0"], ["", "h1", "c1"],
                            hidden_size=hidden)
    then_b = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["x3"]), step,
         helper.make_node("Squeeze", ["h1", "axes"], ["out"])], "then", [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, hidden))])
    else_b = helper.make_graph(
        [helper.make_node("Squeeze", ["h0", "axes"], ["out"])], "else", [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, hidden))])
    model = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
        [("c", np.bool_, ()), ("x", np.float32, (1, inputs)), ("h0", np.float32, (1, 1, hidden)),
         ("c0", np.float32, (1, 1, hidden))], [("y", np.float32, (1, hidden))],
        [("axes", np.array([0], np.int64)), ("W", rand(1, 4 * hidden, inputs, seed=1)),
         ("R", rand(1, 4 * hidden, hidden, seed=2)), ("B", rand(1, 8 * hidden, seed=3))])
    graph = run_pipeline(import_model(model), 3)
    gates = [n for n in graph.nodes if n.op == "LSTMStepGates"]
    assert len(gates) == 1 and gates[0].guards and "LSTM" not in {n.op for n in graph.nodes}
    assert all(n.guards == gates[0].guards for n in graph.nodes if n.op == "PackedGemm")
    feeds = {"x": rand(1, inputs, seed=4), "h0": rand(1, 1, hidden, seed=5),
             "c0": rand(1, 1, hidden, seed=6)}
    for cond in (True, False):
        assert_matches(model, {"c": np.array(cond), **feeds})
