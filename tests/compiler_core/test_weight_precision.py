"""Reduced-precision weights (weight_dtype float16 / int8): correctness within tolerance, the
measured error in meta.json, refusals, and code that follows the target's features."""
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec
from compiler_core.passes.weight_precision import check_weight_dtype, quantize_int8
from tests.models import catalog

from .helpers import disassembly, make_model, ort_run, rand

SPEECH = Path(__file__).parents[1] / "models" / "speech_lstm_gru.onnx"


def test_int8_quantization_is_per_output_channel_and_symmetric():
    w = rand(3, 50, 8, seed=4)
    w[:, :, 5] *= 100  # one loud channel must not coarsen the others
    w[:, :, 2] = 0
    q, scale = quantize_int8(w, axis=1)
    assert q.dtype == np.int8 and scale.shape == (3, 8) and (q[:, :, 2] == 0).all()
    assert np.abs(q).max() == 127 and q.min() >= -127
    err = np.abs(q * scale[:, None, :] - w)
    assert (err <= scale[:, None, :] / 2 + 1e-7).all()


@pytest.mark.parametrize("weight_dtype,tol", [("float16", 1e-3), ("int8", 1e-2)])
def test_sampling_net_stays_close_to_float32(weight_dtype, tol):
    path, feeds = catalog.model_path("wavernn"), catalog.feeds("wavernn")
    art = cc.compile(str(path), catalog.input_shapes("wavernn"), weight_dtype=weight_dtype,
                     sample_inputs=feeds)
    want = ort_run(_load(path), feeds)
    got = art.run(feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=tol, err_msg=name)
        assert np.abs(got[name] - ref).max() > 0, f"{name}: {weight_dtype} weights changed nothing"
    report = art.meta["weight_precision"]
    assert report["weight_dtype"] == weight_dtype
    # the GRU step's three products (passes/sparse_weights.py) and the two FC layers
    assert [layer["op"] for layer in report["layers"]] == ["PackedGemm"] * 5
    errors = report["accuracy"]["outputs"]
    assert set(errors) == {"probs", "h_next"} and report["accuracy"]["inputs"] == "given"
    for name, e in errors.items():  # measured against our float32 build: close to ORT's
        assert e["max_abs_err"] == pytest.approx(np.abs(got[name] - want[name]).max(),
                                                 rel=0.1, abs=1e-6)
        assert 0 < e["max_rel_err"] < 0.05


def test_float32_reports_nothing_and_keeps_its_weights():
    art = cc.compile(str(catalog.model_path("wavernn")), catalog.input_shapes("wavernn"))
    assert "weight_precision" not in art.meta
    half = cc.compile(str(catalog.model_path("wavernn")), catalog.input_shapes("wavernn"),
                      weight_dtype="float16")
    assert half.meta["stats"]["weights_bytes"] < 0.55 * art.meta["stats"]["weights_bytes"]
    assert half.meta["weight_precision"]["accuracy"]["inputs"] == "random (seed 0)"


@pytest.mark.parametrize("weight_dtype", ["float16", "int8"])
def test_lstm_gru_and_matmul_with_reduced_weights(weight_dtype):
    model = _load(SPEECH)
    feeds = {"features": rand(1, 50, 40, seed=2)}
    got = cc.compile(model, weight_dtype=weight_dtype).run(feeds)
    for name, ref in ort_run(model, feeds).items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=2e-2, err_msg=name)


@pytest.mark.parametrize("m,k,n", [(1, 64, 10), (13, 1030, 50), (9, 33, 20)])
def test_int8_gemm_epilogue_with_bias_chunks_and_edges(m, k, n):
    """Scale then bias then Relu, also when k is split into chunks (partial sums in Y)."""
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["g"], alpha=1.5, transB=1),
             helper.make_node("Relu", ["g"], ["y"])]
    model = make_model(nodes, [("a", np.float32, [m, k])], [("y", np.float32, [m, n])],
                       [("w", rand(n, k, seed=1)), ("c", rand(n, seed=2))])
    feeds = {"a": rand(m, k)}
    art = cc.compile(model, weight_dtype="int8", sample_inputs=feeds)
    ref = ort_run(model, feeds)["y"]
    got = art.run(feeds)["y"]
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=0, atol=0.02 * scale)
    assert art.meta["weight_precision"]["accuracy"]["outputs"]["y"]["max_rel_err"] < 0.02


def test_int8_gemm_rounds_each_row_of_a_on_its_own_scale():
    """Rows of A far apart in magnitude (and an all-zero one) keep their relative accuracy:
    A is rounded to int16 per row before the integer product."""
    k, n = 300, 40
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [4, k])], [("y", np.float32, [4, n])],
                       [("w", rand(k, n, seed=3))])
    a = rand(4, k, seed=5)
    a[0] *= 1e4
    a[1] *= 1e-4
    a[2] = 0
    got = cc.compile(model, weight_dtype="int8").run({"a": a})["y"]
    ref = ort_run(model, {"a": a})["y"]
    for row in (0, 1, 3):
        np.testing.assert_allclose(got[row], ref[row], rtol=0,
                                   atol=0.02 * np.abs(ref[row]).max(), err_msg=f"row {row}")
    assert (got[2] == 0).all()


def test_int8_gemm_keeps_nan_in_its_row():
    """A NaN in a row of A makes that row's outputs NaN, as float weights would, and no
    other row's."""
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [3, 20])], [("y", np.float32, [3, 8])],
                       [("w", rand(20, 8, seed=3))])
    a = rand(3, 20, seed=6)
    a[1, 7] = np.nan
    got = cc.compile(model, weight_dtype="int8").run({"a": a})["y"]
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()


def test_unknown_weight_dtype_is_refused():
    with pytest.raises(cc.CompileError, match="unknown weight_dtype 'bfloat16'.*float16, int8"):
        cc.compile(str(catalog.model_path("wavernn")), weight_dtype="bfloat16")


@pytest.mark.parametrize("weight_dtype,lacking", [("float16", "F16C"), ("int8", "AVX2")])
def test_target_without_the_conversions_is_refused(weight_dtype, lacking):
    old_x86 = MachineSpec("x86_64-unknown-linux-gnu", "westmere", "+sse4.2,+popcnt,-f16c")
    with pytest.raises(cc.CompileError, match=f"needs {lacking}.*westmere"):
        check_weight_dtype(weight_dtype, old_x86)
    check_weight_dtype(weight_dtype, MachineSpec("aarch64-unknown-linux-gnu", "cortex-a72",
                                                 "+neon"))


@pytest.mark.parametrize("target,register", [("x86-64-v3", "%ymm"), ("x86-64-v4", "%zmm")])
@pytest.mark.parametrize("weight_dtype,instruction", [("float16", "vcvtph2ps"),
                                                      ("int8", "vpmaddwd")])
def test_weights_are_widened_in_the_targets_registers(target, register, weight_dtype,
                                                      instruction):
    """AVX2 widens 8 lanes at a time (ymm), AVX-512 16 (zmm); int8 weights are multiplied
    as integers, pairs of products summed by one instruction. The accuracy of a target
    this machine may not run is measured on a host build."""
    art = cc.compile(str(catalog.model_path("wavernn")), catalog.input_shapes("wavernn"),
                     target=target, weight_dtype=weight_dtype)
    widening = [line for line in disassembly(art) if instruction in line]
    assert any(register in line for line in widening), widening[:5]
    assert art.meta["weight_precision"]["accuracy"]["measured_on"] in (target, "native")


@pytest.mark.parametrize("weight_dtype,instruction", [("float16", "fcvtl"), ("int8", "smull")])
def test_arm_widens_with_neon(weight_dtype, instruction):
    objdump = shutil.which("aarch64-linux-gnu-objdump")
    if objdump is None:
        pytest.skip("no aarch64 binutils here")
    art = cc.compile(str(catalog.model_path("wavernn")), catalog.input_shapes("wavernn"),
                     target="aarch64", weight_dtype=weight_dtype)
    widening = [line for line in disassembly(art, objdump) if instruction in line]
    assert any(".4s" in line for line in widening), widening[:5]


def _load(path):
    import onnx
    return onnx.load(str(path))


def test_cli_weight_dtype_reports_the_error_and_refuses_unknown_ones(tmp_path):
    from .test_cli import cli
    nodes = [helper.make_node("MatMul", ["a", "w"], ["y"])]
    model = make_model(nodes, [("a", np.float32, [2, 40])], [("y", np.float32, [2, 24])],
                       [("w", rand(40, 24, seed=1))])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.savez(tmp_path / "feeds.npz", a=rand(2, 40, seed=3))
    r = cli("compile", "m.onnx", "-o", "out", "--weight-dtype", "int8", "--sample-inputs",
            "feeds.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "int8 weights in 1 layers" in r.stdout and "y: max_abs_err" in r.stdout
    meta = (tmp_path / "out" / "meta.json").read_text()
    assert '"max_rel_err"' in meta and '"inputs": "given"' in meta
    r = cli("compile", "m.onnx", "-o", "out2", "--weight-dtype", "int4", cwd=tmp_path)
    assert r.returncode == 2 and "invalid choice: 'int4'" in r.stderr


@pytest.mark.parametrize("op,gates", [("GRU", 3), ("LSTM", 4)])
def test_int8_bidirectional_recurrent_with_partial_sweeps(op, gates):
    """Input 7 and hidden 5: sweeps of four rows and the rows left over, both directions."""
    seq, batch, inp, hidden = 3, 2, 7, 5
    w = rand(2, gates * hidden, inp, seed=1)
    r = rand(2, gates * hidden, hidden, seed=2)
    b = rand(2, 2 * gates * hidden, seed=3)
    node = helper.make_node(op, ["x", "w", "r", "b"], ["y", "y_h"], hidden_size=hidden,
                            direction="bidirectional")
    model = make_model([node], [("x", np.float32, [seq, batch, inp])],
                       [("y", np.float32, [seq, 2, batch, hidden]),
                        ("y_h", np.float32, [2, batch, hidden])],
                       [("w", w), ("r", r), ("b", b)])
    feeds = {"x": rand(seq, batch, inp, seed=4)}
    art = cc.compile(model, weight_dtype="int8", sample_inputs=feeds)
    for name, ref in ort_run(model, feeds).items():
        np.testing.assert_allclose(art.run(feeds)[name], ref, rtol=0, atol=0.03, err_msg=name)
    layer, = art.meta["weight_precision"]["layers"]
    assert layer["weights"] == w.size + r.size


@pytest.mark.parametrize("block", [(1, 8), (8, 1)])
@pytest.mark.parametrize("weight_dtype", ["float16", "int8"])
def test_block_sparse_layers_store_their_blocks_reduced(block, weight_dtype):
    """SparseGemm's nonzero blocks: int8 scales per output, whichever way a block lies."""
    rng = np.random.default_rng(5)
    n, k = 64, 256
    keep = rng.random((n // block[0], k // block[1])) < 0.1
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32) * np.kron(keep, np.ones(block))
    w[3] *= 50  # one loud output must keep its own scale
    nodes = [helper.make_node("Gemm", ["a", "w"], ["y"], transB=1)]
    model = make_model(nodes, [("a", np.float32, [1, k])], [("y", np.float32, [1, n])],
                       [("w", w.astype(np.float32))])
    feeds = {"a": rand(1, k, seed=6)}
    art = cc.compile(model, weight_dtype=weight_dtype, sample_inputs=feeds)
    [layer] = art.meta["weight_precision"]["layers"]
    assert layer["op"] == "SparseGemm" and layer["weights"] == keep.sum() * 8
    err = np.abs(art.run(feeds)["y"] - ort_run(model, feeds)["y"])[0]
    # per output: at most half its own scale step per weight (float16: 2^-11 relative)
    step = np.abs(w).max(axis=1) / 127 if weight_dtype == "int8" else np.abs(w).max(axis=1) / 1024
    bound = 0.5 * step * ((w != 0) @ np.abs(feeds["a"][0])) + 1e-5
    assert (err <= bound).all(), (err / bound).max()
    assert err.max() > 0


def test_sparse_sampling_net_with_int8_blocks_stays_close():
    path, feeds = catalog.model_path("wavernn_sparse80"), catalog.feeds("wavernn_sparse80")
    art = cc.compile(str(path), catalog.input_shapes("wavernn_sparse80"), weight_dtype="int8",
                     sample_inputs=feeds)
    assert {layer["op"] for layer in art.meta["weight_precision"]["layers"]} == {"SparseGemm"}
    got = art.run(feeds)
    for name, ref in ort_run(_load(path), feeds).items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-2, err_msg=name)
