"""Graph passes, each on a small graph of its own."""
import numpy as np
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
