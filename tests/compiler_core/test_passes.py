"""Graph passes, each on a small graph of its own."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model
from compiler_core.passes.cse import eliminate_common_subexpressions
from compiler_core.passes.dce import eliminate_dead_code
from compiler_core.passes.fuse_elementwise import fuse_elementwise
from compiler_core.passes.memory_plan import plan_memory

from .helpers import assert_matches, make_model, rand

F = np.float32


def chain_model():
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["d"]), helper.make_node("Mul", ["c", "d"], ["e"]),
             helper.make_node("Relu", ["x"], ["unused"]), helper.make_node("Tanh", ["e"], ["y"])]
    inits = [("w", rand(8, seed=1)), ("b", rand(4, 1, seed=2))]
    return make_model(nodes, [("x", F, (4, 8))], [("y", F, (4, 8))], inits)


def test_dce_drops_unused():
    g = eliminate_dead_code(import_model(chain_model()))
    assert "Relu" not in g.op_histogram()


def test_cse_merges_identical_nodes():
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Exp", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    m = make_model(nodes, [("x", F, (3,))], [("y", F, (3,))])
    g = eliminate_common_subexpressions(import_model(m))
    assert g.op_histogram() == {"Add": 1, "Exp": 1}
    assert_matches(m, {"x": rand(3)})


def test_fusion_makes_one_kernel_and_keeps_results():
    m = chain_model()
    g = fuse_elementwise(eliminate_dead_code(import_model(m)))
    # c has two readers (Sigmoid and Mul), so the chain splits there
    assert g.op_histogram() == {"Fused": 2}
    assert_matches(m, {"x": rand(4, 8, seed=3)})
    assert len(cc.compile(m).meta["kernels"]) == 2


def test_fusion_does_not_swallow_broadcast_producers():
    nodes = [helper.make_node("Exp", ["b"], ["eb"]), helper.make_node("Add", ["x", "eb"], ["y"])]
    m = make_model(nodes, [("x", F, (4, 8)), ("b", F, (8,))], [("y", F, (4, 8))])
    g = fuse_elementwise(import_model(m))
    assert g.op_histogram() == {"Add": 1, "Exp": 1}


def test_memory_plan_reuses_dead_buffers():
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Log", ["a"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Log", ["c"], ["y"])]
    m = make_model(nodes, [("x", F, (1024,))], [("y", F, (1024,))])
    plan = plan_memory(import_model(m))
    assert plan.arena_size == 2 * 4096  # a and b alive together, then c reuses a's slot


def _silu_after_conv(c, hw, k, extra_output=False):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k],
                              pads=[k // 2] * 4),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    inits = [("w", rand(16, c, k, k, seed=1) / k), ("b", rand(16, seed=2))]
    outputs = [("y", F, (1, 16, hw, hw))] + ([("c", F, (1, 16, hw, hw))] if extra_output else [])
    return make_model(nodes, [("x", F, (1, c, hw, hw))], outputs, inits)


def test_silu_becomes_the_conv_epilogue():
    # 1x1 (stored by the register tiles), 3x3 with padding (through the wide scratch), and a
    # reduction long enough to be chunked (the epilogue runs once the last chunk is done, or
    # in Winograd's output transform, where the default rule picks it, or in the blocked
    # layout's vector stores, with its layout changes around it)
    layout = {"ConvPad", "PadBlocked", "Transpose", "Reshape"}
    for c, k in ((8, 1), (8, 3), (96, 3)):
        m = _silu_after_conv(c, 12, k)
        assert_matches(m, {"x": rand(1, c, 12, 12, seed=3)})
        kernels = cc.compile(m).meta["kernels"]
        assert [kn["op"] for kn in kernels if kn["op"] not in layout] in (
            ["Conv"], ["WinogradConv"], ["ConvBlocked"]), (c, k)


def test_epilogue_is_not_fused_when_the_result_is_read_elsewhere():
    m = _silu_after_conv(8, 12, 1, extra_output=True)
    assert_matches(m, {"x": rand(1, 8, 12, 12, seed=3)})
    assert sorted(kn["op"] for kn in cc.compile(m).meta["kernels"]) == ["Conv", "Fused"]


def test_exporters_erf_gelu_becomes_the_matmul_epilogue():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Div", ["a", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["a", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["y"])]
    inits = [("w", rand(64, 48, seed=1)), ("b", rand(48, seed=2)), ("sqrt2", np.array(2 ** 0.5, F)),
             ("one", np.array(1, F)), ("half", np.array(0.5, F))]
    m = make_model(nodes, [("x", F, (32, 64))], [("y", F, (32, 48))], inits)
    assert_matches(m, {"x": rand(32, 64, seed=3)})
    assert [kn["op"] for kn in cc.compile(m).meta["kernels"]] == ["PackedGemm"]


def _attention_model(mask_shape, batch=1, heads=2, seq=24, d=8, mask_late=False):
    """softmax(Q K^T / scale + mask) V with the mask computed from an input (1 - m) * -1e4,
    its nodes placed before the scores or, with mask_late, between the MatMul and the Add."""
    mask = [helper.make_node("Sub", ["one", "m"], ["keep"]),
            helper.make_node("Mul", ["keep", "big"], ["mask"])]
    scores = [helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores")]
    rest = [helper.make_node("Div", ["s", "scale"], ["sd"], name="scale"),
            helper.make_node("Add", ["sd", "mask"], ["a"], name="mask_add"),
            helper.make_node("Softmax", ["a"], ["p"], axis=-1, name="softmax"),
            helper.make_node("MatMul", ["p", "v"], ["y"])]
    nodes = scores + mask + rest if mask_late else mask + scores + rest
    inits = [("one", np.array(1, F)), ("big", np.array(-1e4, F)), ("scale", np.array(d ** 0.5, F))]
    inputs = [("q", F, (batch, heads, seq, d)), ("kt", F, (batch, heads, d, seq)),
              ("v", F, (batch, heads, seq, d)), ("m", F, mask_shape)]
    return make_model(nodes, inputs, [("y", F, (batch, heads, seq, d))], inits)


@pytest.mark.parametrize("mask_shape, batch, mask_late", [
    ((1, 1, 1, 24), 1, False), ((2, 1, 1, 24), 2, True), ((1, 1, 24, 24), 1, False),
    ((24,), 2, False), ((2, 2, 24, 24), 2, True)])
def test_attention_scale_and_mask_become_the_scores_epilogue(mask_shape, batch, mask_late):
    m = _attention_model(mask_shape, batch, mask_late=mask_late)
    feeds = {"q": rand(batch, 2, 24, 8, seed=1), "kt": rand(batch, 2, 8, 24, seed=2),
             "v": rand(batch, 2, 24, 8, seed=3),
             "m": (rand(*mask_shape, seed=4) > 0).astype(F)}  # some positions masked
    assert_matches(m, feeds)
    kernels = cc.compile(m).meta["kernels"]
    # both products in one kernel (passes/fuse_attention.py)
    assert [kn["op"] for kn in kernels if kn["op"] != "Fused"] == ["Attention"]
    scores = next(kn for kn in kernels if "scores" in kn["onnx_nodes"])
    # (a mask of the scores' own shape is computed in the epilogue too)
    assert {"scores", "scale", "mask_add", "softmax"} <= set(scores["onnx_nodes"])


def _softmax_of_product(a_shape, b_shape, axis=-1, also_read=False):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=axis)]
    outputs = [("y", F, None)] + ([("s", F, None)] if also_read else [])
    return make_model(nodes, [("a", F, a_shape), ("b", F, b_shape)], outputs)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3, 20, 8), (2, 3, 8, 37)),  # each block of rows normalised as it is finished
    ((13, 400), (400, 21)),  # K in two chunks: the rows are final only at the end
    ((7, 384), (384, 700)),  # several blocks of columns: the same
    ((9, 16), (16, 3)),  # too few columns for register tiles: dot products
    ((1, 5, 16), (16, 17)),  # a single row, B broadcast over the batch
])
def test_softmax_of_a_product_is_fused_into_it(a_shape, b_shape):
    m = _softmax_of_product(a_shape, b_shape)
    # scores up to about +-15: exps over several orders of magnitude
    feeds = {"a": rand(*a_shape, seed=1, low=-2, high=2), "b": rand(*b_shape, seed=2)}
    assert_matches(m, feeds, atol=1e-6)
    assert [kn["op"] for kn in cc.compile(m).meta["kernels"]] == ["MatMul"]


@pytest.mark.parametrize("a_shape, b_shape, axis, also_read", [
    ((4, 6, 8), (4, 8, 10), 1, False),  # along the product's rows, not its columns
    ((4, 6, 8), (4, 8, 10), -1, True),  # the scores are an output too
    ((4, 6, 8), (8,), -1, False),  # B a vector: the last axis holds the rows
])
def test_softmax_stays_a_kernel_of_its_own(a_shape, b_shape, axis, also_read):
    m = _softmax_of_product(a_shape, b_shape, axis, also_read)
    assert_matches(m, {"a": rand(*a_shape, seed=1), "b": rand(*b_shape, seed=2)}, atol=1e-6)
    assert sorted(kn["op"] for kn in cc.compile(m).meta["kernels"]) == ["MatMul", "Softmax"]


def test_an_add_that_broadcasts_the_scores_stays_a_kernel_of_its_own():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["s"]),
             helper.make_node("Add", ["s", "c"], ["y"])]
    m = make_model(nodes, [("a", F, (1, 6, 4)), ("b", F, (1, 4, 5)), ("c", F, (3, 6, 5))],
                   [("y", F, (3, 6, 5))])
    assert_matches(m, {"a": rand(1, 6, 4, seed=1), "b": rand(1, 4, 5, seed=2),
                       "c": rand(3, 6, 5, seed=3)})
    assert sorted(kn["op"] for kn in cc.compile(m).meta["kernels"]) == ["Add", "MatMul"]


def _conv(x, w, y, k):
    return helper.make_node("Conv", [x, w], [y], kernel_shape=[k, k], pads=[k // 2] * 4)


def _dense_block_model(channels, hw, batch=1):
    """Fire module, then DenseNet: c1 = [x0, f(x0)], c2 = [c1, g(c1)] (nested Concats)."""
    c = channels
    weights = [("wa", rand(c, c, 1, 1, seed=1)), ("wb", rand(c, c, 3, 3, seed=2)),
               ("wf", rand(c, 2 * c, 3, 3, seed=3)), ("wg", rand(c, 3 * c, 1, 1, seed=4)),
               ("wo", rand(2, 4 * c, 1, 1, seed=5))]
    nodes = [_conv("x", "wa", "a", 1), _conv("x", "wb", "b", 3),
             helper.make_node("Concat", ["a", "b"], ["x0"], axis=1),
             helper.make_node("Relu", ["x0"], ["f_in"]), _conv("f_in", "wf", "f", 3),
             helper.make_node("Concat", ["x0", "f"], ["c1"], axis=1),
             _conv("c1", "wg", "g", 1),
             helper.make_node("Concat", ["c1", "g"], ["c2"], axis=1),
             _conv("c2", "wo", "y", 1)]
    shape = (batch, c, hw, hw)
    return make_model(nodes, [("x", F, shape)], [("y", F, (batch, 2, hw, hw))], weights), shape


def test_concats_assembled_in_place_by_their_producers():
    model, shape = _dense_block_model(channels=16, hw=8)
    plan = plan_memory(import_model(model))
    slice_bytes = 16 * 8 * 8 * 4
    offsets = {v.name: (plan.storage(v).name, at) for v in plan.views
               for at in [plan.storage_offset(v)[1]]}
    assert offsets["a"] == ("c2", 0) and offsets["b"] == ("c2", slice_bytes)
    assert offsets["f"] == ("c2", 2 * slice_bytes) and offsets["g"] == ("c2", 3 * slice_bytes)
    art = cc.compile(model)
    assert "Concat" not in {k["op"] for k in art.meta["kernels"]}
    assert_matches(model, {"x": rand(*shape, seed=6)})


def test_concats_copied_when_their_inputs_are_not_slices_to_write_in_place():
    # 3 channels of 5x5 floats: slices not 64-byte aligned; batch 2: not one slice each
    for channels, hw, batch in [(3, 5, 1), (16, 8, 2)]:
        model, shape = _dense_block_model(channels, hw, batch)
        art = cc.compile(model)
        assert [k["op"] for k in art.meta["kernels"]].count("Concat") == 3
        assert_matches(model, {"x": rand(*shape, seed=7)})
    # a graph input, and one value twice, cannot be placed in the output
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Concat", ["x", "r"], ["c"], axis=1),
             helper.make_node("Concat", ["r", "r"], ["d"], axis=1),
             helper.make_node("Concat", ["c", "d"], ["y"], axis=0)]
    model = make_model(nodes, [("x", F, (1, 16))], [("y", F, (2, 32))])
    assert [k["op"] for k in cc.compile(model).meta["kernels"]].count("Concat") == 3
    assert_matches(model, {"x": rand(1, 16, seed=8)})


def _split_model(channels, hw, batch=1, concat=("r", "b")):
    """YOLO's C2f: a conv's output split in two channel groups, one convolved again, and
    the results concatenated (C2f's own concat takes both groups as they are)."""
    c = channels
    weights = [("wa", rand(2 * c, c, 1, 1, seed=1)), ("wb", rand(c, c, 3, 3, seed=2)),
               ("wo", rand(2, len(concat) * c, 1, 1, seed=3))]
    nodes = [_conv("x", "wa", "a", 1),
             helper.make_node("Split", ["a"], ["lo", "hi"], axis=1, num_outputs=2),
             _conv("hi", "wb", "b", 3), helper.make_node("Relu", ["lo"], ["r"]),
             helper.make_node("Concat", list(concat), ["c"], axis=1),
             _conv("c", "wo", "y", 1)]
    shape = (batch, c, hw, hw)
    return make_model(nodes, [("x", F, shape)], [("y", F, (batch, 2, hw, hw))], weights,
                      opset=18), shape


def test_contiguous_slices_are_views_of_their_input():
    model, shape = _split_model(channels=16, hw=8)
    plan = plan_memory(import_model(model))
    views = {v.name: (plan.views[v][0].name, plan.views[v][1]) for v in plan.views}
    assert views["lo"] == ("a", 0) and views["hi"] == ("a", 16 * 8 * 8 * 4)
    art = cc.compile(model)
    assert "Slice" not in {k["op"] for k in art.meta["kernels"]}
    assert_matches(model, {"x": rand(*shape, seed=4)})


def test_concat_of_a_whole_split_places_the_split_value():
    model, shape = _split_model(channels=16, hw=8, concat=("lo", "hi", "b"))
    plan = plan_memory(import_model(model))
    offsets = {v.name: plan.storage_offset(v) for v in plan.views}
    group = 16 * 8 * 8 * 4
    assert offsets["hi"] == (offsets["a"][0], group) and offsets["a"][0].name == "c"
    assert offsets["a"][1] == 0 and offsets["b"][1] == 2 * group
    ops = {k["op"] for k in cc.compile(model).meta["kernels"]}
    assert not ops & {"Slice", "Concat"}
    assert_matches(model, {"x": rand(*shape, seed=9)})
    # the halves swapped do not tile the split value in order: the Concat copies
    model, shape = _split_model(channels=16, hw=8, concat=("hi", "lo", "b"))
    assert [k["op"] for k in cc.compile(model).meta["kernels"]].count("Concat") == 1
    assert_matches(model, {"x": rand(*shape, seed=10)})


def test_slices_copied_when_not_one_aligned_range_of_the_arena():
    # 3 channels of 5x5 floats: the second group is not 64-byte aligned; batch 2: two ranges
    for channels, hw, batch, copies in [(3, 5, 1, 1), (16, 8, 2, 2)]:
        model, shape = _split_model(channels, hw, batch)
        art = cc.compile(model)
        assert [k["op"] for k in art.meta["kernels"]].count("Slice") == copies
        assert_matches(model, {"x": rand(*shape, seed=5)})
    # a slice of a graph input is not in the arena; a row segment is one range
    nodes = [helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["a"]),
             helper.make_node("Exp", ["x"], ["ex"]),
             helper.make_node("Slice", ["ex", "s1", "e1", "ax"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    inits = [(name, np.array(v, np.int64)) for name, v in
             [("s0", (1, 0)), ("e0", (2, 32)), ("s1", (2, 32)), ("e1", (3, 64)), ("ax", (0, 1))]]
    model = make_model(nodes, [("x", F, (4, 64))], [("y", F, (1, 32))], inits)
    plan = plan_memory(import_model(model))
    assert {v.name: off for v, (_, off) in plan.views.items()} == {"b": (2 * 64 + 32) * 4}
    assert [k["op"] for k in cc.compile(model).meta["kernels"]].count("Slice") == 1
    assert_matches(model, {"x": rand(4, 64, seed=6)})
