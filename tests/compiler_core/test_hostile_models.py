"""Hostile models are refused at compile time with a CompileError that says what is wrong,
each in a real sandboxed child limited to 4 GiB, within 60 s."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sandbox.limits import Limits
from sandbox.runner import ChildSpec, run_child

from .helpers import make_model

F, I64 = np.float32, np.int64
BIG = 2**31


def relu(opset=17):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])],
                      [("y", F, [2, 3])], opset=opset)


def duplicate_producers():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second")]
    return make_model(nodes, [("x", F, [2])], [("y", F, [2])])


def overwrites_input():
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="loop")]
    return make_model(nodes, [("x", F, [2])], [("x", F, [2])])


def one_input(op, inits, shape=(1, 1, 4, 4), out=None, **attrs):
    names = ["x", *[n for n, _ in inits]]
    node = helper.make_node(op, names, ["y"], **attrs)
    return make_model([node], [("x", F, list(shape))], [("y", F, out)], inits)


def with_initializer(tensor: TensorProto):
    model = make_model([helper.make_node("Add", ["x", tensor.name], ["y"])], [("x", F, [2, 3])],
                       [("y", F, None)])
    model.graph.initializer.append(tensor)
    return model


def short_raw_data():
    t = numpy_helper.from_array(np.ones((2, 3), F), "w")
    t.raw_data = t.raw_data[:8]
    return with_initializer(t)


def wrong_value_count():
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    t.float_data.extend([1.0, 2.0, 3.0])
    return with_initializer(t)


def astronomic_initializer():
    t = numpy_helper.from_array(np.ones((2,), F), "w")
    t.dims[:] = [2**31, 2**31]
    return with_initializer(t)


def const_node(op, inputs, **attrs):
    """A node whose inputs are all constants: the importer folds it at compile time."""
    nodes = [helper.make_node(op, [n for n, _ in inputs], ["c"], **attrs),
             helper.make_node("Add", ["x", "c"], ["y"])]
    return make_model(nodes, [("x", F, [1])], [("y", F, None)], inputs)


CASES = {
    "duplicate producers": (duplicate_producers, {}, "written by node 'first' and by node"),
    "node overwrites an input": (overwrites_input, {}, "written by a graph input"),
    "opset that does not exist": (lambda: relu(opset=99), {}, "opset 99, which does not exist"),
    "opset zero": (lambda: relu(opset=0), {}, "does not exist"),
    "2^62-element input": (lambda: make_model([helper.make_node("Relu", ["x"], ["y"])],
                                              [("x", F, [BIG, BIG])], [("y", F, None)]),
                           {}, "per-tensor limit"),
    "huge input_shapes": (lambda: make_model([helper.make_node("Relu", ["x"], ["y"])],
                                             [("x", F, ["n"])], [("y", F, None)]),
                          {"x": [2**40]}, "per-tensor limit"),
    "Pad bomb": (lambda: one_input("Pad", [("p", np.array([0, 0, 0, 0, 0, 0, BIG, BIG], I64))]),
                 {}, "per-tensor limit"),
    "Resize bomb": (lambda: one_input("Resize", [("r", np.zeros(0, F)),
                                                 ("s", np.array([1, 1, 1e6, 1e6], F))]),
                    {}, "Resize's output"),
    "Expand bomb": (lambda: one_input("Expand", [("s", np.array([BIG, BIG, 4, 4], I64))]),
                    {}, "per-tensor limit"),
    "Tile bomb": (lambda: one_input("Tile", [("r", np.array([BIG, BIG, 1, 1], I64))]),
                  {}, "per-tensor limit"),
    "ConstantOfShape bomb": (lambda: const_node("ConstantOfShape",
                                                [("s", np.array([2**40], I64))]),
                             {}, "per-tensor limit"),
    "Range bomb": (lambda: const_node("Range", [("a", np.array(0, I64)),
                                                ("b", np.array(2**40, I64)),
                                                ("d", np.array(1, I64))]), {}, "limit"),
    "broadcast bomb": (lambda: const_node("Add", [("a", np.ones((2**16, 1), F)),
                                                  ("b", np.ones((1, 2**16), F))]),
                       {}, "per-tensor limit"),
    "raw data shorter than the shape": (short_raw_data, {}, "needs 24 bytes of raw data"),
    "value count not the shape's": (wrong_value_count, {}, "needs 6 values"),
    "2^62-element initializer": (astronomic_initializer, {}, "per-tensor limit"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_model_is_refused_quickly_in_4_gib(case, tmp_path):
    make, shapes, words = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    (work / "model.onnx").write_bytes(make().SerializeToString())
    spec = ChildSpec("refuse", {"model_path": str(work / "model.onnx"), "input_shapes": shapes},
                     work, 60, Limits(memory_mb=4096), module="tests.compiler_core.hostile_child")
    outcome = run_child(spec)
    assert outcome["refused"], f"{case} compiled"
    assert words in outcome["error"], outcome["error"]
    assert outcome["seconds"] < 60
    print(f"{case}: refused in {outcome['seconds']:.2f} s, peak {outcome['peak_mb']:.0f} MiB: "
          f"{outcome['error'][:160]}")


def test_arena_over_its_cap_is_refused(monkeypatch):
    import compiler_core as cc
    monkeypatch.setenv("TENSORFORGE_MAX_ARENA_BYTES", str(2**20))
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])]
    model = make_model(nodes, [("x", F, [1024, 1024])], [("y", F, None)])
    with pytest.raises(cc.CompileError, match="TENSORFORGE_MAX_ARENA_BYTES"):
        cc.compile(model, opt_level=0)  # unfused: h (4 MiB) lives in the arena


def test_external_data_read_many_times_counts_against_the_size_limit(tmp_path, monkeypatch):
    """A small file whose tensors all point at the same bytes must not expand past the cap."""
    import compiler_core as cc
    (tmp_path / "w.bin").write_bytes(np.ones(2**16, F).tobytes())
    tensors = []
    for k in range(64):
        t = numpy_helper.from_array(np.ones(2**16, F), f"w{k}")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="w.bin")
        tensors.append(t)
    nodes = [helper.make_node("Add", ["x", f"w{k}"], [f"y{k}"]) for k in range(64)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [2**16])],
                              [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None)
                               for k in range(64)], tensors)
    (tmp_path / "m.onnx").write_bytes(helper.make_model(graph).SerializeToString())
    monkeypatch.setenv("TENSORFORGE_MAX_MODEL_BYTES", str(4 * 2**20))
    with pytest.raises(cc.CompileError, match="over the limit"):
        cc.compile(tmp_path / "m.onnx")
