import numpy as np
import pytest
from onnx import TensorProto, helper

import compiler_core as cc

from .helpers import assert_matches, make_model, rand

F, I64 = np.float32, np.int64


def node_model(op, x, attrs=None, consts=(), runtime=(), opset=17, out_dtype=None):
    """One `op` node reading x, then constant inputs (initializers), then runtime inputs."""
    names = ["x"] + [n for n, _ in consts] + [n for n, _ in runtime]
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    inputs = [("x", x.dtype, x.shape)] + [(n, a.dtype, a.shape) for n, a in runtime]
    return make_model([node], inputs, [("y", out_dtype or x.dtype, None)], list(consts),
                      opset=opset)


def check(op, x, attrs=None, consts=(), runtime=(), opset=17, **kw):
    model = node_model(op, x, attrs, consts, runtime, opset)
    return assert_matches(model, {"x": x, **dict(runtime)}, **kw)


# ---------------------------------------------------------------- reshapes (views)

@pytest.mark.parametrize("shape,allowzero", [((0, -1), 0), ((4, 0, 2), 0), ((-1,), 0),
                                             ((2, 3, 4), 1)])
def test_reshape(shape, allowzero):
    check("Reshape", rand(2, 3, 4), {"allowzero": allowzero} if allowzero else {},
          [("s", np.array(shape, I64))], opset=14)


def test_reshape_becomes_a_view_and_copies_for_outputs():
    x = rand(2, 6)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"]),
             helper.make_node("Reshape", ["y", "s2"], ["z"])]
    m = make_model(nodes, [("x", F, x.shape)], [("y", F, None), ("z", F, None)],
                   [("s", np.array([3, 4], I64)), ("s2", np.array([12], I64))])
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("axis", [0, 2, -1, 3])
def test_flatten(axis):
    check("Flatten", rand(2, 3, 4), {"axis": axis}, opset=13)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_versions(opset):
    x = rand(1, 3, 1, 2)
    axes = np.array([0, -2], I64)
    if opset < 13:
        check("Squeeze", x, {"axes": [0, -2]}, opset=opset)
        check("Unsqueeze", x, {"axes": [-1, 1]}, opset=opset)
    else:
        check("Squeeze", x, consts=[("a", axes)], opset=opset)
        check("Unsqueeze", x, consts=[("a", np.array([-1, 1], I64))], opset=opset)
        check("Squeeze", x, opset=opset)


def test_squeeze_rejects_non_unit_axis():
    m = node_model("Squeeze", rand(2, 3), consts=[("a", np.array([0], I64))])
    with pytest.raises(cc.CompileError, match="size is not 1"):
        cc.compile(m)


def test_runtime_shape_is_a_clear_error():
    x, s = rand(2, 3), np.array([3, 2], I64)
    m = node_model("Reshape", x, runtime=[("s", s)])
    with pytest.raises(cc.CompileError, match="compile time"):
        cc.compile(m, input_shapes={"x": x.shape, "s": s.shape})


# ---------------------------------------------------------------- layout

@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(perm):
    check("Transpose", rand(2, 3, 4), {"perm": perm} if perm else {})


@pytest.mark.parametrize("shape,perm", [((20, 3, 17), [2, 1, 0]), ((2, 16, 24), [0, 2, 1])])
def test_transpose_tiled(shape, perm):
    check("Transpose", rand(*shape), {"perm": perm})


@pytest.mark.parametrize("target", ["native", "x86-64-v3"])
@pytest.mark.parametrize("shape", [(2, 16, 37), (3, 37, 16), (2, 8, 21), (1, 21, 8), (2, 4, 9),
                                   (1, 9, 4)])
def test_transpose_of_vector_blocks_in_registers(shape, target):
    """The blocked layout's conversions swap two axes, one of 4, 8 or 16 (kernels/tensor.py):
    squares of vectors transposed in registers (ir/loops.transpose_lanes), the longer axis's
    last partial square one element at a time."""
    x = np.arange(np.prod(shape), dtype=F).reshape(shape)
    model = node_model("Transpose", x, {"perm": [0, 2, 1]})
    got = cc.compile(model, target=target).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.transpose(0, 2, 1))


@pytest.mark.parametrize("shape,perm,copies", [
    ((1, 50, 40), [1, 0, 2], False), ((50, 2, 1, 48), [0, 2, 1, 3], False),
    ((3, 1, 4), [2, 1, 0], True)])
def test_transpose_moving_only_extent_1_axes_is_a_view(shape, perm, copies):
    # the elements keep their order when only axes of extent 1 move: a Reshape, no kernel
    x = rand(*shape)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("Relu", ["t"], ["y"])]
    model = make_model(nodes, [("x", F, shape)], [("y", F, None)])
    ops = [k["op"] for k in cc.compile(model).meta["kernels"]]
    assert ("Transpose" in ops) == copies
    assert_matches(model, {"x": x})


def test_concat_with_constant_and_negative_axis():
    x = rand(2, 3)
    check("Concat", x, {"axis": -1}, consts=[("c", rand(2, 2, seed=3))],
          runtime=[("z", rand(2, 1))])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_round_trip(mode):
    x = rand(1, 8, 2, 3)
    check("DepthToSpace", x, {"blocksize": 2, "mode": mode})
    check("SpaceToDepth", rand(1, 2, 4, 6), {"blocksize": 2})


# ---------------------------------------------------------------- slicing

@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, -1], [0, 2], [1, 1]),
    ([-1], [-1000], [1], [-1]),           # reverse an axis, end clamped below 0
    ([10, 4], [0, -100], [0, -1], [-2, -3]),
    ([0], [2**62], [0], [2]),             # end clamped to the dimension
    ([5], [1], [2], [1]),                 # empty
])
def test_slice(starts, ends, axes, steps):
    i = lambda v: np.array(v, I64)
    check("Slice", rand(4, 3, 5), consts=[("s", i(starts)), ("e", i(ends)), ("a", i(axes)),
                                          ("t", i(steps))])


def test_slice_v1_attributes():
    check("Slice", rand(4, 5), {"starts": [1, -3], "ends": [100, -1], "axes": [0, 1]}, opset=9)


@pytest.mark.parametrize("opset,attrs,consts,n", [
    (11, {"axis": 1, "split": [1, 3]}, [], 2),
    (13, {"axis": -1}, [("s", np.array([2, 1, 1], I64))], 3),
    (13, {"axis": 1}, [], 2),
    (18, {"axis": 1, "num_outputs": 3}, [], 3),   # sizes 2, 2, 0
])
def test_split(opset, attrs, consts, n):
    outs = tuple(f"y{k}" for k in range(n))
    x = rand(2, 4, 4)
    m = make_model([helper.make_node("Split", ["x"] + [c for c, _ in consts], list(outs), **attrs)],
                   [("x", F, x.shape)], [(o, F, None) for o in outs], consts, opset=opset)
    assert_matches(m, {"x": x}, reference="onnx")


# ---------------------------------------------------------------- gathers and scatters

@pytest.mark.parametrize("axis,indices", [(0, np.array([[0, -1], [2, 1]], I64)),
                                          (1, np.array(-2, np.int32)), (-1, np.array([3, 0], I64))])
def test_gather_runtime_negative_indices(axis, indices):
    check("Gather", rand(3, 4, 5), {"axis": axis}, runtime=[("i", indices)])


def test_gather_elements_and_nd():
    x = rand(3, 4)
    pick = np.array([[0, -1], [1, 2], [3, 3]], I64)
    check("GatherElements", x, {"axis": 1}, runtime=[("i", pick)])
    nd = np.array([[[0, 1], [-1, 2]], [[1, 0], [2, 2]]], I64)
    check("GatherND", rand(3, 3, 2), runtime=[("i", nd)])
    check("GatherND", rand(2, 3, 4), {"batch_dims": 1}, runtime=[("i", np.array([[1], [-1]], I64))])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    data = rand(4, 3)
    indices = np.array([[1], [-1], [1]] if reduction != "none" else [[1], [-1]], I64)
    updates = rand(len(indices), 3, seed=5)
    check("ScatterND", data, {"reduction": reduction} if reduction != "none" else {},
          runtime=[("i", indices), ("u", updates)], opset=18, reference="onnx")


def test_scatter_v9_is_scatter_elements():
    indices = np.array([[1, 0, 2]], I64)
    check("Scatter", rand(3, 3), {"axis": 0}, runtime=[("i", indices), ("u", rand(1, 3, seed=4))],
          opset=10)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_elements(reduction):
    indices = np.array([[1, -1], [0, 2], [2, 0]], I64)
    check("ScatterElements", rand(3, 3), {"axis": -1, "reduction": reduction},
          runtime=[("i", indices), ("u", rand(3, 2, seed=9))], opset=18, reference="onnx")


# ---------------------------------------------------------------- broadcasting copies, padding

def test_expand_and_tile():
    check("Expand", rand(3, 1), consts=[("s", np.array([2, 1, 4], I64))])
    check("Tile", rand(2, 3), consts=[("r", np.array([2, 3], I64))])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_with_axes(mode):
    pads = np.array([2, -1, 2, 1], I64)   # begin/end for axes (0, -1); negative crops
    consts = [("p", pads), ("v", np.array(1.5, F)), ("a", np.array([0, -1], I64))]
    check("Pad", rand(3, 4, 4), {"mode": mode}, consts=consts, opset=19)


def test_pad_v2_attributes():
    check("Pad", rand(2, 3), {"pads": [1, 0, 0, 2], "value": -1.0}, opset=10)


# ---------------------------------------------------------------- compile-time values

def test_shape_size_and_constants_fold():
    x = rand(2, 3, 4)
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-0),
             helper.make_node("Shape", ["x"], ["t"], start=-2),
             helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Constant", [], ["c"], value_ints=[1, 2]),
             helper.make_node("Constant", [], ["f"], value_float=2.5),
             helper.make_node("EyeLike", ["m"], ["e"], k=1, dtype=TensorProto.INT32)]
    m = make_model(nodes, [("x", F, x.shape), ("m", F, (3, 4))],
                   [("s", I64, None), ("t", I64, None), ("n", I64, None), ("c", I64, None),
                    ("f", F, None), ("e", np.int32, None)], opset=15)
    assert_matches(m, {"x": x, "m": rand(3, 4)})


def test_sparse_and_list_constants():
    values = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.5, -2.0])
    indices = helper.make_tensor("i", TensorProto.INT64, [2], [1, 5])
    nodes = [helper.make_node("Constant", [], ["s"],
                              sparse_value=helper.make_sparse_tensor(values, indices, [2, 3])),
             helper.make_node("Constant", [], ["f"], value_floats=[0.5, 1.0]),
             helper.make_node("Add", ["x", "s"], ["y"])]
    x = rand(2, 3)
    m = make_model(nodes, [("x", F, x.shape)], [("y", F, None), ("f", F, None)])
    assert_matches(m, {"x": x})


def test_data_dependent_shape_is_a_clear_error():
    m = node_model("NonZero", rand(3), out_dtype=I64)
    with pytest.raises(cc.CompileError, match="depends on the input data"):
        cc.compile(m)


# ---------------------------------------------------------------- misc

@pytest.mark.parametrize("axis", [-1, 0])
def test_one_hot(axis):
    idx = np.array([[0, 3], [-1, 2]], I64)
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)
    m = make_model([node], [("i", I64, idx.shape)], [("y", F, None)],
                   [("d", np.array(4, I64)), ("v", np.array([0.5, 2.0], F))], opset=11)
    assert_matches(m, {"i": idx})


@pytest.mark.parametrize("upper,k", [(1, None), (0, -1), (1, 2)])
def test_trilu(upper, k):
    consts = [] if k is None else [("k", np.array(k, I64))]
    check("Trilu", rand(2, 3, 5), {"upper": upper}, consts=consts, opset=14)


def test_trilu_runtime_diagonal_and_pad_value():
    check("Trilu", rand(4, 3), {"upper": 0}, runtime=[("k", np.array(-2, I64))], opset=14)
    check("Pad", rand(2, 3), consts=[("p", np.array([0, 1, 1, 0], I64))],
          runtime=[("v", np.array(7.0, F))], opset=13)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    check("CumSum", rand(3, 4), {"exclusive": exclusive, "reverse": reverse},
          consts=[("a", np.array(-1, I64))], opset=14)


def test_cumsum_runtime_axis():
    check("CumSum", rand(3, 4, 2), {"reverse": 1}, runtime=[("a", np.array(-2, np.int32))],
          opset=14)


def test_reverse_sequence():
    lens = np.array([1, 3, 2], I64)
    check("ReverseSequence", rand(4, 3, 2), {"batch_axis": 1, "time_axis": 0},
          runtime=[("l", lens)])


# ---------------------------------------------------------------- resize

RESIZE_CASES = [
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"},
     [1, 1, 2.0, 1.5]),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, [1, 1, 0.6, 1.7]),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "align_corners"},
     [1, 1, 1.5, 2.0]),
    ({"mode": "linear"}, [1, 1, 2.0, 0.5]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [1, 1, 0.25, 3]),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 1.7, 0.8]),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1, 1, 1.5, 0.7]),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.4, 0.6]),
]


@pytest.mark.parametrize("attrs,scales", RESIZE_CASES)
def test_resize_scales(attrs, scales):
    x = rand(1, 2, 5, 6)
    consts = [("roi", np.array([], F)), ("scales", np.array(scales, F))]
    check("Resize", x, attrs, consts=consts, opset=18, reference="onnx", atol=1e-5)


def test_resize_sizes_axes_and_crop():
    x = rand(1, 2, 5, 6)
    crop = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
            "extrapolation_value": 9.0, "axes": [3, 2]}
    consts = [("roi", np.array([0.1, -0.2, 1.3, 0.9], F)), ("scales", np.array([], F)),
              ("sizes", np.array([4, 7], I64))]
    check("Resize", x, crop, consts=consts, opset=18, reference="onnx", atol=1e-5)


def test_upsample_and_resize_v10():
    x = rand(1, 1, 3, 4)
    check("Upsample", x, {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}, opset=7)
    check("Resize", x, {"mode": "linear"}, consts=[("s", np.array([1, 1, 2.0, 0.5], F))], opset=10)


def test_resize_integer_image():
    x = rand(1, 1, 4, 4, dtype=np.uint8, low=0, high=25)
    consts = [("roi", np.array([], F)), ("scales", np.array([1, 1, 1.5, 1.5], F))]
    check("Resize", x, {"mode": "linear"}, consts=consts, opset=13, reference="onnx")


def test_resize_half_precision():
    x = rand(1, 1, 4, 5, dtype=np.float16)
    consts = [("roi", np.array([], F)), ("scales", np.array([1, 1, 1.5, 0.6], F))]
    check("Resize", x, {"mode": "cubic"}, consts=consts, opset=13, reference="onnx", atol=2e-3)


@pytest.mark.parametrize("op,attrs,consts,message", [
    ("Resize", {"coordinate_transformation_mode": "corners"},
     [("r", np.array([], F)), ("s", np.array([1, 2], F))], "coordinate_transformation_mode"),
    ("Resize", {"mode": "nearest", "antialias": 1},
     [("r", np.array([], F)), ("s", np.array([1, 2], F))], "antialias"),
    ("Pad", {"mode": "mirror"}, [("p", np.array([0, 1, 0, 1], I64))], "Pad mode"),
    ("Split", {"axis": 1}, [("s", np.array([1, 1], I64))], "do not add up"),
    ("Reshape", {}, [("s", np.array([-1, -1], I64))], "more than one -1"),
])
def test_clear_errors(op, attrs, consts, message):
    m = node_model(op, rand(2, 3), attrs, consts, opset=19)
    with pytest.raises(cc.CompileError, match=message):
        cc.compile(m)
