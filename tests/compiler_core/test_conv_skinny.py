"""Convolutions with fewer than SKINNY_COLUMNS output columns (kernels/conv_skinny.py): vector lanes
over output channels, weights packed in panels. Against ONNX Runtime, at 1 and 2 threads."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model
from compiler_core.passes.pipeline import run_pipeline
from compiler_core.targets import get_target

from .helpers import assert_matches, make_model, ort_run, rand

F = np.float32


def conv1d_model(n, c, oc, length, k, stride=1, pad=0, group=1, act=None, residual=False,
                 bias=True, weights_as_input=False):
    out = (length + 2 * pad - k) // stride + 1
    inputs = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Conv", inputs, ["c"], pads=[pad, pad], strides=[stride],
                              group=group, kernel_shape=[k])]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["s"]))
        last = "s"
    nodes.append(helper.make_node(act or "Identity", [last], ["y"]))
    feeds_spec = [("x", F, (n, c, length))]
    if residual:
        feeds_spec.append(("r", F, (n, oc, out)))
    w = rand(oc, c // group, k, seed=1, low=-0.2, high=0.2)
    consts = [("b", rand(oc, seed=2))] if bias else []
    if weights_as_input:
        feeds_spec.append(("w", F, w.shape))
    else:
        consts.append(("w", w))
    model = make_model(nodes, feeds_spec, [("y", F, (n, oc, out))], consts)
    feeds = {name: rand(*shape, seed=5 + j) for j, (name, _, shape) in enumerate(feeds_spec)}
    if weights_as_input:
        feeds["w"] = w
    return model, feeds


CASES = {
    # Silero VAD's STFT: one channel, 258 outputs (not a multiple of the panel width)
    "stft-like, stride 128": dict(n=1, c=1, oc=258, length=576, k=256, stride=128),
    "3 taps, padded, relu": dict(n=1, c=129, oc=128, length=3, k=3, pad=1, act="Relu"),
    "strided, 2 columns": dict(n=1, c=64, oc=40, length=4, k=3, stride=2, pad=1),
    "one column, sigmoid": dict(n=1, c=32, oc=17, length=3, k=3, act="Sigmoid"),
    "batch 3 with residual": dict(n=3, c=24, oc=36, length=5, k=3, stride=2, residual=True),
    "grouped": dict(n=2, c=32, oc=48, length=3, k=3, pad=1, group=4, bias=False),
    "fewer channels than a vector": dict(n=1, c=8, oc=3, length=2, k=1),
    # Silero VAD over a sequence: 8 frames, 5 STFT columns each
    "8 frames of 5 columns": dict(n=8, c=1, oc=258, length=768, k=256, stride=128),
    "7 columns, two passes of positions": dict(n=2, c=40, oc=70, length=9, k=3, act="Relu"),
}


def _compiled_conv(model, spec=None):
    graph = run_pipeline(import_model(model), 3, spec)
    return next(node for node in graph.nodes if node.op == "Conv")


@pytest.mark.parametrize("case", CASES)
def test_matches_onnxruntime_at_one_and_two_threads(case):
    model, feeds = conv1d_model(**CASES[case])
    assert "skinny_width" in _compiled_conv(model).attrs
    expected = ort_run(model, feeds)["y"]
    art = cc.compile(model)
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        one, two = (cc.load(d, threads=t).run(feeds)["y"] for t in (1, 2))
    tol = 1e-4 + 1e-3 * np.abs(expected).max()
    np.testing.assert_allclose(one, expected, rtol=1e-4, atol=tol)
    np.testing.assert_array_equal(one, two)


def test_weights_that_are_an_input_keep_the_dot_products():
    model, feeds = conv1d_model(1, 16, 20, 3, 3, weights_as_input=True)
    assert "skinny_width" not in _compiled_conv(model).attrs
    assert_matches(model, feeds)


def test_panels_hold_whole_vectors_of_output_channels():
    model, _ = conv1d_model(**CASES["stft-like, stride 128"])
    node = _compiled_conv(model)
    width = node.attrs["skinny_width"]
    assert width % node.schedule.lanes == 0
    # (group, panels, K, width): every one of the 258 channels, zeros past them
    assert node.inputs[1].shape == (1, -(-258 // width), 256, width)


def conv_nd_model(n, c, oc, plane, k, stride=1, pad=0, group=1, act=None, residual=False):
    """A Conv over a small N-d plane with constant weights and bias, then an optional
    residual Add and activation (SiLU as x * Sigmoid(x))."""
    rank = len(plane)
    out = [(d + 2 * pad - k) // stride + 1 for d in plane]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 2 * rank,
                              strides=[stride] * rank, group=group, kernel_shape=[k] * rank)]
    last = "c"
    feeds_spec = [("x", F, (n, c, *plane))]
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["s"]))
        feeds_spec.append(("r", F, (n, oc, *out)))
        last = "s"
    if act == "SiLU":
        nodes += [helper.make_node("Sigmoid", [last], ["sig"]),
                  helper.make_node("Mul", [last, "sig"], ["y"])]
    else:
        nodes.append(helper.make_node(act or "Identity", [last], ["y"]))
    consts = [("w", rand(oc, c // group, *[k] * rank, seed=1, low=-0.2, high=0.2)),
              ("b", rand(oc, seed=2))]
    model = make_model(nodes, feeds_spec, [("y", F, (n, oc, *out))], consts)
    return model, {name: rand(*shape, seed=5 + j) for j, (name, _, shape) in enumerate(feeds_spec)}


# small planes, long reductions: output channels over the lanes, tiles along output rows
# (each fills fewer than 85% of the lanes along positions, on AVX2 and AVX-512 alike)
PLANE_CASES = {
    "5x5 at 7x7, channels not whole panels, relu, batch 2":
        dict(n=2, c=32, oc=72, plane=(7, 7), k=5, pad=2, act="Relu"),
    "3x3 stride 2 to 7x7 with residual": dict(n=1, c=24, oc=64, plane=(14, 14), k=3, stride=2,
                                              pad=1, residual=True),
    "1x1 at 5x5 with SiLU, channels not whole panels":
        dict(n=1, c=256, oc=72, plane=(5, 5), k=1, act="SiLU"),
    "grouped 3x3": dict(n=1, c=64, oc=96, plane=(7, 7), k=3, pad=1, group=2),
    "3-d plane": dict(n=1, c=8, oc=40, plane=(5, 5, 5), k=3, pad=1),
}


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])  # 32 and 16 registers here
@pytest.mark.parametrize("case", PLANE_CASES)
def test_small_planes_put_channels_over_the_lanes(case, target):
    model, feeds = conv_nd_model(**PLANE_CASES[case])
    node = _compiled_conv(model, get_target(target).spec)
    assert "skinny_width" in node.attrs
    assert len(node.outputs) == 1  # no wide scratch: real outputs only
    expected = ort_run(model, feeds)["y"]
    art = cc.compile(model, target=target)
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        one, two = (cc.load(d, threads=t).run(feeds)["y"] for t in (1, 2))
    np.testing.assert_allclose(one, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    np.testing.assert_array_equal(one, two)


def test_wide_planes_keep_positions_over_the_lanes():
    model, _ = conv_nd_model(1, 128, 64, (16, 16), 1)
    assert "skinny_width" not in _compiled_conv(model).attrs


def test_output_rows_walk_the_q_grid():
    from compiler_core.ir.loops import Const
    from compiler_core.kernels.conv_skinny import output_rows, row_pieces
    rows = output_rows([3, 4, 5], [6, 7, 8])  # a 3-d output in a padded q grid
    assert (rows.count, rows.width) == (12, 5)
    offsets = [_evaluate(rows.q_offset(Const(r))) for r in range(12)]
    assert offsets == [a * 56 + b * 8 for a in range(3) for b in range(4)]
    assert row_pieces(13, 12) == (7, 1, 6) and row_pieces(7, 12) == (7, 1, 0)
    assert row_pieces(56, 12) == (12, 4, 8)


def _evaluate(expr):
    """An index expression of constants, folded the way the code generator would."""
    from compiler_core.ir.loops import Bin, Const
    if isinstance(expr, Const):
        return expr.value
    assert isinstance(expr, Bin)
    a, b = _evaluate(expr.a), _evaluate(expr.b)
    ops = {"add": int.__add__, "mul": int.__mul__, "floordiv": int.__floordiv__,
           "mod": int.__mod__}
    return ops[expr.op](a, b)


def test_tiles_span_whole_rows_of_a_small_plane_where_two_fit():
    from compiler_core.kernels.conv_skinny import output_rows, row_tile
    assert row_tile(7, 7, 2, 32) == 14      # 2 rows x 2 vectors: 28 accumulators
    assert row_tile(7, 7, 1, 32) == 28      # 4 rows
    assert row_tile(3, 7, 1, 32) == 21      # no more rows than the plane has
    assert row_tile(7, 7, 2, 16) == 6       # AVX2: a piece of one row
    assert row_tile(0, 7, 1, 32) == 7       # a 3-d output: rows are not evenly spaced
    assert row_tile(13, 13, 2, 32) == 12    # rows longer than half a tile
    assert output_rows([7, 7], [10, 9]).q_step == 9
    assert output_rows([3, 4, 5], [6, 7, 8]).q_step is None


@pytest.mark.parametrize("case", ["5x5 at 7x7, channels not whole panels, relu, batch 2",
                                  "3x3 stride 2 to 7x7 with residual"])
def test_every_channel_vector_tile_the_tuner_offers_is_correct(case, monkeypatch):
    """1 to 4 vectors per tile: whole rows of the plane per tile (4, 2 or 1 rows of 7
    with 32 registers, the last tile with the rows left) or pieces of one."""
    from compiler_core.codegen.target_machine import host_spec
    from compiler_core.kernels import conv, schedule
    model, feeds = conv_nd_model(**PLANE_CASES[case])
    node = _compiled_conv(model)
    expected = ort_run(model, feeds)["y"]
    spans = set()
    for vectors in range(1, 5):
        sched = conv.skinny_schedule(node, host_spec(), node.schedule.tiles, vectors)
        spans.add(sched.positions // 7)
        monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda n, spec, s=sched: s)
        with tempfile.TemporaryDirectory() as d:
            cc.compile(model).save(d)
            got = cc.load(d).run(feeds)["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max(),
                                   err_msg=str(sched))
    assert 2 in spans  # 2 rows per tile with 1 vector on AVX2, with 2 on AVX-512
