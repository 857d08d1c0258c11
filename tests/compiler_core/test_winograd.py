"""Winograd F(4x4, 3x3) convolution (kernels/winograd.py, passes/winograd_convs.py): the
transform matrices, the algorithm's float32 error, compiled convs of every edge case
against ONNX Runtime at 1 and 2 threads, and the per-layer choice."""
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import host_spec
from compiler_core.kernels import winograd as W
from compiler_core.kernels import schedule
from compiler_core.targets import get_target
from compiler_core.kernels.conv import (WINOGRAD_MAX_ITEM_COLUMNS, conv_space,
                                        default_conv_schedule, winograd_schedule,
                                        winograd_tile_rows, winograd_tile_size)

from .helpers import make_model, ort_run, rand
from .test_conv_schedule import assert_close, conv_model, conv_node, feeds_for

F = np.float32


def direct64(x, w):
    """A 'valid' 3x3 correlation in float64."""
    h, wd = x.shape[2] - 2, x.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", x[:, :, i:i + h, j:j + wd].astype(np.float64),
                           w[:, :, i, j].astype(np.float64))
    return y


@pytest.mark.parametrize("m", [2, 4])
def test_transforms_compute_a_1d_correlation_exactly(m):
    at, g, bt = W.transform_matrices(m)
    rng = np.random.default_rng(0)
    d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
    expected = np.correlate(d, k, "valid")
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), expected, rtol=1e-12, atol=1e-12)


def test_classic_points_give_lavins_matrices():
    at, g, bt = W.transform_matrices(4, (0.0, 1.0, -1.0, 2.0, -2.0))
    np.testing.assert_allclose(g[1], [-1 / 6] * 3)
    np.testing.assert_allclose(bt[0], [4, 0, -5, 0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(at[3], [0, 1, -1, 8, -8, 1])


def test_points_with_no_exact_algorithm_are_refused():
    with pytest.raises(ValueError):
        W.transform_matrices(4, (0.0, 1.0, -1.0, 2.0))


def test_float32_error_is_small_and_smaller_than_the_classic_points():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 128, 18, 18)).astype(F)
    w = (rng.standard_normal((32, 128, 3, 3)) / np.sqrt(9 * 128)).astype(F)
    ref = direct64(x, w)
    scale = np.abs(ref).max()
    ours = np.abs(W.reference_winograd(x, w, 4) - ref).max() / scale
    W.transform_matrices.cache_clear()
    try:
        classic_points = W.POINTS[4]
        W.POINTS[4] = (0.0, 1.0, -1.0, 2.0, -2.0)
        classic = np.abs(W.reference_winograd(x, w, 4) - ref).max() / scale
    finally:
        W.POINTS[4] = classic_points
        W.transform_matrices.cache_clear()
    assert ours < 5e-6 and ours < classic


def winograd_layers(model):
    return cc.compile(model).meta["winograd_layers"]


# F(4x4) planes have at least 6x6 tiles: two vectors of 16 lanes (winograd_tile_size)
CASES = {  # enough channels for Winograd on every target (conv._default_winograd)
    "56x56, whole tiles": dict(n=1, c=64, oc=64, hw=56, k=3),
    "odd plane, partial edge tiles": dict(n=1, c=40, oc=72, hw=23, k=3),
    "batch of 2 with residual": dict(n=2, c=32, oc=72, hw=24, k=3, residual=True),
    "no padding": dict(n=1, c=32, oc=64, hw=26, k=3, pad=0),
    "no activation": dict(n=1, c=72, oc=36, hw=23, k=3, relu=False),
    "13x13 plane, F(2x2)": dict(n=1, c=64, oc=48, hw=13, k=3),
    "13x13 plane with residual, F(2x2)": dict(n=1, c=32, oc=64, hw=13, k=3, residual=True),
}


def _zen_f4_on_small_planes(c: int, oc: int) -> bool:
    """Where the host takes F(4x4) in one-vector tiles over F(2x2)'s planes of too few
    tiles (conv._default_winograd_schedule): Zen 4, and Zen 5 with 32 or more channels on
    each side and 64 on one."""
    cpu = host_spec().cpu
    return cpu == "znver4" or (cpu == "znver5" and min(c, oc) >= 32 and max(c, oc) >= 64)


@pytest.mark.parametrize("case", CASES)
def test_winograd_convs_match_onnxruntime_at_one_and_two_threads(case):
    model = conv_model(**CASES[case])
    feeds = feeds_for(model)
    art = cc.compile(model)
    shape = CASES[case]
    m = 4 if "F(2x2)" not in case or _zen_f4_on_small_planes(shape["c"], shape["oc"]) else 2
    assert [layer["algorithm"] for layer in art.meta["winograd_layers"]] == [f"F({m}x{m},3x3)"]
    expected = ort_run(model, feeds)["y"]
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        one, two = (cc.load(d, threads=t).run(feeds)["y"] for t in (1, 2))
    assert_close(one, expected, case)
    np.testing.assert_array_equal(one, two)


def test_only_big_stride_1_3x3_convs_use_winograd():
    spec = host_spec()
    assert default_conv_schedule(conv_node(conv_model(1, 64, 64, 56, 3)), spec).winograd == 4
    # 2x2 or 3x3 tiles of 4x4 outputs are too few: tiles of 2x2 outputs
    assert winograd_tile_size(conv_node(conv_model(1, 512, 512, 7, 3)), 8) == 2
    assert winograd_tile_size(conv_node(conv_model(1, 256, 256, 10, 3)), 8) == 2
    small_plane = 4 if _zen_f4_on_small_planes(256, 256) else 2
    assert default_conv_schedule(conv_node(conv_model(1, 256, 256, 13, 3)), spec).winograd == small_plane
    for small in (conv_model(1, 8, 64, 56, 3),            # few input channels
                  conv_model(1, 512, 512, 5, 3),          # 9 tiles even of 2x2 outputs
                  conv_model(1, 64, 64, 56, 3, stride=2),
                  conv_model(1, 64, 64, 56, 1),
                  conv_model(1, 64, 64, 56, 3, group=2)):
        assert default_conv_schedule(conv_node(small), spec).winograd == 0


@pytest.mark.parametrize("lanes,winograd", [(8, 4), (16, 2)])
def test_f4x4_wants_two_vectors_of_tiles(lanes, winograd):
    """4x4 tiles of 4x4 outputs (14x14) fill two 8-lane vectors but one of 16 lanes."""
    assert winograd_tile_size(conv_node(conv_model(1, 256, 256, 14, 3)), lanes) == winograd
    assert winograd_tile_size(conv_node(conv_model(1, 128, 128, 28, 3)), lanes) == 4


@pytest.mark.parametrize("target,winograd", [("x86-64-v3", 2), ("x86-64-v4", 0)])
def test_small_planes_take_f2x2_or_channel_vectors_by_register_count(target, winograd):
    """16 registers: F(2x2); 32: tiles of 7 positions x 2 vectors of channels beat it."""
    spec = get_target(target).spec
    for hw in (7, 10):
        sched = default_conv_schedule(conv_node(conv_model(1, 256, 256, hw, 3)), spec)
        assert (sched.winograd, bool(sched.lanes)) == (winograd, not winograd)


def test_the_tuner_may_choose_either_algorithm():
    space = conv_space(conv_node(conv_model(1, 64, 64, 28, 3)), host_spec())
    kinds = {s.winograd for s in space}
    assert kinds == {0, 2, 4}


@pytest.mark.parametrize("rows,per_row", [(14, 14), (7, 7), (4, 4), (10, 10), (28, 28), (56, 56)])
def test_items_are_wide_gemms_with_little_padding(rows, per_row):
    r = winograd_tile_rows(rows, per_row)
    assert -(-rows // r) * r - rows <= max(1, rows // 6)
    assert min(48, rows * per_row) <= r * per_row <= WINOGRAD_MAX_ITEM_COLUMNS


@pytest.mark.parametrize("channels,columns", [(128, 100), (128, 40), (64, 98), (256, 25),
                                              (3, 7), (512, 16)])
def test_a_tiles_values_at_the_positions_fall_in_distinct_cache_sets(channels, columns):
    """A tile's transforms touch one value per position, position_stride apart: each must
    be in an L1 set of its own (64 sets of 64-byte lines, 4 KB apart), or they evict each
    other (128 channels x 100 columns unpadded: 50 KB apart, all in two sets)."""
    step = W.position_stride(channels, columns)
    assert channels * columns <= step < channels * columns + 2 * W.LINE
    sets = {(e * step * 4 // 64) % 64 for e in range(36)}
    assert len(sets) == 36


@pytest.mark.parametrize("phases", [False, True])
@pytest.mark.parametrize("case", ["odd plane, partial edge tiles", "batch of 2 with residual"])
def test_both_parallel_layouts_match_onnxruntime(case, phases, monkeypatch):
    """Items as the parallel loop (big planes) or each phase a parallel loop (small ones),
    with items of two tile rows so that there are several, the last one padded."""
    model = conv_model(**CASES[case])
    feeds = feeds_for(model)
    sched = winograd_schedule(conv_node(model), 4, 8, tile_rows=2, phases=phases)
    monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec: sched)
    expected = ort_run(model, feeds)["y"]
    art = cc.compile(model)
    assert art.meta["winograd_layers"][0]["parallel"] == ("phases" if phases else "items")
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        for threads in (1, 2):
            assert_close(cc.load(d, threads=threads).run(feeds)["y"], expected, f"{threads} threads")


@pytest.mark.parametrize("c,oc,hw", [(40, 72, 23),   # F(4x4): the last tiles' rows cropped
                                      (64, 48, 13),   # F(2x2) but on Zen 4
                                      (64, 64, 20)])
def test_silu_and_a_residual_fuse_into_the_conv_and_sweep_its_rows(c, oc, hw):
    """A heavy activation runs over each item's finished rows of a channel (the residual
    already added): at one and two threads the same as ONNX Runtime."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["y"])]
    inits = [("w", rand(oc, c, 3, 3, seed=1) / 24), ("b", rand(oc, seed=2))]
    model = make_model(nodes, [("x", F, (1, c, hw, hw)), ("r", F, (1, oc, hw, hw))],
                       [("y", F, (1, oc, hw, hw))], inits)
    feeds = {"x": rand(1, c, hw, hw, seed=3), "r": rand(1, oc, hw, hw, seed=4)}
    art = cc.compile(model)
    kernels = [k for k in art.meta["kernels"] if k["op"] != "ConvPad"]
    assert [k["op"] for k in kernels] == ["WinogradConv"]
    assert len(kernels[0]["onnx_nodes"]) == 4
    expected = ort_run(model, feeds)["y"]
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        for threads in (1, 2):
            assert_close(cc.load(d, threads=threads).run(feeds)["y"], expected, f"{threads}T")


PADDINGS = {  # (pads [top, left, bottom, right], input h x w)
    "no padding": ([0, 0, 0, 0], (18, 21)),
    "one all round": ([1, 1, 1, 1], (17, 22)),
    "uneven": ([0, 2, 1, 0], (19, 16)),
    "two on top, none below": ([2, 1, 0, 1], (20, 20)),
    "a plane shorter than a patch": ([1, 1, 1, 1], (4, 11)),
}


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("padding", PADDINGS)
def test_the_input_is_read_in_place_with_its_padding_as_zeros(padding, m, monkeypatch):
    """No ConvPad copy before the kernel: patches over the padding (top, bottom, sides) and
    rows of tiles past the output (the last item's padding, items of 3 tile rows) read
    zeros."""
    pads, (h, w) = PADDINGS[padding]
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads)]
    model = make_model(nodes, [("x", F, (2, 24, h, w))], [("y", F, (2, 40, oh, ow))],
                       [("w", rand(40, 24, 3, 3, seed=1)), ("b", rand(40, seed=2))])
    feeds = feeds_for(model)
    sched = winograd_schedule(conv_node(model), m, 8, tile_rows=3)
    _check_alone_against_onnxruntime(model, feeds, sched, monkeypatch, f"{padding}, F({m}x{m})")


def _check_alone_against_onnxruntime(model, feeds, sched, monkeypatch, label, target="native"):
    """The model compiled with `sched` for its conv, one WinogradConv kernel and nothing
    else (its input read in place), run at 1 and 2 threads against ONNX Runtime."""
    monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec: sched)
    art = cc.compile(model, target=target)
    assert [k["op"] for k in art.meta["kernels"]] == ["WinogradConv"]
    expected = ort_run(model, feeds)["y"]
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        for threads in (1, 2):
            assert_close(cc.load(d, threads=threads).run(feeds)["y"], expected,
                         f"{label}, {threads} threads")


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])
@pytest.mark.parametrize("m,hw", [(4, (18, 71)), (2, (9, 37))])
@pytest.mark.parametrize("epilogue", ["residual and Relu", "residual and SiLU"])
def test_transforms_take_a_vector_of_tiles_at_a_time(m, hw, epilogue, target, monkeypatch):
    """The transforms run over a vector's worth of a tile row's tiles at once: planes
    wide enough for whole vectors of tiles on 16 and 8 lanes, a last vector partly
    filled, the last tile cropped to its columns and the last tile row to its rows, and
    the residual read back from the interleaved rows of y."""
    h, w = hw
    act = [helper.make_node("Relu", ["a"], ["y"])] if "Relu" in epilogue else \
        [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["y"])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["a"]), *act]
    model = make_model(nodes, [("x", F, (2, 24, h, w)), ("r", F, (2, 40, h, w))],
                       [("y", F, (2, 40, h, w))],
                       [("w", rand(40, 24, 3, 3, seed=1) / 12), ("b", rand(40, seed=2))])
    feeds = {"x": rand(2, 24, h, w, seed=3), "r": rand(2, 40, h, w, seed=4)}
    lanes = get_target(target).spec.vector_bits // 32
    sched = winograd_schedule(conv_node(model), m, lanes, tile_rows=2)
    _check_alone_against_onnxruntime(model, feeds, sched, monkeypatch, f"F({m}x{m}) on {target}",
                                     target)
