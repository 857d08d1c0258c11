"""The convolution passes: fold_batchnorm, fuse_activation (residual Add, Relu) and
pack_weights; graph rewrites and end results."""
import numpy as np
import pytest
from onnx import helper

from compiler_core.frontend.onnx import import_model
from compiler_core.passes.fold_batchnorm import fold_batchnorm
from compiler_core.passes.fuse_activation import fuse_activation
from compiler_core.passes.pack_weights import packed_conv_weights

from .helpers import assert_matches, make_model, rand

F = np.float32
C = 4


def _bn_consts(prefix="bn"):
    return [(f"{prefix}_s", rand(C, seed=11)), (f"{prefix}_b", rand(C, seed=12)),
            (f"{prefix}_m", rand(C, seed=13)), (f"{prefix}_v", rand(C, seed=14, low=0.5, high=2))]


def conv_bn_relu_model(extra_reader=False):
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),
             helper.make_node("Mul", ["n", "scale"], ["s"]),
             helper.make_node("Add", ["s", "shift"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    outputs = [("y", F, (1, C, 6, 6))]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["z"]))
        outputs.append(("z", F, (1, C, 6, 6)))
    consts = [("w", rand(C, 3, 3, 3, seed=1)), ("cb", rand(C, seed=2)), *_bn_consts(),
              ("scale", rand(C, 1, 1, seed=3)), ("shift", rand(1, C, 1, 1, seed=4))]
    return make_model(nodes, [("x", F, (1, 3, 6, 6))], outputs, consts)


def test_conv_bn_mul_add_relu_becomes_one_conv():
    graph = fuse_activation(fold_batchnorm(import_model(conv_bn_relu_model())))
    assert [n.op for n in graph.nodes] == ["ConvPad", "Conv"]
    conv = graph.nodes[1]
    assert conv.attrs["activation"] == "Relu"
    assert conv.outputs[0] is graph.outputs[0]


def test_folded_conv_matches_onnxruntime():
    model = conv_bn_relu_model()
    feeds = {"x": rand(1, 3, 6, 6, seed=5)}
    assert_matches(model, feeds, opt_level=0)
    assert_matches(model, feeds, opt_level=3)


def test_no_fold_when_the_conv_output_has_other_readers():
    graph = fold_batchnorm(import_model(conv_bn_relu_model(extra_reader=True)))
    assert "BatchNormalization" in [n.op for n in graph.nodes]
    assert_matches(conv_bn_relu_model(extra_reader=True), {"x": rand(1, 3, 6, 6, seed=5)})


def test_input_graph_is_not_modified():
    graph = import_model(conv_bn_relu_model())
    before = [(n.op, list(n.inputs), list(n.outputs)) for n in graph.nodes]
    fold_batchnorm(graph)
    assert [(n.op, list(n.inputs), list(n.outputs)) for n in graph.nodes] == before


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_bn_fold(trans_b):
    w = rand(C, 5, seed=1) if trans_b else rand(5, C, seed=1)
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=trans_b, beta=0.5),
             helper.make_node("BatchNormalization", ["g", "bn_s", "bn_b", "bn_m", "bn_v"], ["y"])]
    model = make_model(nodes, [("x", F, (3, 5))], [("y", F, (3, C))],
                       [("w", w), ("c", rand(C, seed=2)), *_bn_consts()])
    graph = fold_batchnorm(import_model(model))
    assert [n.op for n in graph.nodes] == ["Gemm"]
    assert_matches(model, {"x": rand(3, 5, seed=3)})


def residual_model(k=3, channels=3):
    """Conv -> Add(shortcut computed after the conv) -> Relu, as in ResNet blocks."""
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[k // 2] * 4),
             helper.make_node("Neg", ["x"], ["shortcut"]),
             helper.make_node("Add", ["shortcut", "c"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = (1, channels, 6, 5)
    consts = [("w", rand(channels, channels, k, k, seed=1)), ("cb", rand(channels, seed=2))]
    return make_model(nodes, [("x", F, shape)], [("y", F, shape)], consts)


def test_residual_add_and_relu_fuse_into_the_conv():
    graph = fuse_activation(import_model(residual_model()))
    assert [n.op for n in graph.nodes] == ["ConvPad", "Neg", "Conv"]
    conv = graph.nodes[-1]
    assert conv.inputs[4] is graph.nodes[1].outputs[0] and conv.attrs["activation"] == "Relu"


def test_add_of_two_convs_fuses_one_of_them():
    """ResNet's downsampling blocks: Add(main branch conv, shortcut conv)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["b"]),
             helper.make_node("Sum", ["b", "a"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    consts = [("w1", rand(5, 3, 1, 1, seed=1)), ("w2", rand(5, 3, 1, 1, seed=2))]
    model = make_model(nodes, [("x", F, (1, 3, 4, 4))], [("y", F, (1, 5, 4, 4))], consts)
    graph = fuse_activation(import_model(model))
    assert [n.op for n in graph.nodes] == ["Conv", "Conv"]
    assert_matches(model, {"x": rand(1, 3, 4, 4, seed=3)})


@pytest.mark.parametrize("k,channels", [(3, 3), (1, 8), (1, 400)])
def test_fused_residual_matches_onnxruntime(k, channels):
    """Wide output (3x3), direct store (1x1) and k-chunked (400 channels) epilogues."""
    assert_matches(residual_model(k, channels), {"x": rand(1, channels, 6, 5, seed=3)})


def test_packed_weights_layout():
    """packed[g, m // MR, k, m % MR] = W[g * OCg + m, k], rows padded with zeros to MR."""
    w = rand(2 * 9, 4, 3, 3, seed=1)  # 2 groups of 9 output channels: MR = 6, 3 pad rows
    packed, mr = packed_conv_weights(w, group=2, mr=6)
    assert mr == 6 and packed.shape == (2, 2, 36, 6)
    flat = w.reshape(2, 9, 36)
    for g, m in [(0, 0), (0, 7), (1, 5), (1, 8)]:
        np.testing.assert_array_equal(packed[g, m // 6, :, m % 6], flat[g, m])
    assert not packed[:, 1, :, 3:].any()
