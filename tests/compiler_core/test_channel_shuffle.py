"""A channel shuffle before a depthwise conv folds into the conv's reads
(passes/fold_channel_shuffle.py): against ONNX Runtime, through every depthwise schedule."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model
from compiler_core.passes.dce import eliminate_dead_code
from compiler_core.passes.fold_channel_shuffle import fold_channel_shuffle

from .helpers import assert_matches, make_model, rand

F = np.float32


def _shuffle_model(groups, per_group, hw, k, stride, merged=False, keep_shuffled=False,
                   perm=None, batch=1):
    """x -> Reshape (N, A, B, H, W) (or (N, A, B, H*W) if merged) -> Transpose -> Reshape
    -> depthwise Conv k x k "same" [and the shuffled tensor as an output too]."""
    c = groups * per_group
    split = [batch, groups, per_group] + ([hw * hw] if merged else [hw, hw])
    perm = perm or [0, 2, 1] + list(range(3, len(split)))
    nodes = [helper.make_node("Reshape", ["x", "split"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=perm),
             helper.make_node("Reshape", ["t", "back"], ["shuffled"]),
             helper.make_node("Conv", ["shuffled", "w", "b"], ["y"], group=c,
                              kernel_shape=[k, k], strides=[stride, stride],
                              pads=[k // 2] * 4)]
    inits = [("split", np.array(split, np.int64)), ("back", np.array([batch, c, hw, hw], np.int64)),
             ("w", rand(c, 1, k, k, seed=1)), ("b", rand(c, seed=2))]
    outputs = [("y", F, None)] + ([("shuffled", F, None)] if keep_shuffled else [])
    return make_model(nodes, [("x", F, (batch, c, hw, hw))], outputs, inits)


def _kernels(model) -> list[str]:
    return [k["op"] for k in cc.compile(model).meta["kernels"]]


@pytest.mark.parametrize("groups,per_group,hw,k,stride,merged,batch", [
    (4, 28, 14, 3, 1, False, 1),   # ShuffleNet's shape of shuffle
    (3, 5, 9, 3, 2, True, 1),      # height and width merged in the split
    (2, 3, 6, 5, 1, False, 1),     # a plane that goes flat on AVX-512
    (8, 2, 13, 3, 2, False, 1),
    (4, 3, 7, 3, 1, False, 3),     # the map keeps each image's planes
])
def test_a_shuffle_before_a_depthwise_conv_is_read_in_place(groups, per_group, hw, k, stride,
                                                            merged, batch):
    model = _shuffle_model(groups, per_group, hw, k, stride, merged, batch=batch)
    assert_matches(model, {"x": rand(batch, groups * per_group, hw, hw)})
    assert "Transpose" not in _kernels(model)


def test_a_shuffle_read_elsewhere_too_stays_for_its_other_reader():
    model = _shuffle_model(4, 6, 10, 3, 1, keep_shuffled=True)
    assert_matches(model, {"x": rand(1, 24, 10, 10)})
    assert "Transpose" in _kernels(model)


@pytest.mark.parametrize("perm", [[0, 1, 2, 3, 4], [0, 2, 1, 4, 3]])
def test_other_transposes_are_not_taken_for_a_shuffle(perm):
    model = _shuffle_model(4, 6, 10, 3, 1, perm=perm)
    graph = eliminate_dead_code(fold_channel_shuffle(import_model(model)))
    dw = next(n for n in graph.nodes if n.op == "DepthwiseConv")
    assert "channel_shuffle" not in dw.attrs
    assert_matches(model, {"x": rand(1, 24, 10, 10)})


def test_every_depthwise_schedule_reads_the_shuffled_planes(monkeypatch):
    """Rows, blocks of rows, flat planes, dense columns and phase rows each read x through
    the plane map (kernels/depthwise.py)."""
    from compiler_core.codegen.target_machine import host_spec
    from compiler_core.kernels import schedule
    from compiler_core.kernels.depthwise import depthwise_space

    from .helpers import ort_run
    feeds = {"x": rand(1, 12, 8, 8)}
    for stride in (1, 2):
        model = _shuffle_model(3, 4, 8, 5, stride)
        expected = ort_run(model, feeds)["y"]
        graph = fold_channel_shuffle(import_model(model))
        node = next(n for n in graph.nodes if n.op == "DepthwiseConv")
        assert node.attrs["channel_shuffle"] == 3
        for sched in depthwise_space(node, host_spec()):
            monkeypatch.setitem(schedule.DEFAULTS, "DepthwiseConv", lambda n, s, t=sched: t)
            got = cc.compile(model).run(feeds)["y"]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=str(sched))
