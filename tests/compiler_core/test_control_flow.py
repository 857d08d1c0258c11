"""If (constant and run-time conditions, nested), Loop and Scan (unrolled) against ONNX
Runtime."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler_core as cc
from compiler_core.frontend.converters import control_flow
from compiler_core.frontend.onnx import import_model

from .helpers import assert_matches, assert_matches_each, make_model, rand

F = np.float32


def graph(nodes, outputs, inputs=(), name="branch"):
    """A subgraph; outputs are (name, shape) float tensors unless a dtype is given."""
    def info(o):
        name, shape, *dtype = o
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype[0] if dtype else F))
        return helper.make_tensor_value_info(name, elem, shape)
    return helper.make_graph(nodes, name, [info(i) for i in inputs], [info(o) for o in outputs])


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def const_node(name, array):
    value = numpy_helper.from_array(np.asarray(array))
    return helper.make_node("Constant", [], [name], value=value)


# ---------------------------------------------------------------- If

def scale_branches(shape=(2, 3)):
    then_b = graph([node("Mul", ["x", "x"], ["t"]), node("Softmax", ["t"], ["out"])],
                   [("out", shape)], name="then")
    else_b = graph([node("Neg", ["x"], ["out"])], [("out", shape)], name="else")
    return then_b, else_b


def test_if_run_time_condition_runs_one_branch():
    then_b, else_b = scale_branches()
    nodes = [node("ReduceSum", ["x"], ["s"], keepdims=0),
             node("Greater", ["s", "zero"], ["c"]),
             node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
             node("Add", ["y", "x"], ["z"])]
    model = make_model(nodes, [("x", F, (2, 3))], [("z", F, (2, 3))],
                       [("zero", np.array(0, F))], opset=13)
    x = np.abs(rand(2, 3, seed=1))
    assert_matches_each(model, [{"x": x}, {"x": -x}])


def test_run_time_if_is_two_guarded_branches_writing_one_value():
    then_b, else_b = scale_branches()
    model = make_model([node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [("c", np.bool_, ()), ("x", F, (2, 3))], [("y", F, (2, 3))], opset=13)
    g = import_model(model)
    copies = [n for n in g.nodes if n.op == "Copy" and n.guards]
    assert [(n.guards[0].cond.name, n.guards[0].when) for n in copies] == [("c", True),
                                                                           ("c", False)]
    assert copies[0].outputs == copies[1].outputs
    assert all(n.guards for n in g.nodes if n.op in ("Mul", "Softmax", "Neg"))


def test_if_condition_from_input_and_branch_outputs_outer_values():
    then_b = graph([], [("a", (3,))], name="then")             # an outer input, unchanged
    else_b = graph([const_node("k", np.full(3, 7, F))], [("k", (3,))], name="else")
    model = make_model([node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [("c", np.bool_, ()), ("a", F, (3,))], [("y", F, (3,))], opset=13)
    # ONNX Runtime refuses outer values as branch outputs
    feeds = [{"c": np.array(flag), "a": rand(3)} for flag in (True, False)]
    assert_matches_each(model, feeds, reference="onnx")


def test_if_constant_condition_inlines_the_branch():
    then_b, else_b = scale_branches()
    model = make_model([node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [("x", F, (2, 3))], [("y", F, (2, 3))], [("c", np.array(False))],
                       opset=13)
    graph_ir = import_model(model)
    assert [n.op for n in graph_ir.nodes] == ["Neg"] and not graph_ir.nodes[0].guards
    assert_matches(model, {"x": rand(2, 3)})


def test_nested_ifs_with_run_time_conditions():
    inner_then = graph([node("Mul", ["x", "two"], ["o"])], [("o", (4,))], name="inner_then")
    inner_else = graph([node("Sub", ["x", "two"], ["o"])], [("o", (4,))], name="inner_else")
    outer_then = graph([node("If", ["c2"], ["r"], then_branch=inner_then, else_branch=inner_else),
                        node("Relu", ["r"], ["o"])], [("o", (4,))], name="outer_then")
    outer_else = graph([node("Exp", ["x"], ["o"])], [("o", (4,))], name="outer_else")
    model = make_model([node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)],
                       [("c1", np.bool_, ()), ("c2", np.bool_, ()), ("x", F, (4,))],
                       [("y", F, (4,))], [("two", np.array(2, F))], opset=13)
    assert_matches_each(model, [{"c1": np.array(c1), "c2": np.array(c2), "x": rand(4)}
                                for c1 in (True, False) for c2 in (True, False)])


def test_if_with_several_outputs_and_graph_output():
    then_b = graph([node("Add", ["x", "x"], ["p"]), node("ReduceMax", ["x"], ["q"], keepdims=0)],
                   [("p", (2, 2)), ("q", ())], name="then")
    else_b = graph([node("Sub", ["x", "x"], ["p"]), node("ReduceMin", ["x"], ["q"], keepdims=0)],
                   [("p", (2, 2)), ("q", ())], name="else")
    model = make_model([node("If", ["c"], ["p", "q"], then_branch=then_b, else_branch=else_b)],
                       [("c", np.bool_, (1,)), ("x", F, (2, 2))], [("p", F, None), ("q", F, None)],
                       opset=13)
    assert_matches_each(model, [{"c": np.array([flag]), "x": rand(2, 2)} for flag in (True, False)])


def test_if_branches_with_different_shapes_need_a_constant_condition():
    then_b = graph([node("ReduceSum", ["x"], ["o"], keepdims=1)], [("o", None)], name="then")
    else_b = graph([node("Neg", ["x"], ["o"])], [("o", None)], name="else")
    model = make_model([node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [("c", np.bool_, ()), ("x", F, (2, 3))], [("y", F, None)], opset=13)
    with pytest.raises(cc.CompileError, match="both branches must agree"):
        cc.compile(model)


# ---------------------------------------------------------------- Loop

def accumulate_body():
    """carried s <- s + x * i, scan output s; the condition passes through."""
    return graph([node("Identity", ["cond_in"], ["cond_out"]),
                  node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
                  node("Mul", ["x", "fi"], ["xi"]),
                  node("Add", ["s_in", "xi"], ["s_out"]),
                  node("Identity", ["s_out"], ["scan"])],
                 [("cond_out", (), np.bool_), ("s_out", (3,)), ("scan", (3,))],
                 [("i", (), np.int64), ("cond_in", (), np.bool_), ("s_in", (3,))], name="body")


def test_loop_unrolls_with_carried_and_scan_outputs():
    model = make_model([node("Loop", ["M", "", "s0"], ["s", "stack"], body=accumulate_body())],
                       [("x", F, (3,)), ("s0", F, (3,))], [("s", F, (3,)), ("stack", F, (4, 3))],
                       [("M", np.array(4, np.int64))], opset=13)
    assert_matches(model, {"x": rand(3), "s0": rand(3, seed=2)})


def test_loop_stops_when_the_body_condition_turns_false():
    # cond_out = i < 2 is folded at compile time in every unrolled iteration
    body = graph([node("Less", ["i", "two"], ["cond_out"]),
                  node("Add", ["s_in", "x"], ["s_out"])],
                 [("cond_out", (), np.bool_), ("s_out", (3,))],
                 [("i", (), np.int64), ("cond_in", (), np.bool_), ("s_in", (3,))], name="body")
    model = make_model([node("Loop", ["M", "t", "s0"], ["s"], body=body)],
                       [("x", F, (3,)), ("s0", F, (3,))], [("s", F, (3,))],
                       [("M", np.array(10, np.int64)), ("t", np.array(True)),
                        ("two", np.array(2, np.int64))], opset=13)
    assert_matches(model, {"x": rand(3), "s0": rand(3, seed=2)})


def test_loop_inside_a_run_time_if():
    loop = node("Loop", ["M", "", "x"], ["s", "stack"], body=accumulate_body())
    then_b = graph([loop], [("s", (3,))], name="then")
    else_b = graph([node("Neg", ["x"], ["o"])], [("o", (3,))], name="else")
    model = make_model([node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [("c", np.bool_, ()), ("x", F, (3,))], [("y", F, (3,))],
                       [("M", np.array(3, np.int64))], opset=13)
    assert_matches_each(model, [{"c": np.array(flag), "x": rand(3)} for flag in (True, False)])


def test_loop_with_run_time_trip_count_is_refused():
    model = make_model([node("Loop", ["M", "", "s0"], ["s", "stack"], body=accumulate_body())],
                       [("M", np.int64, ()), ("x", F, (3,)), ("s0", F, (3,))],
                       [("s", F, (3,)), ("stack", F, None)], opset=13)
    with pytest.raises(cc.CompileError, match="trip count M depends on the model's inputs"):
        cc.compile(model)


def test_loop_iteration_cap(monkeypatch):
    monkeypatch.setattr(control_flow, "MAX_UNROLLED_ITERATIONS", 20)
    body = graph([node("Add", ["s_in", "x"], ["s_out"])],
                 [("cond_in", (), np.bool_), ("s_out", (3,))],
                 [("i", (), np.int64), ("cond_in", (), np.bool_), ("s_in", (3,))], name="body")
    model = make_model([node("Loop", ["", "t", "s0"], ["s"], body=body)],
                       [("x", F, (3,)), ("s0", F, (3,))], [("s", F, (3,))],
                       [("t", np.array(True))], opset=13)
    with pytest.raises(cc.CompileError, match="more than 20 iterations"):
        import_model(model)


# ---------------------------------------------------------------- Scan

def test_scan_directions_and_output_axis():
    """Running sum over the rows of x read back to front; the per-step outputs are stacked
    along axis 1 and the second one in reverse order."""
    body = graph([node("Add", ["acc_in", "row"], ["acc_out"]),
                  node("Mul", ["row", "row"], ["sq"]),
                  node("Identity", ["acc_out"], ["seen"])],
                 [("acc_out", (4,)), ("seen", (4,)), ("sq", (4,))],
                 [("acc_in", (4,)), ("row", (4,))], name="body")
    scan = node("Scan", ["acc0", "x"], ["acc", "seen_all", "squares"], body=body,
                num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
                scan_output_axes=[1, 0], scan_output_directions=[0, 1])
    model = make_model([scan], [("acc0", F, (4,)), ("x", F, (4, 5))],
                       [("acc", F, None), ("seen_all", F, None), ("squares", F, None)], opset=16)
    assert_matches(model, {"acc0": rand(4, seed=1), "x": rand(4, 5, seed=2)})


def test_runtime_if_branch_invalid_for_compiled_shapes_fails_only_when_taken():
    """The else branch reshapes to a size the compiled input cannot have: compiling works,
    taking that branch at run time raises with the reason."""
    import compiler_core as cc
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    bad_shape = helper.make_tensor("bad", TensorProto.INT64, [2], [5, 5])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=bad_shape),
         helper.make_node("Reshape", ["x", "s"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    m = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                   [("c", np.bool_, ()), ("x", np.float32, (2, 3))], [("y", np.float32, None)])
    art = cc.compile(m)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(art.run({"c": np.array(True), "x": x})["y"], np.maximum(x, 0))
    with pytest.raises(cc.RuntimeInputError, match="else_branch was taken but cannot run"):
        art.run({"c": np.array(False), "x": x})
