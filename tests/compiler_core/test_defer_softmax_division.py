"""passes/defer_softmax_division: a fused softmax's division by its row sums moves into the
MatMul that reads its rows."""
import numpy as np
import pytest
from onnx import helper

from compiler_core.frontend.onnx import import_model
from compiler_core.passes.pipeline import split_at_schedules

from .helpers import assert_matches, make_model, rand

F = np.float32


def _softmax_then_product(a_shape, b_shape, v_shape, p_is_output=False, p_as_b=False):
    """Y = softmax(A B, last axis) V, or V softmax(A B) with `p_as_b`."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["v", "p"] if p_as_b else ["p", "v"], ["y"])]
    outputs = [("y", F, None)] + ([("p", F, None)] if p_is_output else [])
    inputs = [("a", F, a_shape), ("b", F, b_shape), ("v", F, v_shape)]
    return make_model(nodes, inputs, outputs)


def _feeds(model):
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input}
    # scores up to about +-15: exps over several orders of magnitude
    return {"a": rand(*shapes["a"], seed=1, low=-2, high=2), "b": rand(*shapes["b"], seed=2),
            "v": rand(*shapes["v"], seed=3)}


def _matmuls(model):
    """The MatMuls as defer_softmax_division leaves them (fuse_attention, next, would make
    attention's two one node)."""
    graph = import_model(model)
    before, after = split_at_schedules(3)
    for p in before + after:
        graph = graph if p.__name__ == "fuse_attention" else p(graph)
    return [n for n in graph.nodes if n.op == "MatMul"]


@pytest.mark.parametrize("a_shape, b_shape, v_shape", [
    ((2, 3, 20, 8), (2, 3, 8, 37), (2, 3, 37, 5)),  # attention: rows final block by block
    ((13, 400), (400, 21), (21, 6)),  # K in two chunks: the rows are final only at the end
    ((7, 384), (384, 700), (700, 9)),  # several blocks of columns: the same
    ((9, 16), (16, 3), (3, 5)),  # too few columns for register tiles: dot products
    ((1, 5, 16), (16, 17), (2, 17, 4)),  # a single row, broadcast over the second's batch
])
def test_the_reader_divides_by_the_row_sums(a_shape, b_shape, v_shape):
    m = _softmax_then_product(a_shape, b_shape, v_shape)
    # K = 384 scores of +-15 lose 6e-6 to float32 sums before any softmax, fused or not
    assert_matches(m, _feeds(m), atol=1e-5)
    scores, product = _matmuls(m)
    sums = scores.outputs[1]
    assert scores.attrs["softmax"] == "deferred" and sums.shape == (*a_shape[:-1], 1)
    assert product.inputs[2] is sums and product.attrs["activation"]["program"][0][0] == "Mul"


@pytest.mark.parametrize("p_is_output, p_as_b", [(True, False), (False, True)])
def test_the_division_stays_where_the_rows_are_read_otherwise(p_is_output, p_as_b):
    m = _softmax_then_product((2, 6, 8), (2, 8, 6), (2, 6, 6), p_is_output, p_as_b)
    assert_matches(m, _feeds(m), atol=1e-6)
    scores, product = _matmuls(m)
    assert scores.attrs["softmax"] is True and len(scores.outputs) == 1
    assert len(product.inputs) == 2 and not product.attrs.get("activation")
