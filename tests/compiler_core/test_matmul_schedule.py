"""A MatMul (both operands computed: an attention's products) carries its register tiles as
its schedule (kernels/matmul.default_matmul_tiles), which the autotuner may replace."""
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.kernels import schedule
from compiler_core.kernels.matmul import (GemmShape, GemmTiles, default_matmul_tiles,
                                          default_tiles, matmul_space)
from compiler_core.passes.pipeline import run_pipeline
from compiler_core.runtime.loaded_model import load

from .helpers import make_model, ort_run, rand

F = np.float32
X86 = "x86_64-unknown-linux-gnu"
AVX512 = MachineSpec(X86, "znver4", "+avx512f,+avx512vl,+avx2,+fma")
AVX2 = MachineSpec(X86, "znver3", "+avx2,+fma")


def _product(a_shape, b_shape, dtype=F):
    """Y = relu(A B + bias): the epilogue runs on the tiles."""
    n = b_shape[-1]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]),
             helper.make_node("Add", ["p", "bias"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    inputs = [("a", dtype, a_shape), ("b", dtype, b_shape), ("bias", dtype, (n,))]
    return make_model(nodes, inputs, [("y", dtype, None)])


def _matmul_node(model):
    return next(n for n in run_pipeline(import_model(model), 3).nodes if n.op == "MatMul")


@pytest.mark.parametrize("spec", [AVX512, AVX2])
def test_the_default_is_the_kernels_own_tiles(spec):
    """The untuned compile runs the tiles emit_gemm picks without a schedule."""
    for n in (16, 32, 70):
        node = _matmul_node(_product((2, 3, 40, 50), (2, 3, 50, n)))
        lanes = spec.vector_bits // 32
        assert default_matmul_tiles(node, spec) == default_tiles(GemmShape(40, n, 50), lanes)


def test_a_product_of_one_column_tile_takes_k_in_chunks_whose_slice_of_b_stays_in_l1():
    """An attention's P V (a head 32 wide, k 384): on AVX-512 one tile of 2 vectors, whose
    48 KB slice of B over all of k every row block would read from L2, so k goes in 2
    chunks of 192 (24 KB); AVX2's tile of 16 columns keeps all of k (24 KB). A product
    wider than one tile keeps the kernel's tiles."""
    p_v = _matmul_node(_product((1, 12, 384, 384), (1, 12, 384, 32)))
    wide = _matmul_node(_product((1, 12, 384, 384), (1, 12, 384, 64)))
    assert default_matmul_tiles(p_v, AVX512) == GemmTiles(6, 32, 192, 512)
    assert default_matmul_tiles(p_v, AVX2) == default_tiles(GemmShape(384, 32, 384), 8)
    assert default_matmul_tiles(wide, AVX512) == default_tiles(GemmShape(384, 64, 384), 16)
    assert default_matmul_tiles(p_v, AVX512) in matmul_space(p_v, AVX512)


def test_products_off_the_float32_tiles_keep_the_kernel_defaults():
    integers = _matmul_node(_product((9, 20), (20, 24), np.int32))
    few_columns = _matmul_node(_product((9, 20), (20, 3)))
    for node in (integers, few_columns):
        assert default_matmul_tiles(node, AVX512) is None and matmul_space(node, AVX512) == []


def test_every_candidate_keeps_its_accumulators_within_the_registers():
    node = _matmul_node(_product((2, 37, 300), (2, 300, 70)))
    for spec in (AVX512, AVX2):
        lanes = spec.vector_bits // 32
        space = matmul_space(node, spec)
        assert default_matmul_tiles(node, spec) in space
        for t in space:
            vectors = -(-t.nr // lanes)
            assert t.mr * vectors <= spec.vector_registers - vectors - 1, t
        assert {t.kc for t in space} == {128, 256, 300}


@pytest.mark.parametrize("a_shape, b_shape", [((2, 37, 300), (2, 300, 20)),  # k in chunks
                                              ((3, 1, 29, 45), (1, 2, 45, 70))])  # broadcast
def test_every_candidate_of_the_search_space_is_right(a_shape, b_shape, monkeypatch):
    """Each schedule the autotuner may pick, compiled into the model, matches ORT at one and
    two threads."""
    model = _product(a_shape, b_shape)
    feeds = {"a": rand(*a_shape, seed=1), "b": rand(*b_shape, seed=2),
             "bias": rand(b_shape[-1], seed=3)}
    expected = ort_run(model, feeds)["y"]
    space = matmul_space(_matmul_node(model), host_spec())
    assert len(space) > 4
    for tiles in space:
        monkeypatch.setitem(schedule.DEFAULTS, "MatMul", lambda n, spec, t=tiles: t)
        art = cc.compile(model)
        with tempfile.TemporaryDirectory() as tmp:
            directory = art.save(tmp)
            for threads in (1, 2):
                got = load(directory, threads=threads).run(feeds)["y"]
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=str(tiles))


def test_the_lowering_follows_the_nodes_tiles(monkeypatch, tmp_path):
    """Two schedules of one product are two different kernels."""
    model = _product((2, 37, 300), (2, 300, 20))
    code = []
    for tiles in (GemmTiles(4, 16, 128, 64), GemmTiles(12, 20, 300, 20)):
        monkeypatch.setitem(schedule.DEFAULTS, "MatMul", lambda n, spec, t=tiles: t)
        assert _matmul_node(model).schedule == tiles
        code.append((cc.compile(model).save(tmp_path / str(tiles.mr)) / "model.so").read_bytes())
    assert code[0] != code[1]
