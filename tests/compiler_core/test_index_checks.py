"""Run-time indices out of range: every op that addresses memory with data returns the
model's error code with a message instead of reading or writing outside its buffers, and the
same compiled model still runs in-range feeds correctly afterwards."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import assert_matches, make_model, rand

F, I64 = np.float32, np.int64


def gather():
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    return make_model([node], [("x", F, [2, 5]), ("i", I64, [3])], [("y", F, [2, 3])])


def gather_elements():
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)
    return make_model([node], [("x", F, [4, 3]), ("i", I64, [2, 3])], [("y", F, [2, 3])])


def gather_nd():
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    return make_model([node], [("x", F, [4, 3]), ("i", I64, [2, 2])], [("y", F, [2])])


def scatter_elements():
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)
    return make_model([node], [("x", F, [2, 6]), ("i", I64, [2, 2]), ("u", F, [2, 2])],
                      [("y", F, [2, 6])])


def scatter_nd():
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    return make_model([node], [("x", F, [5, 3]), ("i", I64, [2, 1]), ("u", F, [2, 3])],
                      [("y", F, [5, 3])])


def reverse_sequence():
    node = helper.make_node("ReverseSequence", ["x", "i"], ["y"], batch_axis=1, time_axis=0)
    return make_model([node], [("x", F, [4, 2]), ("i", I64, [2])], [("y", F, [4, 2])])


def max_unpool():
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    return make_model([node], [("x", F, [1, 1, 2, 2]), ("i", I64, [1, 1, 2, 2])],
                      [("y", F, [1, 1, 4, 4])], opset=11)


def roi_align():
    node = helper.make_node("RoiAlign", ["x", "rois", "i"], ["y"], output_height=2,
                            output_width=2, sampling_ratio=2)
    return make_model([node], [("x", F, [2, 1, 6, 6]), ("rois", F, [1, 4]), ("i", I64, [1])],
                      [("y", F, [1, 1, 2, 2])], opset=16)


# op -> (model, feeds without "i", good indices, out-of-range index sets)
CASES = {
    "Gather": (gather, {"x": rand(2, 5)}, [0, -5, 4], [[0, 5, 1], [-6, 0, 0], [2**40, 0, 0]]),
    "GatherElements": (gather_elements, {"x": rand(4, 3)}, [[0, 3, -4], [1, 2, 3]],
                       [[[0, 4, 0], [0, 0, 0]], [[0, 0, 0], [0, -5, 0]]]),
    "GatherND": (gather_nd, {"x": rand(4, 3)}, [[3, 2], [-4, -3]], [[[4, 0], [0, 0]],
                                                                    [[0, 3], [0, 0]]]),
    "ScatterElements": (scatter_elements, {"x": rand(2, 6), "u": rand(2, 2)}, [[0, 5], [-6, 1]],
                        [[[0, 6], [0, 1]], [[0, 1], [-7, 1]]]),
    "ScatterND": (scatter_nd, {"x": rand(5, 3), "u": rand(2, 3)}, [[4], [-5]],
                  [[[5], [0]], [[0], [-6]], [[-2**62], [0]]]),
    "ReverseSequence": (reverse_sequence, {"x": rand(4, 2)}, [4, 1], [[5, 1], [-1, 2]]),
    "MaxUnpool": (max_unpool, {"x": rand(1, 1, 2, 2)}, [[[[0, 3], [9, 15]]]],
                  [[[[[0, 3], [9, 16]]]], [[[[-1, 3], [9, 15]]]]]),
    "RoiAlign": (roi_align, {"x": rand(2, 1, 6, 6), "rois": np.array([[0, 0, 4, 4]], F)}, [1],
                 [[2], [-1]]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def compiled(request):
    make, feeds, good, bad = CASES[request.param]
    model = make()
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input}
    return request.param, model, cc.compile(model, input_shapes=shapes), feeds, good, bad


def test_out_of_range_indices_return_the_error_code(compiled):
    op, _, artifact, feeds, _, bad = compiled
    for indices in bad:
        with pytest.raises(cc.RuntimeInputError, match=f"{op} node .*out"):
            artifact.run({**feeds, "i": np.asarray(indices, I64)})
    assert any(op in m for m in artifact.meta["runtime_errors"])


def test_in_range_indices_still_match_onnxruntime(compiled):
    op, model, artifact, feeds, good, bad = compiled
    feeds = {**feeds, "i": np.asarray(good, I64)}
    with pytest.raises(cc.RuntimeInputError):  # a failed run leaves nothing behind
        artifact.run({**feeds, "i": np.asarray(bad[0], I64)})
    assert_matches(model, feeds, reference="ort" if op != "MaxUnpool" else "onnx")


def test_nan_and_infinite_coordinates_stay_in_bounds():
    """GridSample and RoiAlign turn float data into indices: NaN and inf must not escape."""
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="bilinear",
                            padding_mode="zeros")
    model = make_model([node], [("x", F, [1, 1, 4, 4]), ("g", F, [1, 2, 2, 2])],
                       [("y", F, [1, 1, 2, 2])], opset=16)
    artifact = cc.compile(model)
    grid = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.5, 3e9, np.nan], F).reshape(1, 2, 2, 2)
    out = artifact.run({"x": rand(1, 1, 4, 4), "g": grid})["y"]
    assert out.shape == (1, 1, 2, 2)
    make, feeds, _, _ = CASES["RoiAlign"]
    rois = np.array([[np.nan, -np.inf, np.inf, 1e38]], F)
    out = cc.compile(make()).run({**feeds, "rois": rois, "i": np.array([0], I64)})["y"]
    assert out.shape == (1, 1, 2, 2)
