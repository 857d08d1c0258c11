"""Depthwise convs (group == channels) take the direct kernel (kernels/depthwise.py): against
ONNX Runtime, with BatchNorm folded and bias, activation and residual fused into it."""
import numpy as np
import onnx
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec

from .helpers import assert_matches, make_model, rand

F = np.float32


def _model(c, h, w, k, stride, conv_attrs, after=(), bias=True, residual=False):
    """x -> depthwise Conv [-> Add(r)] -> each op of `after` in turn."""
    attrs = dict(group=c, strides=[stride, stride], kernel_shape=[k, k], **conv_attrs)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["t0"], **attrs)]
    inits = [("w", rand(c, 1, k, k, seed=1))] + ([("b", rand(c, seed=2))] if bias else [])
    if residual:
        nodes.append(helper.make_node("Add", ["t0", "r"], ["t1"]))
    for op in after:
        nodes.append(helper.make_node(op, [nodes[-1].output[0]], [f"t{len(nodes)}"]))
    out_shape = _conv_shape(nodes[0], (1, c, h, w), inits)
    inputs = [("x", F, (1, c, h, w))] + ([("r", F, out_shape)] if residual else [])
    return make_model(nodes, inputs, [(nodes[-1].output[0], F, out_shape)], inits), out_shape


def _conv_shape(conv, x_shape, inits):
    m = make_model([conv], [("x", F, x_shape)], [("t0", F, None)], inits)
    out = onnx.shape_inference.infer_shapes(m).graph.output[0]
    return tuple(d.dim_value for d in out.type.tensor_type.shape.dim)


def _node(c, hw, k, stride):
    """The DepthwiseConv node of a square plane's conv with "same" padding."""
    from compiler_core.frontend.onnx import import_model
    model, _ = _model(c, hw, hw, k, stride, {"pads": [k // 2] * 4})
    return next(n for n in import_model(model).nodes if n.op == "DepthwiseConv")


def _check(c, h, w, k, stride, conv_attrs, **kw):
    model, out_shape = _model(c, h, w, k, stride, conv_attrs, **kw)
    feeds = {"x": rand(1, c, h, w)}
    if kw.get("residual"):
        feeds["r"] = rand(*out_shape, seed=3)
    assert_matches(model, feeds)
    return model


# (channels, height, width, kernel, stride, pads or auto_pad)
CASES = [
    (4, 9, 9, 3, 1, {"pads": [1, 1, 1, 1]}),
    (4, 10, 10, 3, 2, {"pads": [1, 1, 1, 1]}),
    (3, 7, 7, 5, 1, {"pads": [2, 2, 2, 2]}),
    (3, 7, 7, 5, 2, {"pads": [2, 2, 2, 2]}),
    (5, 3, 3, 5, 1, {"pads": [2, 2, 2, 2]}),             # plane smaller than the kernel
    (2, 23, 37, 3, 2, {"pads": [0, 1, 1, 0]}),           # asymmetric pads, odd sizes
    (2, 24, 36, 5, 2, {"auto_pad": "SAME_UPPER"}),
    (2, 2, 5, 5, 1, {"pads": [3, 1, 0, 4]}),             # rows of padding only
    (3, 40, 70, 3, 1, {"pads": [1, 1, 1, 1]}),           # several whole vectors per row
    (3, 41, 75, 5, 2, {"pads": [1, 2, 2, 1]}),
    (2, 12, 12, 3, 1, {}),                               # no padding
    (2, 1, 1, 3, 1, {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("c,h,w,k,stride,pads", CASES)
def test_depthwise_conv(c, h, w, k, stride, pads):
    _check(c, h, w, k, stride, pads, after=("Relu",))


@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_conv_with_residual_and_hardswish(bias):
    _check(3, 20, 19, 3, 1, {"pads": [1, 1, 1, 1]}, after=("HardSwish",), bias=bias,
           residual=True)


def test_depthwise_conv_with_sigmoid_and_stride_2():
    _check(3, 29, 30, 5, 2, {"pads": [2, 2, 2, 2]}, after=("Sigmoid",))


def test_batchnorm_and_activation_fold_into_the_depthwise_kernel():
    c = 6
    conv = helper.make_node("Conv", ["x", "w"], ["c"], group=c, kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    bn = helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"])
    act = helper.make_node("HardSwish", ["n"], ["y"])
    inits = [("w", rand(c, 1, 3, 3)), ("s", rand(c, seed=1, low=0.5)), ("bb", rand(c, seed=2)),
             ("m", rand(c, seed=3)), ("v", rand(c, seed=4, low=0.5))]
    model = make_model([conv, bn, act], [("x", F, (1, c, 16, 16))], [("y", F, None)], inits)
    assert_matches(model, {"x": rand(1, c, 16, 16)})
    kernels = cc.compile(model).meta["kernels"]
    assert [k["op"] for k in kernels] == ["DepthwiseConv"]
    assert len(kernels[0]["onnx_nodes"]) == 3
    plane = 16 * 16
    assert kernels[0]["flops"] == c * plane * (2 * 9 + 2)  # taps, then bias and HardSwish


def test_grouped_conv_with_two_channels_per_group_keeps_the_generic_path():
    c = 4
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=c, kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    model = make_model([conv], [("x", F, (1, c, 9, 9))], [("y", F, None)],
                       [("w", rand(2 * c, 1, 3, 3))])
    assert_matches(model, {"x": rand(1, c, 9, 9)})
    assert "DepthwiseConv" not in {k["op"] for k in cc.compile(model).meta["kernels"]}


FLAT_MODEL = (8, 6, 6, 5, 1, {"pads": [2, 2, 2, 2]})  # in fewer vectors flat, in 8 or 16 lanes


@pytest.mark.parametrize("case,flat", [((24, 13, 21, 5, 1, {"pads": [2, 2, 2, 2]}), False),
                                       (FLAT_MODEL, True),
                                       ((5, 23, 37, 5, 2, {"pads": [2, 1, 2, 2]}), False),
                                       ((3, 19, 44, 3, 2, {"pads": [1, 0, 1, 1]}), False)])
def test_every_schedule_of_the_search_space_is_correct(case, flat, monkeypatch):
    """The autotuner's candidates (chains of taps, planes split or not, flat planes where
    they fit, dense columns or phase rows where the column stride is 2, blocks of rows that
    leave a ragged rest) all match ORT, at one and two threads, with a residual and an
    activation."""
    import tempfile

    from compiler_core.codegen.target_machine import host_spec
    from compiler_core.frontend.onnx import import_model
    from compiler_core.kernels import schedule
    from compiler_core.kernels.depthwise import DepthwiseSchedule, depthwise_space

    from .helpers import ort_run
    model, out_shape = _model(*case, after=("HardSwish",), residual=True)
    c, h, w = case[:3]
    feeds = {"x": rand(1, c, h, w), "r": rand(*out_shape, seed=3)}
    node = next(n for n in import_model(model).nodes if n.op == "DepthwiseConv")
    space = depthwise_space(node, host_spec())
    strided = case[4] > 1
    assert DepthwiseSchedule(2, True) in space
    assert len(space) == 8 * (1 + flat) * (1 + 2 * strided) + 4
    assert {s.row_block for s in space} == {1, 2, 4}
    assert not any(s.row_block > 1 and (s.flat or s.dense_columns or s.phase_rows)
                   for s in space)
    assert any(s.flat for s in space) == flat
    assert any(s.dense_columns for s in space) == strided
    assert any(s.phase_rows for s in space) == strided
    assert not any(s.phase_rows and s.dense_columns for s in space)
    expected = next(iter(ort_run(model, feeds).values()))
    for sched in space:
        monkeypatch.setitem(schedule.DEFAULTS, "DepthwiseConv", lambda n, spec, s=sched: s)
        with tempfile.TemporaryDirectory() as tmp:
            art = cc.compile(model).save(tmp)
            for threads in (1, 2):
                got = next(iter(cc.load(art, threads=threads).run(feeds).values()))
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=str(sched))


AVX512 = MachineSpec("x86_64-unknown-linux-gnu", "znver4",
                     "+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl")
# an AVX2 core with no measured depthwise rules of its own (FLAT_AVX2_CPUS)
AVX2 = MachineSpec("x86_64-unknown-linux-gnu", "haswell", "+avx,+avx2,+fma")


@pytest.mark.parametrize("c,hw,k,stride,flat", [
    (960, 7, 5, 1, True), (672, 14, 3, 1, True), (120, 28, 5, 1, False),  # too much code
    (672, 14, 5, 2, False), (64, 56, 3, 1, False)])
def test_small_planes_go_flat_on_avx512(c, hw, k, stride, flat):
    """Flat where rows fill few of 16 lanes (a 7x7 plane: 4 vectors, not 7), not on AVX2."""
    from compiler_core.kernels.depthwise import default_depthwise_schedule
    node = _node(c, hw, k, stride)
    assert default_depthwise_schedule(node, AVX512).flat == flat
    assert not default_depthwise_schedule(node, AVX2).flat


@pytest.mark.parametrize("c,hw,k,stride,avx512", [
    (64, 56, 3, 1, "strided"), (64, 56, 3, 2, "strided"), (64, 56, 5, 1, "strided"),
    (72, 56, 5, 2, "phase rows"),    # 28 outputs a row, 15 KB of phase rows
    (672, 14, 5, 2, "strided"),      # 7 outputs a row: too few for phase rows
    (16, 128, 5, 2, "strided")])     # 68 KB of phase rows: past L1
def test_strided_columns_take_dense_columns_or_phase_rows(c, hw, k, stride, avx512):
    """A column stride takes dense columns and one pick on AVX2 (masked runs and shuffles
    per tap cost more there); on AVX-512 phase rows on 5 taps a row where a row's outputs
    fill vectors and the plane's phase rows fit L1, else strided loads (in blocks of rows)."""
    from compiler_core.kernels.depthwise import default_depthwise_schedule
    node = _node(c, hw, k, stride)
    avx2 = default_depthwise_schedule(node, AVX2)
    assert (avx2.dense_columns, avx2.phase_rows) == (stride > 1, False)
    wide = default_depthwise_schedule(node, AVX512)
    assert (wide.dense_columns, wide.phase_rows) == (avx512 == "dense", avx512 == "phase rows")


ZEN1 = MachineSpec("x86_64-unknown-linux-gnu", "znver1", "+avx,+avx2,+fma")


@pytest.mark.parametrize("c,hw,k,stride,plan", [
    (672, 14, 3, 1, "flat"), (960, 7, 5, 1, "rows"),  # 7 vectors of 8 lanes either way
    (120, 28, 5, 1, "rows"),                          # too much code flat
    (240, 28, 3, 2, "phase rows"), (672, 14, 5, 2, "phase rows"),
    (64, 112, 3, 2, "dense"), (16, 128, 5, 2, "dense")])  # 51 and 68 KB: past L1
def test_zen1_takes_flat_planes_and_phase_rows_where_they_fit(c, hw, k, stride, plan):
    """On Zen 1 (FLAT_AVX2_CPUS) flat planes where they take fewer vectors, and phase rows
    for a column stride of 2 where the plane's fit L1, whatever the taps and row length."""
    _assert_plan(c, hw, k, stride, ZEN1, plan)


ZEN3 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", "+avx,+avx2,+fma")


@pytest.mark.parametrize("c,hw,k,stride,plan", [
    (672, 14, 3, 1, "flat"), (200, 14, 3, 1, "flat"), (960, 7, 5, 1, "rows"),
    (120, 28, 5, 1, "rows"),
    (72, 56, 5, 2, "phase rows"), (240, 28, 3, 2, "dense"), (64, 56, 3, 2, "dense"),
    (672, 14, 5, 2, "dense"),                         # 7 outputs a row: under a vector
    (16, 128, 5, 2, "dense")])                        # 68 KB of phase rows: past L1
def test_zen3_takes_flat_planes_and_phase_rows_as_avx512_does(c, hw, k, stride, plan):
    """Zen 3 flat as Zen 1, phase rows as AVX-512: on 5 taps a row or more, where a row's
    outputs fill a vector and the plane's phase rows fit L1."""
    _assert_plan(c, hw, k, stride, ZEN3, plan)


def _assert_plan(c, hw, k, stride, spec, plan):
    from compiler_core.kernels.depthwise import default_depthwise_schedule
    node = _node(c, hw, k, stride)
    s = default_depthwise_schedule(node, spec)
    assert (s.flat, s.phase_rows, s.dense_columns) == (
        plan == "flat", plan == "phase rows", plan == "dense")


def test_scratch_arrays_are_bounded():
    from compiler_core.ir.loops import MAX_SCRATCH_BYTES, KernelBuilder
    kb = KernelBuilder("k")
    assert kb.scratch("s", np.float32, MAX_SCRATCH_BYTES // 4).size == MAX_SCRATCH_BYTES // 4
    with pytest.raises(ValueError, match="scratch"):
        kb.scratch("s", np.float32, MAX_SCRATCH_BYTES // 4 + 1)


GUARDED_RUN = """
import ctypes, mmap, sys, numpy as np
import compiler_core as cc
art, c, hw, at_end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
n, page = c * hw * hw * 4, mmap.PAGESIZE
pages = -(-n // page) + 2
mm = mmap.mmap(-1, pages * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
libc = ctypes.CDLL(None)
for p in (0, pages - 1):  # unreadable pages on both sides of the input
    assert libc.mprotect(ctypes.c_void_p(base + p * page), page, 0) == 0
start = (pages - 1) * page - n if at_end else page
x = np.frombuffer(mm, np.float32, c * hw * hw, start).reshape(1, c, hw, hw)
x[...] = np.load(art + ".x.npy")
np.save(art + ".y.npy", cc.load(art).run({"x": x})["t0"])
"""


@pytest.mark.parametrize("c,hw,k,zen1", [(24, 28, 5, False), (16, 7, 5, False),
                                         (8, 13, 3, True)])  # on Zen 1 13x13 goes flat
@pytest.mark.parametrize("at_end", [False, True])
def test_avx2_edge_taps_blend_plain_loads_inside_the_input(c, hw, k, zen1, at_end, tmp_path,
                                                           monkeypatch):
    """AVX2's edge vectors and flat planes load whole vectors and blend (Buf.vec_inside)
    only where every lane lies inside the plane: with the input flush against an unreadable
    page, before or after it, the kernel still reads nothing outside and matches ONNX
    Runtime."""
    import subprocess
    import sys

    from compiler_core.kernels import depthwise

    from .helpers import ort_run
    if zen1:
        monkeypatch.setattr(depthwise, "FLAT_AVX2_CPUS", ("x86-64-v3",))
    model, _ = _model(c, hw, hw, k, 1, {"pads": [k // 2] * 4})
    x = rand(1, c, hw, hw, seed=3)
    art = str(tmp_path / "art")
    cc.compile(model, target="x86-64-v3").save(art)
    np.save(art + ".x.npy", x)
    run = subprocess.run([sys.executable, "-c", GUARDED_RUN, art, str(c), str(hw),
                          str(int(at_end))], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    expected = ort_run(model, {"x": x})["t0"]
    np.testing.assert_allclose(np.load(art + ".y.npy"), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("c,hw,k,stride,avx512,avx2", [
    (120, 28, 5, 1, 4, 2), (240, 28, 3, 2, 4, 1),  # AVX2: dense columns
    (960, 7, 5, 1, 1, 2),                          # AVX-512: flat
    (72, 56, 5, 2, 1, 1), (64, 112, 3, 2, 4, 1),   # AVX-512: phase rows, strided taps
    (672, 14, 5, 2, 4, 1)])
def test_rows_of_taps_go_in_blocks_of_4_with_32_registers_and_2_with_16(c, hw, k, stride,
                                                                        avx512, avx2):
    """Only rows of taps take blocks: flat planes, dense columns and phase rows keep 1."""
    from compiler_core.kernels.depthwise import default_depthwise_schedule
    node = _node(c, hw, k, stride)
    assert default_depthwise_schedule(node, AVX512).row_block == avx512
    assert default_depthwise_schedule(node, AVX2).row_block == avx2
