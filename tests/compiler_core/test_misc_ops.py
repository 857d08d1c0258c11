"""LpNormalization, CumProd, BitCast, Det, MaxUnpool, Col2Im, integer/quantized MatMul and
Conv, GridSample and RoiAlign."""
import numpy as np
import onnx
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import assert_matches, make_model, rand

F = np.float32


def unary_model(op, x, out_dtype=None, opset=17, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [("x", x.dtype, x.shape)], [("y", out_dtype or x.dtype, None)],
                      opset=opset)


@pytest.mark.parametrize("p,axis", [(1, 0), (2, -1), (2, 1)])
def test_lp_normalization(p, axis):
    x = rand(3, 4, 5)
    x[1, :, :] = 0  # all-zero slices normalise to zero
    assert_matches(unary_model("LpNormalization", x, p=p, axis=axis), {"x": x})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(exclusive, reverse):
    x = rand(3, 4, low=0.5, high=1.5)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    m = make_model([node], [("x", F, x.shape)], [("y", F, x.shape)],
                   [("axis", np.array(-1, np.int64))], opset=26)
    assert_matches(m, {"x": x}, reference="onnx")


def test_cumprod_run_time_axis():
    x = rand(2, 3, 4, dtype=np.int32, low=-0.3, high=0.3)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], reverse=1)
    m = make_model([node], [("x", np.int32, x.shape), ("axis", np.int32, ())],
                   [("y", np.int32, x.shape)], opset=26)
    compiled = cc.compile(m, input_shapes={"x": x.shape, "axis": ()})
    for axis in (0, 1, -1):
        got = compiled.run({"x": x, "axis": np.array(axis, np.int32)})["y"]
        np.testing.assert_array_equal(got, np.flip(np.cumprod(np.flip(x, axis), axis), axis))


@pytest.mark.parametrize("x,to", [
    (np.array([1.0, -2.5, np.inf, np.nan], F), np.int32),
    (np.array([1.0, -0.0, 65504], np.float16), np.int16),
    (np.array([-1, -128, 127], np.int8), np.uint8),
    (np.array([True, False], np.bool_), np.uint8),
])
def test_bitcast(x, to):
    m = unary_model("BitCast", x, to, opset=26, to=helper.np_dtype_to_tensor_dtype(np.dtype(to)))
    got = cc.compile(m).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.view(to))


def test_bitcast_rejects_different_widths():
    x = np.zeros(3, F)
    m = unary_model("BitCast", x, np.int64, opset=26, to=onnx.TensorProto.INT64)
    with pytest.raises(cc.CompileError, match="same width"):
        cc.compile(m)


def test_det_batched_singular_and_pivoting():
    x = rand(4, 3, 3, low=-2, high=2)
    x[1] = [[1, 2, 3], [2, 4, 6], [0, 1, 1]]  # singular
    x[2] = [[0, 0, 1], [0, 1, 0], [1, 0, 0]]  # needs row swaps: det -1
    got = assert_matches(unary_model("Det", x), {"x": x})
    np.testing.assert_allclose(got["y"][1:3], [0.0, -1.0], atol=1e-6)


def test_maxunpool_after_maxpool():
    x = rand(1, 2, 4, 6)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = make_model(nodes, [("x", F, x.shape)], [("y", F, x.shape)], opset=11)
    assert_matches(m, {"x": x})


def test_maxunpool_into_larger_output_shape():
    x = np.array([[[[5, 6], [7, 8]]]], F)
    node = helper.make_node("MaxUnpool", ["x", "i", "shape"], ["y"], kernel_shape=[2, 2],
                            strides=[2, 2])
    m = make_model([node], [("x", F, x.shape)], [("y", F, None)],
                   [("i", np.array([[[[5, 7], [13, 15]]]], np.int64)),
                    ("shape", np.array([1, 1, 5, 5], np.int64))], opset=11)
    assert_matches(m, {"x": x}, reference="onnx")


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [1, 5], {}),
    ([3, 4, 5], [1, 1, 5], {}),
    ([9, 8], [2, 3], {"dilations": [2, 1], "pads": [0, 1, 1, 2], "strides": [2, 3]}),
])
def test_col2im(image, block, attrs):
    rank = len(image)
    dil, strides = attrs.get("dilations", [1] * rank), attrs.get("strides", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    blocks = [(n + pads[d] + pads[rank + d] - dil[d] * (k - 1) - 1) // strides[d] + 1
              for d, (n, k) in enumerate(zip(image, block))]
    x = rand(2, 2 * int(np.prod(block)), int(np.prod(blocks)))
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    m = make_model([node], [("x", F, x.shape)], [("y", F, None)],
                   [("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))],
                   opset=18)
    assert_matches(m, {"x": x}, reference="onnx")


def test_matmul_integer_per_row_zero_points():
    a, b = rand(2, 3, 5, dtype=np.uint8, low=0, high=25), rand(5, 4, dtype=np.uint8, low=0, high=25)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    az, bz = np.array([3, 200, 7], np.uint8), np.array([1, 2, 3, 250], np.uint8)
    m = make_model([node], [("a", np.uint8, a.shape), ("b", np.uint8, b.shape)],
                   [("y", np.int32, None)], [("az", az), ("bz", bz)], opset=10)
    got = cc.compile(m).run({"a": a, "b": b})["y"]
    # ONNX Runtime takes only scalar zero points; the spec allows one per row of A
    want = (a.astype(np.int32) - az[:, None]) @ (b.astype(np.int32) - bz)
    np.testing.assert_array_equal(got, want)


def test_conv_integer_per_channel_weights():
    x = rand(1, 4, 6, 6, dtype=np.uint8, low=0, high=25)
    # a constant w: its zero point is subtracted at compile time
    w = rand(6, 2, 3, 3, dtype=np.int8, low=-12, high=12, seed=1)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1],
                            strides=[2, 1], group=2)
    m = make_model([node], [("x", np.uint8, x.shape)], [("y", np.int32, None)],
                   [("w", w), ("xz", np.array(128, np.uint8))], opset=10)
    assert_matches(m, {"x": x})


def test_qlinear_matmul_constant_weights():
    a = rand(3, 6, dtype=np.uint8, low=0, high=25)
    b = rand(6, 4, dtype=np.uint8, low=0, high=25, seed=2)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    consts = [("as", np.array(0.02, F)), ("az", np.array(120, np.uint8)), ("b", b),
              ("bs", np.array(0.01, F)), ("bz", np.array(125, np.uint8)),
              ("ys", np.array(0.05, F)), ("yz", np.array(10, np.uint8))]
    m = make_model([helper.make_node("QLinearMatMul", names, ["y"])],
                   [("a", np.uint8, a.shape)], [("y", np.uint8, None)], consts, opset=10)
    assert_matches(m, {"a": a})


def test_qlinear_conv_per_channel_with_bias():
    x = rand(1, 3, 5, 5, dtype=np.int8, low=-12, high=12)
    w = rand(4, 3, 3, 3, dtype=np.int8, low=-12, high=12, seed=3)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    consts = [("xs", np.array(0.05, F)), ("xz", np.array(-3, np.int8)), ("w", w),
              ("ws", np.array([0.01, 0.02, 0.03, 0.04], F)), ("wz", np.zeros(4, np.int8)),
              ("ys", np.array(0.2, F)), ("yz", np.array(5, np.int8)),
              ("b", np.array([100, -50, 0, 7], np.int32))]
    m = make_model([helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])],
                   [("x", np.int8, x.shape)], [("y", np.int8, None)], consts, opset=10)
    assert_matches(m, {"x": x})


def grid_sample_model(x, grid, opset, **attrs):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)
    return make_model([node], [("x", F, x.shape), ("g", F, grid.shape)], [("y", F, None)],
                      opset=opset)


def test_grid_sample_opset16_bilinear():
    x, grid = rand(2, 3, 5, 4), rand(2, 3, 6, 2, seed=1, low=-1.4, high=1.4)
    m = grid_sample_model(x, grid, 16, mode="bilinear", padding_mode="border")
    assert_matches(m, {"x": x, "g": grid})


# ONNX Runtime clamps bicubic taps differently from the ONNX reference with border padding;
# the conformance suite follows the reference, so do these tests
@pytest.mark.parametrize("mode,padding,align", [
    ("linear", "zeros", 0), ("linear", "reflection", 1), ("nearest", "reflection", 0),
    ("nearest", "border", 1), ("cubic", "border", 0), ("cubic", "zeros", 1),
])
def test_grid_sample_2d(mode, padding, align):
    x, grid = rand(2, 3, 5, 4), rand(2, 3, 6, 2, seed=1, low=-1.4, high=1.4)
    m = grid_sample_model(x, grid, 20, mode=mode, padding_mode=padding, align_corners=align)
    assert_matches(m, {"x": x, "g": grid}, reference="onnx")


def test_grid_sample_volumetric_cubic_reflection():
    x, grid = rand(1, 2, 3, 4, 5), rand(1, 2, 3, 4, 3, seed=1, low=-1.5, high=1.5)
    m = grid_sample_model(x, grid, 20, mode="cubic", padding_mode="reflection")
    assert_matches(m, {"x": x, "g": grid}, reference="onnx")


@pytest.mark.parametrize("mode,ratio,transform", [("avg", 0, "half_pixel"),
                                                  ("max", 2, "output_half_pixel")])
def test_roi_align(mode, ratio, transform):
    x = rand(2, 3, 12, 10)
    rois = np.array([[1.0, 1.5, 7.2, 9.0], [0.0, 0.0, 20.0, 4.0], [-3.0, 2.0, 2.0, 14.0]], F)
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode, sampling_ratio=ratio,
                            output_height=3, output_width=4, spatial_scale=0.8,
                            coordinate_transformation_mode=transform)
    m = make_model([node], [("x", F, x.shape), ("rois", F, rois.shape), ("b", np.int64, (3,))],
                   [("y", F, None)], opset=16)
    assert_matches(m, {"x": x, "rois": rois, "b": np.array([1, 0, 1], np.int64)},
                   reference="onnx")


def test_col2im_needs_constant_image_shape():
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"])
    m = make_model([node], [("x", F, (1, 4, 9)), ("image", np.int64, (2,))], [("y", F, None)],
                   [("block", np.array([2, 2], np.int64))], opset=18)
    with pytest.raises(cc.CompileError, match="image_shape must be known at compile time"):
        cc.compile(m)


def test_qlinear_matmul_per_row_and_column_scales():
    a = rand(2, 3, 4, dtype=np.int8, low=-12, high=12)
    b = rand(4, 5, dtype=np.int8, low=-12, high=12, seed=4)
    scales = {"as": np.array([0.02, 0.03, 0.05], F), "bs": np.linspace(0.01, 0.05, 5).astype(F),
              "ys": np.array(0.1, F)}
    zps = {"az": np.array([1, -2, 3], np.int8), "bz": np.zeros(5, np.int8),
           "yz": np.array(-4, np.int8)}
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    m = make_model([helper.make_node("QLinearMatMul", names, ["y"])],
                   [("a", np.int8, a.shape), ("b", np.int8, b.shape)], [("y", np.int8, None)],
                   [*scales.items(), *zps.items()], opset=10)
    got = cc.compile(m).run({"a": a, "b": b})["y"]
    acc = (a.astype(np.int32) - zps["az"][:, None]) @ b.astype(np.int32)
    scaled = acc * (scales["as"][:, None] * scales["bs"] / scales["ys"])
    want = np.clip(np.rint(scaled) + zps["yz"], -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)
