"""Strassen's seven half-size products for MatMul/Gemm with constant weights (kernels/strassen.py)."""
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.kernels import strassen
from compiler_core.kernels.packed_gemm import default_gemm_schedule, gemm_space

from .helpers import AVX2, AVX512, make_model, packed_gemm_node, rand


@pytest.fixture
def strassen_on_this_host(monkeypatch):
    """The compiled tests take Strassen on any host (the default: Zen 4 and AVX2 cores)."""
    from compiler_core.kernels import packed_gemm
    monkeypatch.setattr(packed_gemm, "_strassen_measured", lambda spec: True)


def _dense_model(m, k, n, act=None):
    """y = act(a @ w + b + r): bias and residual fused into the product's epilogue."""
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["q"]),
             helper.make_node("Add", ["q", "r"], ["z"] if act else ["y"])]
    if act:
        nodes.append(helper.make_node(act, ["z"], ["y"]))
    w, b = rand(k, n, seed=1), rand(n, seed=2)
    model = make_model(nodes, [("a", np.float32, [m, k]), ("r", np.float32, [m, n])],
                       [("y", np.float32, [m, n])], [("w", w), ("b", b)])
    return model, w, b


def _reference(a, w, b, r, act):
    y = a.astype(np.float64) @ w.astype(np.float64) + b + r
    return np.maximum(y, 0) if act == "Relu" else y


def _run(artifact, feeds, threads):
    with tempfile.TemporaryDirectory() as d:
        artifact.save(d)
        return cc.load(d, threads=threads).run(feeds)["y"]


def test_the_seven_products_add_up_to_the_whole():
    """The table itself, in numpy: PRODUCTS' A sums, W combinations and signed writes."""
    a, w = rand(6, 8, seed=3).astype(np.float64), rand(8, 10, seed=4).astype(np.float64)
    m2, k2, n2 = 3, 4, 5

    def quad(x, q, r, c):
        return x[q[0] * r:(q[0] + 1) * r, q[1] * c:(q[1] + 1) * c]
    y = np.zeros((6, 10))
    for p, wc in zip(strassen.PRODUCTS, strassen.weight_combinations(w)):
        product = sum(s * quad(a, q, m2, k2) for s, q in p.a) @ wc
        for q, sign in p.outs:
            quad(y, q, m2, n2)[...] += sign * product
    np.testing.assert_allclose(y, a @ w, rtol=1e-5, atol=1e-5)  # W's sums are float32


def test_each_quadrant_is_started_once_and_finished_once():
    writes = [w for i in range(len(strassen.PRODUCTS)) for w in strassen.writes(i)]
    for q in (strassen.Q11, strassen.Q12, strassen.Q21, strassen.Q22):
        mine = [w for w in writes if w.quadrant == q]
        assert sum(w.first for w in mine) == 1 and sum(w.last for w in mine) == 1
        assert mine[0].first and mine[-1].last and mine[0].sign == 1


# 130 x 390 by 398: halves of 65 rows (an edge row tile) and 199 columns (a partial panel)
@pytest.mark.usefixtures("strassen_on_this_host")
@pytest.mark.parametrize("m,k,n", [(128, 384, 384), (130, 390, 398), (256, 1536, 384)])
@pytest.mark.parametrize("act", [None, "Relu"])
def test_strassen_products_match_the_product_at_one_and_two_threads(m, k, n, act):
    model, w, b = _dense_model(m, k, n, act)
    artifact = cc.compile(model)
    assert [layer["gemm"] for layer in artifact.meta["strassen_layers"]] == \
        [{"M": m, "N": n, "K": k}]
    a, r = rand(m, k, seed=5), rand(m, n, seed=6)
    want = _reference(a, w, b, r, act)
    one = _run(artifact, {"a": a, "r": r}, 1)
    np.testing.assert_array_equal(one, _run(artifact, {"a": a, "r": r}, 2))
    # its rounding error, against float64: about 1e-6 of the largest output here
    assert np.abs(one - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.usefixtures("strassen_on_this_host")
def test_avx2_code_matches_too():
    model, w, b = _dense_model(130, 390, 398, "Relu")
    artifact = cc.compile(model, target="x86-64-v3")
    assert artifact.meta["strassen_layers"]
    a, r = rand(130, 390, seed=11), rand(130, 398, seed=12)
    want = _reference(a, w, b, r, "Relu")
    assert np.abs(_run(artifact, {"a": a, "r": r}, 2) - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.usefixtures("strassen_on_this_host")
def test_rounding_error_stays_within_a_few_times_the_plain_products(monkeypatch):
    from compiler_core.kernels import packed_gemm
    model, w, b = _dense_model(256, 1536, 384)
    a, r = rand(256, 1536, seed=7), rand(256, 384, seed=8)
    want = _reference(a, w, b, r, None)

    def error():
        return np.abs(_run(cc.compile(model), {"a": a, "r": r}, 1) - want).max()
    strassen_error = error()
    monkeypatch.setattr(packed_gemm, "_strassen_pays", lambda *_: False)
    plain_error = error()
    assert strassen_error <= 4 * plain_error, (strassen_error, plain_error)


ZEN4 = MachineSpec("x86_64-unknown-linux-gnu", "znver4", AVX512)


@pytest.mark.parametrize("m,k,n,expected", [(128, 384, 384, True), (384, 1536, 384, True),
                                            (64, 384, 384, False), (128, 256, 1024, False),
                                            (129, 384, 384, False), (1, 4096, 4096, False)])
def test_zen4_takes_strassen_for_big_even_products_only(m, k, n, expected):
    assert default_gemm_schedule(packed_gemm_node(m, k, n), ZEN4).strassen is expected


@pytest.mark.parametrize("cpu,features", [("sapphirerapids", AVX512), ("znver5", AVX512)])
def test_cores_it_was_not_measured_on_keep_the_plain_product(cpu, features):
    spec = MachineSpec("x86_64-unknown-linux-gnu", cpu, features)
    assert not default_gemm_schedule(packed_gemm_node(384, 1536, 384), spec).strassen
    assert any(s.strassen for s in gemm_space(packed_gemm_node(384, 1536, 384), spec))


def test_avx2_cores_take_strassen_with_groups_of_panels_within_a_small_l2():
    """BERT-128's FFN input on AVX2: 768 columns in panels of 16; an item's panels of its
    192 k stay within 256 KB, where Zen 4 takes all of them (590 KB)."""
    avx2 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", AVX2)
    s = default_gemm_schedule(packed_gemm_node(128, 384, 1536), avx2)
    assert s.strassen and s.rows_outer
    assert s.kc * s.nc * s.width * 4 <= 256 * 1024 < s.kc * 768 * 4
    zen4 = default_gemm_schedule(packed_gemm_node(128, 384, 1536), ZEN4)
    assert zen4.nc * zen4.width == 768


def test_strassen_items_are_many_enough_for_the_threads():
    """BERT-128's FFN input, 128 x 384 by 1536: halves of 64 rows in one row item."""
    s = default_gemm_schedule(packed_gemm_node(128, 384, 1536), ZEN4)
    assert s.strassen
    panels = -(-768 // s.width)
    assert -(-64 // s.mc) * -(-panels // s.nc) >= 6


def test_the_search_space_offers_both_forms():
    space = gemm_space(packed_gemm_node(128, 384, 384), host_spec())
    assert any(s.strassen for s in space) and any(not s.strassen for s in space)
    assert not any(s.strassen for s in gemm_space(packed_gemm_node(23, 70, 45), host_spec()))


@pytest.mark.usefixtures("strassen_on_this_host")
@pytest.mark.parametrize("weight_dtype", ["float16", "int8"])
def test_reduced_precision_weights(weight_dtype):
    """float16 combinations of W are widened like any weights; int8 runs the plain product
    (its tile rounds rows of A, not sums of them)."""
    model, w, b = _dense_model(128, 384, 384)
    artifact = cc.compile(model, weight_dtype=weight_dtype)
    assert bool(artifact.meta["strassen_layers"]) is (weight_dtype == "float16")
    a, r = rand(128, 384, seed=9), rand(128, 384, seed=10)
    want = _reference(a, w, b, r, None)
    got = _run(artifact, {"a": a, "r": r}, 2)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
