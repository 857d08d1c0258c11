"""Depthwise convs in the blocked layout (kernels/depthwise_blocked.py) and the channel
block a region takes (passes/blocked_layout.block_lanes)."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.kernels import conv, depthwise
from compiler_core.passes import blocked_layout
from compiler_core.passes.pipeline import split_at_schedules

from .helpers import AVX2, AVX512, make_model, ort_run, rand

LANES = blocked_layout.block_lanes(host_spec())[-1]
TRIPLE = "x86_64-unknown-linux-gnu"


@pytest.fixture
def every_region_blocked(monkeypatch):
    """Regions of any size, and every conv that can be blocked is: the small shapes here
    reach every edge case the default leaves plain."""
    monkeypatch.setattr(blocked_layout, "blocked_candidate",
                        lambda node, spec, lanes: conv.blocked_eligible(node, lanes))
    monkeypatch.setattr(blocked_layout, "BLOCKED_MIN_FLOPS_PER_ELEMENT", 0)


def _inverted_residual(c, hw, kernel, stride, pads, residual=False, act="HardSwish",
                       bias=True):
    """A mobile net's block: 1x1 conv and ReLU, the depthwise conv (bias, act), 1x1 conv;
    `residual`: the depthwise result plus the first conv's (stride 1 only)."""
    k = kernel
    inits = [("w1", rand(c, c, 1, 1, seed=1) * 0.3), ("wd", rand(c, 1, k, k, seed=2) * 0.3),
             ("w2", rand(c, c, 1, 1, seed=4) * 0.3)] + ([("bd", rand(c, seed=3))] if bias else [])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wd", "bd"][:2 + bias], ["d"], group=c,
                              kernel_shape=[k, k], strides=[stride, stride], pads=list(pads))]
    last = "d"
    if residual:
        nodes.append(helper.make_node("Add", [last, "ar"], ["s"]))
        last = "s"
    if act:
        nodes.append(helper.make_node(act, [last], ["h"]))
        last = "h"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["y"]))
    out = [(hw + pads[i] + pads[i + 2] - k) // stride + 1 for i in (0, 1)]
    return make_model(nodes, [("x", np.float32, [1, c, hw, hw])],
                      [("y", np.float32, [1, c, *out])], inits)


def _run(artifact, feeds, threads):
    with tempfile.TemporaryDirectory() as d:
        artifact.save(d)
        return cc.load(d, threads=threads).run(feeds)["y"]


# planes with edge tiles on both sides, tiny planes that are all edge, strides 1 and 2,
# end padding only (TF's SAME), no padding, a residual and a ReLU epilogue
CASES = [
    dict(c=2 * LANES, hw=13, kernel=3, stride=1, pads=(1, 1, 1, 1)),
    dict(c=LANES, hw=17, kernel=5, stride=2, pads=(2, 2, 2, 2)),
    dict(c=3 * LANES, hw=16, kernel=3, stride=2, pads=(0, 0, 1, 1)),
    dict(c=LANES, hw=9, kernel=3, stride=1, pads=(0, 0, 0, 0)),
    dict(c=LANES, hw=7, kernel=5, stride=1, pads=(2, 2, 2, 2), residual=True),
    dict(c=2 * LANES, hw=3, kernel=3, stride=1, pads=(1, 1, 1, 1), act="Relu"),
    dict(c=LANES, hw=30, kernel=3, stride=1, pads=(1, 1, 1, 1), residual=True, act=None),
    dict(c=LANES, hw=10, kernel=3, stride=2, pads=(1, 1, 1, 1), bias=False),
]


@pytest.mark.usefixtures("every_region_blocked")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['c']}-{c['hw']}-k{c['kernel']}"
                         f"-s{c['stride']}-{''.join(map(str, c['pads']))}")
@pytest.mark.parametrize("positions", [4, 8, 12])
def test_blocked_depthwise_matches_the_plain_build_at_one_and_two_threads(case, positions,
                                                                         monkeypatch):
    monkeypatch.setattr(depthwise, "BLOCKED_POSITIONS", positions)
    model = _inverted_residual(case["c"], case["hw"], case["kernel"], case["stride"],
                               case["pads"], case.get("residual", False),
                               case.get("act", "HardSwish"), case.get("bias", True))
    artifact = cc.compile(model)
    ops = [layer["op"] for layer in artifact.meta["blocked_layers"]]
    assert ops == ["ConvBlocked", "DepthwiseBlocked", "ConvBlocked"]
    feeds = {"x": rand(1, case["c"], case["hw"], case["hw"], seed=5)}
    want = cc.compile(model, opt_level=0).run(feeds)["y"]
    one = _run(artifact, feeds, 1)
    np.testing.assert_array_equal(one, _run(artifact, feeds, 2))
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.usefixtures("every_region_blocked")
def test_avx2_code_matches_too():
    model = _inverted_residual(16, 11, 3, 2, (1, 1, 1, 1))
    artifact = cc.compile(model, target="x86-64-v3")
    assert [layer["block"] for layer in artifact.meta["blocked_layers"]] == [8, 8, 8]
    feeds = {"x": rand(1, 16, 11, 11, seed=6)}
    want = cc.compile(model, opt_level=0).run(feeds)["y"]
    np.testing.assert_allclose(_run(artifact, feeds, 2), want, rtol=1e-4,
                               atol=1e-5 * np.abs(want).max())


def test_a_marked_depthwise_convs_default_and_search_space_are_blocked():
    node = _marked(_inverted_residual(96, 56, 3, 1, (1, 1, 1, 1)),
                   MachineSpec(TRIPLE, "znver4", AVX512), "DepthwiseConv")
    assert node.attrs["layout"] == "blocked" and node.schedule.blocked
    space = depthwise.depthwise_space(node, host_spec())
    assert node.schedule in space and all(s.blocked for s in space)


def _marked(model, spec, op):
    """The first `op` node after the layout choice and the default schedules for spec."""
    graph = import_model(model, None)
    for p in split_at_schedules(3, spec)[0]:
        graph = p(graph)
    return next(n for n in graph.nodes if n.op == op)


def test_block_lanes_follow_the_fma_ports():
    assert blocked_layout.block_lanes(MachineSpec(TRIPLE, "znver4", AVX512)) == (16, 8)
    assert blocked_layout.block_lanes(MachineSpec(TRIPLE, "sapphirerapids", AVX512)) == (16,)
    assert blocked_layout.block_lanes(MachineSpec(TRIPLE, "znver3", AVX2)) == (8,)


@pytest.mark.usefixtures("every_region_blocked")
@pytest.mark.parametrize("channels, cpu, block", [(48, "znver4", 16), (24, "znver4", 8),
                                                  (24, "sapphirerapids", None)])
def test_a_region_takes_the_widest_block_its_channels_fill(channels, cpu, block):
    spec = MachineSpec(TRIPLE, cpu, AVX512)
    model = _inverted_residual(channels, 56, 3, 1, (1, 1, 1, 1))
    for op in ("Conv", "DepthwiseConv"):
        assert _marked(model, spec, op).attrs.get("block") == block


@pytest.mark.usefixtures("every_region_blocked")
def test_a_region_in_blocks_of_8_needs_twice_the_work(monkeypatch):
    model = _inverted_residual(24, 56, 3, 1, (1, 1, 1, 1))
    graph = import_model(model, None)
    znver4, znver3 = MachineSpec(TRIPLE, "znver4", AVX512), MachineSpec(TRIPLE, "znver3", AVX2)
    for p in split_at_schedules(3, znver4)[0]:
        if p.__name__ == "choose_blocked_layout":
            break
        graph = p(graph)
    (region,) = blocked_layout._regions(graph, blocked_layout.region_members(graph, znver4))
    work = blocked_layout.flops_per_converted_element(region, graph)
    # blocks of 8 are half of znver4's vectors and all of znver3's: the same bar on both
    for threshold, block in ((work / 1.5, None), (work / 2.5, 8)):
        monkeypatch.setattr(blocked_layout, "BLOCKED_MIN_FLOPS_PER_ELEMENT", threshold)
        assert _marked(model, znver4, "DepthwiseConv").attrs.get("block") == block
        assert _marked(model, znver3, "DepthwiseConv").attrs.get("block") == block


def _mobilenet_v2_blocks(batch: int, hw: int):
    """Two of MobileNetV2's inverted residuals (24 -> 144 -> 24 channels, ReLU6, the second
    adding its input), then a strided one to 32 channels: the default layout choice."""
    nodes, inits, last, c = [], [], "x", 24
    for i, (expand, stride, out) in enumerate([(144, 1, 24), (144, 1, 24), (144, 2, 32)]):
        inits += [(f"we{i}", rand(expand, c, 1, 1, seed=10 * i) * 0.2),
                  (f"wd{i}", rand(expand, 1, 3, 3, seed=10 * i + 1) * 0.3),
                  (f"bd{i}", rand(expand, seed=10 * i + 2)),
                  (f"wp{i}", rand(out, expand, 1, 1, seed=10 * i + 3) * 0.2),
                  (f"lo{i}", np.array(0.0, np.float32)), (f"hi{i}", np.array(6.0, np.float32))]
        nodes += [helper.make_node("Conv", [last, f"we{i}"], [f"e{i}"]),
                  helper.make_node("Clip", [f"e{i}", f"lo{i}", f"hi{i}"], [f"er{i}"]),
                  helper.make_node("Conv", [f"er{i}", f"wd{i}", f"bd{i}"], [f"d{i}"],
                                   group=expand, kernel_shape=[3, 3], strides=[stride] * 2,
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"d{i}", f"lo{i}", f"hi{i}"], [f"dr{i}"]),
                  helper.make_node("Conv", [f"dr{i}", f"wp{i}"], [f"p{i}"])]
        if i == 1:
            nodes.append(helper.make_node("Add", [f"p{i}", last], [f"s{i}"]))
        last, c = (f"s{i}" if i == 1 else f"p{i}"), out
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return make_model(nodes, [("x", np.float32, [batch, 24, hw, hw])],
                      [("y", np.float32, [batch, 32, hw // 2, hw // 2])], inits)


def test_mobilenet_v2_blocks_in_a_batch_match_onnxruntime():
    model = _mobilenet_v2_blocks(2, 28)
    artifact = cc.compile(model)
    if LANES == 8:  # channels of 24 and 144 fill blocks of 8 only
        assert "DepthwiseBlocked" in [layer["op"] for layer in artifact.meta["blocked_layers"]]
    feeds = {"x": rand(2, 24, 28, 28, seed=9)}
    want = ort_run(model, feeds)["y"]
    np.testing.assert_allclose(_run(artifact, feeds, 2), want, rtol=1e-4,
                               atol=1e-5 * np.abs(want).max())
