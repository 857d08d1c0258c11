"""The NCHW[x]c layout: the ConvBlocked kernel, the regions that take it, the rewrite."""
from __future__ import annotations

import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.analysis.node_cost import node_flops
from compiler_core.codegen.target_machine import host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.kernels import conv, conv_blocked
from compiler_core.passes import blocked_layout
from compiler_core.passes.pipeline import run_pipeline, split_at_schedules

from .helpers import make_model, rand

LANES = host_spec().vector_bits // 32


@pytest.fixture
def every_conv_blocked(monkeypatch):
    """Every conv that can be blocked is, in regions of any size: the kernel tests reach
    shapes (few channels, channel vectors' small planes) the default leaves plain."""
    monkeypatch.setattr(blocked_layout, "blocked_candidate",
                        lambda node, spec, lanes: conv.blocked_eligible(node, lanes))
    monkeypatch.setattr(blocked_layout, "BLOCKED_MIN_FLOPS_PER_ELEMENT", 0)


def _conv_model(c, oc, hw, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                act=None, residual=False):
    """y = act(conv(x) + b [+ r]) on an NCHW input of c channels at hw x hw."""
    w, b = rand(oc, c, *kernel, seed=1) * 0.2, rand(oc, seed=2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kernel),
                              strides=list(strides), pads=list(pads), dilations=list(dilations))]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["s"]))
        last = "s"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    elif act == "SiLU":
        nodes += [helper.make_node("Sigmoid", [last], ["g"]),
                  helper.make_node("Mul", [last, "g"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    out = [(hw + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
           for d in (0, 1)]
    inputs = [("x", np.float32, [1, c, hw, hw])]
    return make_model(nodes, inputs + ([("r", np.float32, [1, oc, *out])] if residual else []),
                      [("y", np.float32, [1, oc, *out])], [("w", w), ("b", b)]), w, b, out


def _reference(x, w, b, strides, pads, dilations, act, r=None):
    """float64 direct convolution."""
    oc, c, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((1, oc, oh, ow)) + b.reshape(1, -1, 1, 1)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilations[0], j * dilations[1]
            patch = xp[:, :, r0:r0 + strides[0] * (oh - 1) + 1:strides[0],
                       c0:c0 + strides[1] * (ow - 1) + 1:strides[1]]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    if r is not None:
        y += r
    if act == "Relu":
        y = np.maximum(y, 0)
    elif act == "SiLU":
        y = y / (1 + np.exp(-y))
    return y


def _run(artifact, feeds, threads):
    with tempfile.TemporaryDirectory() as d:
        artifact.save(d)
        return cc.load(d, threads=threads).run(feeds)["y"]


# channels: whole panels of two vectors, and an odd count of vectors (a last panel of one);
# planes: rows split into pieces (40: 14 + 13 + 13), short rows two to a tile (7, and 7
# from 13 by stride 2)
CASES = [
    dict(c=2 * LANES, oc=4 * LANES, hw=40, kernel=(1, 1)),
    dict(c=LANES, oc=3 * LANES, hw=21, kernel=(3, 3), pads=(1, 1, 1, 1), act="Relu"),
    dict(c=2 * LANES, oc=2 * LANES, hw=17, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
         act="SiLU", residual=True),
    dict(c=LANES, oc=LANES, hw=7, kernel=(3, 3), pads=(1, 1, 1, 1), residual=True),
    dict(c=LANES, oc=2 * LANES, hw=13, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
    dict(c=3 * LANES, oc=2 * LANES, hw=28, kernel=(1, 1), strides=(2, 2)),
    # a last output row and column that lie in the end padding only
    dict(c=LANES, oc=2 * LANES, hw=8, kernel=(1, 1), strides=(2, 2), pads=(0, 0, 1, 1)),
    dict(c=LANES, oc=2 * LANES, hw=19, kernel=(5, 3), pads=(2, 0, 1, 2), dilations=(2, 1)),
]


@pytest.mark.usefixtures("every_conv_blocked")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['c']}-{c['oc']}-{c['hw']}-{c['kernel']}"
                         f"-s{c.get('strides', (1, 1))[0]}")
@pytest.mark.parametrize("split", ["columns", "rows"])
def test_blocked_conv_matches_the_direct_convolution_at_one_and_two_threads(case, split,
                                                                            monkeypatch):
    default = conv.blocked_schedule
    monkeypatch.setattr(conv, "blocked_schedule",
                        lambda base, node, spec: default(base, node, spec, split=split))
    strides, pads = case.get("strides", (1, 1)), case.get("pads", (0, 0, 0, 0))
    dilations, act = case.get("dilations", (1, 1)), case.get("act")
    model, w, b, out = _conv_model(case["c"], case["oc"], case["hw"], case["kernel"], strides,
                                   pads, dilations, act, case.get("residual", False))
    artifact = cc.compile(model)
    assert len(artifact.meta["blocked_layers"]) == 1
    feeds = {"x": rand(1, case["c"], case["hw"], case["hw"], seed=3)}
    if case.get("residual"):
        feeds["r"] = rand(1, case["oc"], *out, seed=4)
    want = _reference(feeds["x"], w, b, strides, pads, dilations, act, feeds.get("r"))
    one = _run(artifact, feeds, 1)
    np.testing.assert_array_equal(one, _run(artifact, feeds, 2))
    assert np.abs(one - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.usefixtures("every_conv_blocked")
@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3]],
                         ids=lambda c: f"{c['c']}-{c['oc']}-{c['hw']}-{c['kernel']}")
@pytest.mark.parametrize("vectors,positions", [(1, 2), (1, 5), (3, 3), (2, 4)])
def test_blocked_conv_in_tiles_of_fewer_positions_matches(case, vectors, positions,
                                                           monkeypatch):
    """The tuner's tiles of fewer positions than the registers hold (conv.blocked_positions):
    rows cut in other pieces, and short rows one to a tile."""
    default = conv.blocked_schedule
    monkeypatch.setattr(conv, "blocked_schedule", lambda base, node, spec: default(
        base, node, spec, vectors, positions=positions))
    pads = case.get("pads", (0, 0, 0, 0))
    model, w, b, out = _conv_model(case["c"], case["oc"], case["hw"], case["kernel"],
                                   pads=pads, act=case.get("act"),
                                   residual=case.get("residual", False))
    artifact = cc.compile(model)
    feeds = {"x": rand(1, case["c"], case["hw"], case["hw"], seed=3)}
    if case.get("residual"):
        feeds["r"] = rand(1, case["oc"], *out, seed=4)
    want = _reference(feeds["x"], w, b, (1, 1), pads, (1, 1), case.get("act"), feeds.get("r"))
    got = _run(artifact, feeds, 1)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.usefixtures("every_conv_blocked")
def test_avx2_code_matches_too():
    case = CASES[2]
    model, w, b, out = _conv_model(8 * 2, 8 * 3, 17, (3, 3), (2, 2), (1, 1, 1, 1),
                                   act="SiLU", residual=True)
    artifact = cc.compile(model, target="x86-64-v3")
    assert artifact.meta["blocked_layers"]
    feeds = {"x": rand(1, 16, 17, 17, seed=3), "r": rand(1, 24, *out, seed=4)}
    want = _reference(feeds["x"], w, b, case["strides"], case["pads"], (1, 1), "SiLU", feeds["r"])
    assert np.abs(_run(artifact, feeds, 2) - want).max() <= 1e-5 * np.abs(want).max()


def _chain(channels: int, hw: int, convs: int, squeeze: int | None = None, batch: int = 1):
    """A chain of 1x1 convs with ReLU, through a concat of two branches in the middle;
    `squeeze`: every other conv narrows to that many channels (SqueezeNet's fire modules:
    little work per element)."""
    nodes, inits, last, c = [], [], "x", channels
    for i in range(convs):
        oc = squeeze if squeeze and i % 2 == 0 else channels
        inits.append((f"w{i}", rand(oc, c, 1, 1, seed=i) * 0.1))
        nodes += [helper.make_node("Conv", [last, f"w{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        last, c = f"r{i}", oc
        if i == convs // 2:  # two branches concatenated over channels
            inits.append(("wb", rand(c, c, 1, 1, seed=99) * 0.1))
            nodes += [helper.make_node("Conv", [last, "wb"], ["branch"]),
                      helper.make_node("Concat", [last, "branch"], ["cat"], axis=1)]
            inits.append((f"wj{i}", rand(c, 2 * c, 1, 1, seed=98) * 0.1))
            nodes.append(helper.make_node("Conv", ["cat", f"wj{i}"], ["joined"]))
            last = "joined"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return make_model(nodes, [("x", np.float32, [batch, channels, hw, hw])],
                      [("y", np.float32, [batch, c, hw, hw])], inits)


def _final_graph(model):
    spec = host_spec()
    return run_pipeline(import_model(model, None), 3, spec)


def test_a_chain_of_wide_convs_stays_blocked_from_end_to_end():
    model = _chain(256, 28, 6, batch=2)
    graph = _final_graph(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("ConvBlocked") == 8
    assert ops.count("Transpose") == 2  # into the layout once, out of it once
    concat = next(n for n in graph.nodes if n.op == "Concat")
    assert len(concat.outputs[0].shape) == 5
    _compare(model, {"x": rand(2, 256, 28, 28, seed=7)})


def _compare(model, feeds):
    """The optimised build against the unoptimised one (plain layout, direct kernels)."""
    want = cc.compile(model, opt_level=0).run(feeds)["y"]
    got = cc.compile(model).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _scheduled(model):
    """The graph with its schedules, before the blocked layout is written out."""
    graph = import_model(model, None)
    for p in split_at_schedules(3, host_spec())[0]:
        graph = p(graph)
    return graph


def _region(model):
    """The graph as the layout choice sees it, and its one region."""
    graph = import_model(model, None)
    for p in split_at_schedules(3, host_spec())[0]:
        if p.__name__ == "choose_blocked_layout":
            break
        graph = p(graph)
    (region,) = blocked_layout._regions(graph, blocked_layout.region_members(graph, host_spec()))
    return graph, region


def test_regions_of_little_work_per_converted_element_stay_plain():
    model = _chain(32, 28, 4, squeeze=16)
    graph, region = _region(model)
    assert 0 < blocked_layout.flops_per_converted_element(region, graph) < \
        blocked_layout.BLOCKED_MIN_FLOPS_PER_ELEMENT
    assert not any(n.op == "ConvBlocked" for n in _final_graph(model).nodes)


def test_region_work_counts_each_conversion_once():
    graph, region = _region(_chain(256, 28, 6))
    flops = sum(node_flops(n) for n in region if n.op == "Conv")
    # x in, y out: 256 x 28 x 28 elements each
    assert blocked_layout.flops_per_converted_element(region, graph) == flops / (2 * 256 * 784)


def test_a_marked_convs_default_and_search_space_are_blocked():
    spec = host_spec()
    node = next(n for n in _scheduled(_chain(256, 28, 2)).nodes if n.op == "Conv")
    assert node.attrs["layout"] == "blocked" and node.schedule.blocked
    space = conv.conv_space(node, spec)
    assert space[0] == node.schedule and all(s.blocked for s in space)
    assert {(s.vectors, s.positions, s.split) for s in space} == \
        {(v, p, split) for v in (1, 2, 3) for p in conv.blocked_positions(node, spec, v)
         for split in ("columns", "rows")}
    assert len(space) == len(set(space))


def test_tiles_of_fewer_positions_are_offered_where_they_cut_the_rows_differently():
    spec = host_spec()
    node = next(n for n in _scheduled(_chain(256, 28, 2)).nodes if n.op == "Conv")
    for vectors in (1, 2, 3):
        positions = conv.blocked_positions(node, spec, vectors)
        most = min(conv.BLOCKED_MAX_POSITIONS, (spec.vector_registers - 1 - vectors) // vectors)
        assert positions[0] == most and positions == sorted(positions, reverse=True)
        cuts = [conv_blocked.row_pieces(28, p) if conv_blocked.row_span(28, p) == 1
                else conv_blocked.row_span(28, p) for p in positions]
        assert len(set(cuts)) == len(cuts)  # each builds another kernel
        skipped = set(range(2, most + 1)) - set(positions)
        assert all(conv_blocked.row_pieces(28, p) in cuts for p in skipped)


def test_the_blocked_conv_counts_the_conv_flops():
    plain = _scheduled(_chain(256, 28, 2))
    want = [node_flops(n) for n in plain.nodes if n.op == "Conv"]
    # (before operator fusion, which may give them epilogues)
    blocked = blocked_layout.use_blocked_layout_for(host_spec())(plain)
    assert [node_flops(n) for n in blocked.nodes if n.op == "ConvBlocked"] == want


def test_grouped_and_odd_channel_convs_are_not_eligible():
    model, *_ = _conv_model(LANES + 1, 2 * LANES, 14, (3, 3), pads=(1, 1, 1, 1))
    graph = import_model(model, None)
    node = next(n for n in graph.nodes if n.op == "Conv")
    assert not conv.blocked_eligible(node, LANES)
    onnx.checker.check_model(model)


def _dense_block(channels: int, growth: int, hw: int, layers: int):
    """DenseNet's block: each layer reads the concat of all before it through an unfolded
    BatchNormalization and ReLU (1x1 conv, ReLU, 3x3 conv) and adds `growth` channels."""
    nodes, inits, cat, c = [], [], "x", channels
    for i in range(layers):
        inits += [(f"g{i}", rand(c, seed=10 * i) * 0.5 + 1), (f"be{i}", rand(c, seed=10 * i + 1)),
                  (f"m{i}", rand(c, seed=10 * i + 2)), (f"v{i}", np.abs(rand(c, seed=10 * i + 3)) + 0.5),
                  (f"wa{i}", rand(4 * growth, c, 1, 1, seed=10 * i + 4) * 0.1),
                  (f"wb{i}", rand(growth, 4 * growth, 3, 3, seed=10 * i + 5) * 0.05)]
        nodes += [helper.make_node("BatchNormalization", [cat, f"g{i}", f"be{i}", f"m{i}", f"v{i}"],
                                   [f"n{i}"]),
                  helper.make_node("Relu", [f"n{i}"], [f"a{i}"]),
                  helper.make_node("Conv", [f"a{i}", f"wa{i}"], [f"p{i}"]),
                  helper.make_node("Relu", [f"p{i}"], [f"q{i}"]),
                  helper.make_node("Conv", [f"q{i}", f"wb{i}"], [f"new{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Concat", [cat, f"new{i}"], [f"cat{i}"], axis=1)]
        cat, c = f"cat{i}", c + growth
    nodes.append(helper.make_node("Identity", [cat], ["y"]))
    return make_model(nodes, [("x", np.float32, [1, channels, hw, hw])],
                      [("y", np.float32, [1, c, hw, hw])], inits)


def test_a_dense_block_runs_blocked_through_its_batch_norms(every_conv_blocked):
    model = _dense_block(4 * LANES, 2 * LANES, 14, 3)
    ops = [n.op for n in _final_graph(model).nodes]
    assert ops.count("ConvBlocked") == 6 and "BatchNormalization" not in ops
    assert ops.count("Transpose") == 2
    _compare(model, {"x": rand(1, 4 * LANES, 14, 14, seed=3)})


def test_silu_after_a_blocked_conv_is_its_epilogue():
    """SiLU (Sigmoid, Mul) joins the region and then the conv's stores."""
    w = [rand(256, 256, 1, 1, seed=i) * 0.1 for i in range(2)]
    nodes = []
    for i, src in enumerate(["x", "s0"]):
        nodes += [helper.make_node("Conv", [src, f"w{i}"], [f"c{i}"]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"g{i}"]),
                  helper.make_node("Mul", [f"c{i}", f"g{i}"], [f"s{i}"])]
    nodes.append(helper.make_node("Identity", ["s1"], ["y"]))
    model = make_model(nodes, [("x", np.float32, [1, 256, 28, 28])],
                       [("y", np.float32, [1, 256, 28, 28])], [("w0", w[0]), ("w1", w[1])])
    graph = _final_graph(model)
    convs = [n for n in graph.nodes if n.op == "ConvBlocked"]
    assert len(convs) == 2 and all(isinstance(n.attrs["activation"], dict) for n in convs)
    assert [n.op for n in graph.nodes].count("Transpose") == 2
    _compare(model, {"x": rand(1, 256, 28, 28, seed=4)})


def test_elementwise_operands_broadcast_per_channel_and_per_position(every_conv_blocked):
    """Squeeze-excite's per-channel gate (computed from the plain tensor), a constant per
    position and one per channel, all applied to blocked tensors."""
    c, hw = 2 * LANES, 9
    inits = [("w0", rand(c, c, 3, 3, seed=1) * 0.1), ("ws", rand(c, c, 1, 1, seed=2) * 0.3),
             ("pos", rand(1, 1, hw, hw, seed=3)), ("chan", rand(c, 1, 1, seed=4)),
             ("w1", rand(c, c, 1, 1, seed=5) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["r"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["r"], ["avg"]),
             helper.make_node("Conv", ["avg", "ws"], ["sq"]),
             helper.make_node("Sigmoid", ["sq"], ["gate"]),
             helper.make_node("Mul", ["r", "gate"], ["m"]),
             helper.make_node("Mul", ["m", "pos"], ["mp"]),
             helper.make_node("Add", ["chan", "mp"], ["mc"]),
             helper.make_node("Conv", ["mc", "w1"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [2, c, hw, hw])],
                       [("y", np.float32, [2, c, hw, hw])], inits)
    graph = _final_graph(model)
    assert [n.op for n in graph.nodes].count("ConvBlocked") == 3  # the squeeze conv too
    gated = [n for n in graph.nodes if n.op in ("Mul", "Add", "Fused")
             and len(n.outputs[0].shape) == 5]
    assert gated
    _compare(model, {"x": rand(2, c, hw, hw, seed=6)})


def test_operand_kinds():
    def kind(shape):
        return blocked_layout._operand_kind(blocked_layout.Value("v", shape, np.float32),
                                            (2, 32, 5, 7))
    assert kind((2, 32, 5, 7)) == "full"
    assert kind((2, 32, 1, 1)) == kind((32, 1, 1)) == "channel"
    assert kind((1, 1, 5, 7)) == kind((7,)) == kind(()) == "position"
    assert kind((32, 5, 1)) is None  # per channel and row: not a view of the blocked form
    assert kind((1, 32, 5, 7)) is None  # a full plane broadcast over the batch


@pytest.mark.parametrize("avg_attrs", [dict(count_include_pad=0), dict(count_include_pad=1)])
def test_pools_run_blocked_between_blocked_convs(every_conv_blocked, avg_attrs):
    """Max and average windows reaching into the padding and past the end (ceil_mode), and
    a global average that hands the plain result over without a layout change."""
    c = 2 * LANES
    inits = [(f"w{i}", rand(c, c, 1, 1, seed=i) * 0.2) for i in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w1"], ["b"]),
             helper.make_node("AveragePool", ["b"], ["q"], kernel_shape=[3, 2], strides=[2, 2],
                              pads=[1, 0, 1, 1], ceil_mode=1, **avg_attrs),
             helper.make_node("Conv", ["q", "w2"], ["d"]),
             helper.make_node("GlobalAveragePool", ["d"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [2, c, 15, 15])],
                       [("y", np.float32, [2, c, 1, 1])], inits)
    ops = [n.op for n in _final_graph(model).nodes]
    assert ops.count("PoolBlocked") == 2 and ops.count("GlobalPoolBlocked") == 1
    assert ops.count("Transpose") == 1  # into the layout only
    x = rand(2, c, 15, 15, seed=8)
    _compare(model, {"x": x})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 5], strides=[1, 2], pads=[0, 2, 2, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[2, 4], strides=[2, 3], pads=[1, 3, 0, 2], ceil_mode=1,
                         count_include_pad=1))])
def test_blocked_pool_edges_and_inside_of_each_row(every_conv_blocked, op, attrs):
    """Each output of a blocked pool, read through a 1x1 conv: the windows crossing a row's
    ends (static code, clamped columns) and those inside it (a loop of plain loads)."""
    c = 2 * LANES
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node(op, ["a"], ["p"], **attrs),
             helper.make_node("Conv", ["p", "w1"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [1, c, 9, 17])], [("y", np.float32, None)],
                       [(f"w{i}", rand(c, c, 1, 1, seed=i) * 0.2) for i in range(2)])
    assert [n.op for n in _final_graph(model).nodes].count("PoolBlocked") == 1
    _compare(model, {"x": rand(1, c, 9, 17, seed=8) - 1.0})


def test_max_pool_windows_that_miss_the_input_stay_plain():
    """A window wholly in the padding has the max -inf, which the nearest pixel inside the
    input would not give: such pools stay plain."""
    def pool(pads_begin, out):
        x = blocked_layout.Value("x", (1, LANES, 4, 4), np.float32)
        y = blocked_layout.Value("y", (1, LANES, out, out), np.float32)
        attrs = {"kind": "max", "kernel_shape": [2, 2], "strides": [2, 2], "dilations": [1, 1],
                 "pads_begin": pads_begin}
        return blocked_layout.Node("RowPool", [x], [y], attrs)
    assert blocked_layout._poolable(pool([1, 1], 3), LANES)
    assert not blocked_layout._poolable(pool([2, 2], 3), LANES)  # the first window
    assert not blocked_layout._poolable(pool([0, 0], 3), LANES)  # the last (ceil_mode)


def test_a_c2f_block_splits_and_joins_blocked(every_conv_blocked):
    """YOLOv8's C2f: a conv's result split over channels, one half through a bottleneck
    with a residual, everything concatenated, a conv."""
    c = 4 * LANES
    h = c // 2
    inits = [("w0", rand(c, c, 1, 1, seed=1) * 0.2), ("w1", rand(h, h, 3, 3, seed=2) * 0.1),
             ("w2", rand(h, h, 3, 3, seed=3) * 0.1), ("w3", rand(c, c + h, 1, 1, seed=4) * 0.2),
             ("split", np.array([h, h], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Split", ["a", "split"], ["a0", "a1"], axis=1),
             helper.make_node("Conv", ["a1", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["b"], ["bg"]),
             helper.make_node("Mul", ["b", "bg"], ["bs"]),
             helper.make_node("Conv", ["bs", "w2"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a1", "d"], ["e"]),
             helper.make_node("Concat", ["a0", "a1", "e"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [1, c, 10, 10])],
                       [("y", np.float32, [1, c, 10, 10])], inits)
    graph = _final_graph(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("ConvBlocked") == 4 and ops.count("Transpose") == 2
    assert all(len(n.outputs[0].shape) == 5 for n in graph.nodes if n.op == "Slice")
    _compare(model, {"x": rand(1, c, 10, 10, seed=9)})
