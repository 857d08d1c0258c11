"""MatMul/Gemm with constant weights: packed panels, register tiles, edges, epilogues, threads."""
import dataclasses
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.ir import Value
from compiler_core.kernels.packed_gemm import default_gemm_schedule, gemm_space, pack_panels, \
    plain_gemm_schedule

from .helpers import AVX2, AVX512, assert_matches, make_model, packed_gemm_node, rand


@pytest.mark.parametrize("m,k,n", [(1, 64, 10), (5, 7, 3), (13, 33, 50), (64, 300, 130),
                                   (7, 1030, 17), (2, 3, 4)])
def test_matmul_by_constant_matches(m, k, n):
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [m, k])], [("y", np.float32, [m, n])],
                       [("w", rand(k, n, seed=1))])
    assert_matches(model, {"a": rand(m, k)})


def test_batched_left_operand_folds_into_rows():
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [2, 3, 24])], [("y", np.float32, [2, 3, 20])],
                       [("w", rand(24, 20, seed=1))])
    got = assert_matches(model, {"a": rand(2, 3, 24)})
    assert got["y"].shape == (2, 3, 20)


@pytest.mark.parametrize("c_shape,beta", [((20,), 0.5), ((1, 20), 1.0), ((9, 20), 1.0), (None, 1.0)])
def test_gemm_bias_residual_alpha_and_relu(c_shape, beta):
    inputs = ["a", "w"] + (["c"] if c_shape else [])
    nodes = [helper.make_node("Gemm", inputs, ["g"], alpha=1.5, beta=beta, transB=1),
             helper.make_node("Relu", ["g"], ["y"])]
    inits = [("w", rand(20, 33, seed=1))]
    feeds = {"a": rand(9, 33)}
    graph_inputs = [("a", np.float32, [9, 33])]
    if c_shape == (9, 20):
        graph_inputs.append(("c", np.float32, list(c_shape)))
        feeds["c"] = rand(*c_shape, seed=3)
    elif c_shape:
        inits.append(("c", rand(*c_shape, seed=2)))
    model = make_model(nodes, graph_inputs, [("y", np.float32, [9, 20])], inits)
    assert_matches(model, feeds)


def test_two_threads_give_the_same_result():
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [100, 200])], [("y", np.float32, [100, 70])],
                       [("w", rand(200, 70, seed=1))])
    art = cc.compile(model)
    a = rand(100, 200)
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        one = cc.load(d, threads=1).run({"a": a})["y"]
        two = cc.load(d, threads=2).run({"a": a})["y"]
    np.testing.assert_array_equal(one, two)


def test_every_schedule_in_the_space_is_correct():
    """A sample of the autotuner's space: every candidate must compute the same product."""
    node = packed_gemm_node(23, 70, 45)
    space = gemm_space(node, host_spec())
    assert default_gemm_schedule(node, host_spec()) is not None and len(space) > 20
    a = rand(23, 70)
    want = a @ node.inputs[1].const
    for sched in space[::max(1, len(space) // 12)]:
        y = _run_with_schedule(node, sched, a)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=str(sched))


def _run_with_schedule(node, sched, a):
    from compiler_core.codegen.standalone import KernelLibrary
    from compiler_core.kernels import lower_node
    packed = dataclasses.replace(node, schedule=sched, attrs={"packed": True})
    panels = pack_panels(node.inputs[1].const, sched)
    packed.inputs = [node.inputs[0], Value("p", panels.shape, np.float32, const=panels),
                     None, None]
    lib = KernelLibrary([lower_node(packed, "k", host_spec())])
    y = np.zeros(node.outputs[0].shape, np.float32)
    lib(0, a, panels, y)
    return y


@pytest.mark.parametrize("cpu,rows", [("sapphirerapids", 12), ("emeraldrapids", 12),
                                      ("rocketlake", 12), ("znver4", 8), ("znver5", 8),
                                      ("znver3", 6)])
def test_intel_two_fma_cores_take_tiles_of_twelve_rows_two_vectors_wide(cpu, rows):
    spec = MachineSpec("x86_64-unknown-linux-gnu", cpu, AVX2 if cpu == "znver3" else AVX512)
    ffn = default_gemm_schedule(packed_gemm_node(384, 64, 1536), spec)
    assert (ffn.mr, ffn.nr) == (rows, 2)
    assert ffn.mc % ffn.mr == 0
    narrow = default_gemm_schedule(packed_gemm_node(384, 64, spec.vector_bits // 32), spec)
    assert (narrow.mr, narrow.nr) == (6 if cpu == "znver3" else 8, 1)


@pytest.mark.parametrize("m", [12, 23, 130])
def test_twelve_row_tiles_are_right_on_every_edge(m):
    node = packed_gemm_node(m, 70, 45)
    lanes = host_spec().vector_bits // 32
    sched = dataclasses.replace(default_gemm_schedule(node, host_spec()), mr=12, nr=2,
                                mc=60, nc=-(-45 // (2 * lanes)))
    a = rand(m, 70)
    np.testing.assert_allclose(_run_with_schedule(node, sched, a), a @ node.inputs[1].const,
                               rtol=1e-4, atol=1e-4)


def test_panels_hold_columns_in_tile_order():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    sched = dataclasses.replace(default_gemm_schedule(packed_gemm_node(8, 3, 4), host_spec()), nr=1,
                                lanes=2)
    p = pack_panels(w, sched)
    assert p.shape == (2, 3, 2)
    np.testing.assert_array_equal(p[1, :, :], w[:, 2:4])


def test_avx2_long_reductions_of_many_rows_take_whole_k_and_a_panel_an_item():
    """The plain rule (these products take Strassen's by default: test_strassen.py)."""
    avx2 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", AVX2)
    ffn_out = plain_gemm_schedule(packed_gemm_node(384, 1536, 384), avx2)
    assert (ffn_out.kc, ffn_out.mc, ffn_out.nc, ffn_out.rows_outer) == (1536, 384, 1, False)
    one_panel = plain_gemm_schedule(packed_gemm_node(384, 1536, 16), avx2)  # rows split for threads
    assert (one_panel.kc, one_panel.mc, one_panel.nc) == (1536, 96, 1)
    for old in (plain_gemm_schedule(packed_gemm_node(384, 384, 1536), avx2),  # A's slice fits L1
                plain_gemm_schedule(packed_gemm_node(128, 1536, 384), avx2),  # few rows
                plain_gemm_schedule(packed_gemm_node(384, 1536, 384),
                                    MachineSpec(avx2.triple, "znver4", AVX512))):
        assert old.kc == 384 and old.mc <= 96 and not old.rows_outer


@pytest.mark.parametrize("m,n,nc", [(301, 100, 3), (40, 100, 7), (13, 16, 1)])
def test_row_tiles_outside_the_panels_are_right_on_every_edge(m, n, nc):
    node = packed_gemm_node(m, 40, n)
    sched = dataclasses.replace(default_gemm_schedule(node, host_spec()), nr=2, mc=24, nc=nc,
                                rows_outer=True)
    a = rand(m, 40)
    np.testing.assert_allclose(_run_with_schedule(node, sched, a), a @ node.inputs[1].const,
                               rtol=1e-4, atol=1e-4)
