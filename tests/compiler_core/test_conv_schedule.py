"""Conv schedules: the implicit GEMM split over threads by columns or output channels, and
every tile/split choice of the autotuner's space computing the same result."""
import tempfile

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.kernels import schedule
from compiler_core.kernels.conv import (ConvSchedule, conv_gemm_shape, conv_space,
                                        default_conv_schedule, panels_size, split_blocks,
                                        winograd_schedule)
from compiler_core.kernels.matmul import GemmShape, GemmTiles
from compiler_core.passes.pipeline import run_pipeline

from .helpers import AVX2, AVX512, make_model, ort_run, rand

F = np.float32


def conv_model(n, c, oc, hw, k, stride=1, pad=None, group=1, relu=True, residual=False):
    pad = k // 2 if pad is None else pad
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4,
                              strides=[stride] * 2, group=group)]
    out = (hw + 2 * pad - k) // stride + 1
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    inputs = [("x", F, (n, c, hw, hw))] + ([("r", F, (n, oc, out, out))] if residual else [])
    consts = [("w", rand(oc, c // group, k, k, seed=1)), ("b", rand(oc, seed=2))]
    return make_model(nodes, inputs, [("y", F, (n, oc, out, out))], consts)


def feeds_for(model):
    return {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=5 + j)
            for j, i in enumerate(model.graph.input)}


def conv_node(model):
    graph = import_model(model)
    return next(n for n in graph.nodes if n.op == "Conv")


CASES = {
    "3x3 padded, wide output": dict(n=1, c=32, oc=48, hw=28, k=3),
    "1x1, direct store": dict(n=1, c=64, oc=40, hw=20, k=1),
    "strided 3x3": dict(n=1, c=16, oc=32, hw=31, k=3, stride=2),
    "batch of 2 with residual": dict(n=2, c=24, oc=36, hw=14, k=3, residual=True),
    "grouped": dict(n=1, c=32, oc=64, hw=16, k=3, group=4),
    "depthwise": dict(n=1, c=64, oc=64, hw=24, k=3, group=64),
    "few columns, many channels": dict(n=1, c=256, oc=256, hw=5, k=3),
    "one pixel, many weights (squeeze-excite)": dict(n=1, c=240, oc=960, hw=1, k=1),
    "7x7, an odd few channel panels halved": dict(n=1, c=320, oc=160, hw=7, k=1),
    "1x1, input packed into panels": dict(n=1, c=40, oc=96, hw=13, k=1),
    "3x3 strided, input packed, batch of 2": dict(n=2, c=16, oc=64, hw=31, k=3, stride=2,
                                                 residual=True),
}


def run_both(model, feeds):
    """The compiled model's output at 1 and at 2 threads."""
    art = cc.compile(model)
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        return [cc.load(d, threads=t).run(feeds)["y"] for t in (1, 2)]


def assert_close(got, expected, what=""):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 + 1e-3 * np.abs(expected).max(),
                               err_msg=what)


@pytest.mark.parametrize("case", CASES)
def test_two_threads_match_onnxruntime_and_one_thread(case):
    model = conv_model(**CASES[case])
    feeds = feeds_for(model)
    one, two = run_both(model, feeds)
    assert_close(two, ort_run(model, feeds)["y"])
    np.testing.assert_array_equal(one, two)


def test_big_convs_are_split_and_small_ones_are_not():
    # (a 3x3 conv this size would be a Winograd one: tests/compiler_core/test_winograd.py)
    big = default_conv_schedule(conv_node(conv_model(1, 32, 64, 56, 3, stride=2, pad=1)), host_spec())
    assert big.parallel and big.split == "columns" and big.blocks >= 4
    deep = default_conv_schedule(conv_node(conv_model(1, 512, 512, 14, 3, stride=2, pad=1)),
                                 host_spec())
    assert deep.parallel and deep.split == "rows" and deep.blocks >= 2
    tiny = default_conv_schedule(conv_node(conv_model(1, 3, 4, 6, 3)), host_spec())
    assert not tiny.parallel and tiny.blocks == 1
    # squeeze-excite's 1x1 conv of one pixel: few FLOPs, but 900 KB of weights to read
    excite = default_conv_schedule(conv_node(conv_model(1, 240, 960, 1, 1)), host_spec())
    assert excite.parallel and excite.blocks >= 2


def test_blocks_cover_the_axis_in_whole_tiles():
    tiles = GemmTiles(6, 16, 256, 64)
    size, count, tail = split_blocks(ConvSchedule(tiles, "columns", 4), GemmShape(50, 900, 9))
    assert size % 16 == 0 and (count - 1) * size + tail == 900 and size <= tail < 2 * size
    size, count, tail = split_blocks(ConvSchedule(tiles, "rows", 3), GemmShape(50, 900, 9))
    assert size % 6 == 0 and (count - 1) * size + tail == 50 and size <= tail < 2 * size


@pytest.mark.parametrize("columns,blocks", [(784, 8), (196, 2), (3136, 8), (400, 8), (300, 8),
                                            (12880, 8), (40, 8)])
def test_blocks_split_evenly_over_two_threads(columns, blocks):
    """Each of two threads takes a contiguous run of the items (codegen/parallel.py): the
    busier one gets little more than half the columns (28x28: 784 columns in tiles of 32
    once split 512 vs 272)."""
    tiles = GemmTiles(6, 32, 256, 64)
    size, count, tail = split_blocks(ConvSchedule(tiles, "columns", blocks),
                                     GemmShape(64, columns, 9))
    items = [size] * (count - 1) + [tail]
    run = -(-count // 2)
    assert max(sum(items[:run]), sum(items[run:])) <= 0.55 * columns or columns < 2 * 32


@pytest.mark.parametrize("c,oc,hw", [(512, 1000, 13), (256, 1024, 14), (1024, 256, 14),
                                     (256, 128, 20), (64, 256, 13)])
def test_default_split_balances_two_threads(c, oc, hw):
    """Planes too narrow for many column items (SqueezeNet's 512 -> 1000 at 13x13 went in
    column blocks of 64 | 105) split the channels instead; row items that each pack all of
    the input stay few."""
    node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=1))
    sched = default_conv_schedule(node, host_spec())
    shape, _ = conv_gemm_shape(node)
    assert sched.parallel
    size, count, tail = split_blocks(sched, shape)
    items = [size] * (count - 1) + [tail]
    run = -(-count // 2)
    assert max(sum(items[:run]), sum(items[run:])) <= 0.55 * sum(items), sched
    assert not (sched.split == "rows" and sched.pack and count > 4), sched


@pytest.mark.parametrize("cpu,c,oc,hw,k", [
    ("znver4", 960, 160, 7, 1), ("znver5", 128, 32, 7, 3), ("znver5", 160, 960, 7, 1),
    ("znver4", 672, 168, 1, 1), ("znver4", 960, 240, 1, 1), ("znver3", 672, 168, 1, 1),
    ("znver3", 960, 240, 1, 1)])
def test_channel_panels_split_evenly_over_two_threads(cpu, c, oc, hw, k):
    """Items of whole panels of output channels (MobileNetV3's 960 -> 160 at 7x7 went in 5
    panels of 32, 3 | 2 over two threads; DenseNet's 128 -> 32 3x3s in one, on one; on
    Zen 4 those take Winograd)."""
    spec = MachineSpec("x86_64-unknown-linux-gnu", cpu, AVX2 if cpu == "znver3" else AVX512)
    sched = default_conv_schedule(conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=k)), spec)
    assert sched.lanes and sched.parallel, sched
    panels = -(-oc // (sched.lanes * sched.vectors))
    size = -(-panels // sched.blocks)
    items = [min(size, panels - i * size) for i in range(-(-panels // size))]
    run = -(-len(items) // 2)
    assert max(sum(items[:run]), sum(items[run:])) <= 0.55 * panels, sched


@pytest.mark.parametrize("c,oc,hw,winograd,vectors", [
    (512, 512, 7, 2, 1), (192, 320, 7, 2, 1), (256, 256, 10, 2, 1), (256, 512, 12, 2, 2),
    (256, 384, 12, 2, 2), (64, 256, 13, 4, 1), (256, 256, 14, 4, 1), (128, 128, 20, 4, 1)])
def test_zen4_takes_winograd_on_small_planes_in_tiles_its_vector_fills(c, oc, hw, winograd,
                                                                       vectors):
    """Zen 4's one FMA a cycle: F(2x2) where F(4x4)'s tiles would not fill a vector (ZFNet's
    and AlexNet's 12x12, YOLOv8n's 10x10, ResNet-50's 7x7), in register tiles of one vector
    of its tiles while they fill fewer than two; Zen 5 keeps channel vectors there."""
    node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
    sched = default_conv_schedule(node, _avx512("znver4"))
    assert (sched.winograd, sched.tiles.nr) == (winograd, 16 * vectors), sched
    if hw < 13:
        assert default_conv_schedule(node, _avx512("znver5")).lanes


def _avx512(cpu: str) -> MachineSpec:
    return MachineSpec("x86_64-unknown-linux-gnu", cpu, AVX512)


TWO_FMA_CPUS = ("sapphirerapids", "emeraldrapids", "znver5")


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_two_fma_avx512_cores_get_more_accumulators_than_zen4(cpu):
    big, small = (conv_node(conv_model(n=1, c=64, oc=64, hw=hw, k=1)) for hw in (56, 14))
    # 196 columns: the last of five 3-vector tiles would be nearly empty
    for node, shape in ((big, (6, 48)), (small, (8, 32))):
        tiles = default_conv_schedule(node, _avx512(cpu)).tiles
        assert (tiles.mr, tiles.nr) == shape
    for node in (big, small):
        tiles = default_conv_schedule(node, _avx512("znver4")).tiles
        assert (tiles.mr, tiles.nr) == (6, 32)


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_intel_two_fma_cores_take_eight_row_tiles_where_six_leave_them_ragged(cpu):
    """16 and 32 output channels in tiles of 6 rows compute 18 and 36 rows (YOLOv8n's 1x1
    and stride-2 convs): Intel's two-FMA cores take 8 rows there; 64 channels (66 rows)
    and 20 (not a multiple of 8) keep 6 rows by 3 vectors, and Zen 5 keeps them all."""
    intel = not cpu.startswith("znver")
    for oc, k, stride in ((16, 1, 1), (32, 1, 1), (32, 3, 2), (64, 1, 1), (20, 1, 1)):
        node = conv_node(conv_model(n=1, c=48, oc=oc, hw=160, k=k, stride=stride))
        tiles = default_conv_schedule(node, _avx512(cpu)).tiles
        ragged = intel and oc in (16, 32)
        assert (tiles.mr, tiles.nr) == ((8, 32) if ragged else (6, 48)), (oc, k, tiles)


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_two_fma_avx512_cores_take_winograd_from_more_channels(cpu):
    """16 -> 64 channels: Winograd on Zen 4; direct on Intel's two-FMA cores, F(2x2) on Zen
    5 (a narrow side of 16 beside 64 or more, SqueezeNet's expand convs)."""
    two_fma = _avx512(cpu)
    expected = 2 if cpu.startswith("znver") else 0
    for hw in (56, 40):
        few_channels = conv_node(conv_model(n=1, c=16, oc=64, hw=hw, k=3))
        assert default_conv_schedule(few_channels, _avx512("znver4")).winograd
        assert default_conv_schedule(few_channels, two_fma).winograd == expected, hw
    for c, oc in ((32, 64), (128, 32), (64, 64)):
        assert default_conv_schedule(conv_node(conv_model(n=1, c=c, oc=oc, hw=40, k=3)),
                                     two_fma).winograd, (c, oc)


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_zen5_takes_f2x2_from_32_channels_on_each_side(cpu):
    few = [conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
           for c, oc, hw in ((32, 32, 40), (48, 32, 80), (32, 48, 20))]
    expected = 2 if cpu.startswith("znver") else 0
    for node in few:
        assert default_conv_schedule(node, _avx512(cpu)).winograd == expected, node.inputs[1].shape
        assert default_conv_schedule(node, _avx512("znver4")).winograd  # one FMA port: F(4x4) or F(2x2)
    sixteen = conv_node(conv_model(n=1, c=16, oc=16, hw=80, k=3))
    narrow = conv_node(conv_model(n=1, c=16, oc=48, hw=80, k=3))  # the wide side under 64
    strided = conv_node(conv_model(n=1, c=32, oc=32, hw=80, k=3, stride=2))
    for node in (sixteen, narrow, strided):
        assert not default_conv_schedule(node, _avx512(cpu)).winograd


@pytest.mark.parametrize("cpu", ("sapphirerapids", "emeraldrapids"))
def test_intel_two_fma_cores_take_f4x4_from_one_vector_of_tiles_with_many_channels(cpu):
    """4x4 tiles of 4x4 outputs (14x14) of 256 channels: F(4x4) on Intel's two-FMA cores;
    fewer channels, or 7x7 planes, never F(4x4) (Zen 5 takes it from fewer channels, in
    one-vector register tiles: test_zen_takes_f4x4_over_one_vector_of_tiles...)."""
    node = conv_node(conv_model(n=1, c=256, oc=256, hw=14, k=3))
    assert default_conv_schedule(node, _avx512(cpu)).winograd == 4
    for c, oc, hw in ((128, 128, 14), (128, 256, 14), (128, 128, 20), (256, 256, 7)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
        assert default_conv_schedule(node, _avx512(cpu)).winograd != 4, (c, oc, hw)


@pytest.mark.parametrize("cpu", ("znver4", "znver5"))
def test_zen_takes_f4x4_over_one_vector_of_tiles_where_f2x2_was_chosen(cpu):
    """Planes of fewer tiles than two vectors: F(4x4) with 6 x 16 register tiles on Zen 4
    and Zen 5 (SqueezeNet's 13x13, ResNet-50's and Inception v1's 14x14)."""
    for c, oc, hw in ((48, 192, 13), (64, 256, 13), (256, 256, 14), (96, 208, 14)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
        sched = default_conv_schedule(node, _avx512(cpu))
        assert (sched.winograd, sched.tiles.mr, sched.tiles.nr) == (4, 6, 16), (c, oc, hw)
    big = conv_node(conv_model(n=1, c=64, oc=64, hw=56, k=3))
    assert default_conv_schedule(big, _avx512(cpu)) == winograd_schedule(big, 4, 16)


def test_zen5_keeps_f2x2_where_its_rule_for_few_channels_chose_it():
    """Zen 5's F(2x2) for a narrow side (16 -> 64 at 55x55, SqueezeNet) or for 32 to 63
    channels on both sides keeps its two-vector tiles: F(4x4) in one vector lost there."""
    for c, oc, hw in ((16, 64, 55), (32, 32, 14), (48, 48, 13)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
        sched = default_conv_schedule(node, _avx512("znver5"))
        assert sched == winograd_schedule(node, 2, 16), (c, oc, hw)


@pytest.mark.parametrize("cpu", ("znver4",) + TWO_FMA_CPUS)
def test_zen5_puts_channels_over_the_lanes_in_strided_3x3_convs(cpu):
    for c, oc, hw in ((128, 128, 56), (64, 128, 40), (128, 256, 20)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3, stride=2))
        sched = default_conv_schedule(node, _avx512(cpu))
        assert sched.lanes == (16 if cpu == "znver5" else 0), (c, oc, hw)
        assert cpu != "znver5" or sched.vectors == 2
    # few input channels, or output channels in an odd few panels, keep the GEMM
    for c, oc in ((32, 64), (96, 160)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=40, k=3, stride=2))
        assert default_conv_schedule(node, _avx512(cpu)).lanes == 0, (c, oc)


def test_avx2_puts_channels_over_the_lanes_for_image_stems_and_not_for_big_inputs():
    avx2 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", AVX2)
    avx512 = MachineSpec("x86_64-unknown-linux-gnu", "znver4", AVX512)
    stem = conv_node(conv_model(n=1, c=3, oc=64, hw=224, k=7, stride=2, pad=3))
    assert default_conv_schedule(stem, avx2).lanes == 8
    assert default_conv_schedule(stem, avx512).lanes == 0
    # 32 panels of 16 channels would each read the 655 KB input again
    deep = conv_node(conv_model(n=1, c=512, oc=512, hw=14, k=3, stride=2))
    assert default_conv_schedule(deep, avx2).lanes == 0
    assert default_conv_schedule(deep, avx512).lanes == 16
    small_plane = conv_node(conv_model(n=1, c=192, oc=384, hw=6, k=3))
    assert default_conv_schedule(small_plane, avx2).lanes == 8


@pytest.mark.parametrize("cpu", ("znver4",) + TWO_FMA_CPUS)
def test_convs_with_many_output_channels_pack_their_input(cpu):
    spec = _avx512(cpu)
    for case in ("1x1, input packed into panels", "3x3 strided, input packed, batch of 2"):
        node = conv_node(conv_model(**CASES[case]))
        packs = default_conv_schedule(node, spec).pack
        # two FMA ports: 16 input planes are too few streams for the copy to pay
        assert packs == (cpu == "znver4" or "strided" not in case), case
        assert any(s.pack != packs for s in conv_space(node, spec))  # the tuner may decide
    few_rows = default_conv_schedule(conv_node(conv_model(**CASES["1x1, direct store"])), spec)
    assert not few_rows.pack  # B is read by too few row tiles for a copy to pay


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_two_fma_avx512_cores_read_an_input_of_few_planes_in_place(cpu):
    for c, k, stride, packs in ((3, 3, 2, False), (16, 3, 1, False), (16, 1, 1, False),
                                (17, 1, 1, True), (256, 1, 1, True)):
        node = conv_node(conv_model(n=1, c=c, oc=64, hw=56, k=k, stride=stride))
        assert default_conv_schedule(node, _avx512(cpu)).pack == packs, (c, k)
        zen4 = default_conv_schedule(node, _avx512("znver4"))
        assert zen4.pack or zen4.winograd, (c, k)


@pytest.mark.parametrize("pack", [False, True])
def test_a_last_column_block_narrower_than_a_tile_is_right(pack, monkeypatch):
    """49 columns in blocks of 16: the last block has one column, still through the
    register tiles (the packed weights are addressable only at tile starts)."""
    model = conv_model(1, 256, 128, 7, 1)
    feeds = feeds_for(model)
    sched = ConvSchedule(GemmTiles(6, 16, 256, 64), "columns", 4, True, pack=pack)
    monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec: sched)
    for got in run_both(model, feeds):
        assert_close(got, ort_run(model, feeds)["y"], str(sched))


def test_packed_panels_are_a_scratch_output_of_the_conv():
    graph = run_pipeline(import_model(conv_model(**CASES["1x1, input packed into panels"])), 3)
    conv = next(n for n in graph.nodes if n.op == "Conv")
    panels = conv.outputs[-1]
    assert conv.attrs["panels"] and panels.name.endswith("_panels")
    shape, pieces = conv_gemm_shape(conv)
    assert panels.size == panels_size(conv.schedule, shape, pieces) >= shape.K * shape.N


@pytest.mark.parametrize("case", ["3x3 padded, wide output", "batch of 2 with residual",
                                  "1x1, input packed into panels",
                                  "3x3 strided, input packed, batch of 2"])
def test_a_sample_of_the_search_space_is_correct(case, monkeypatch):
    """Each candidate the autotuner may pick, compiled into the whole model, matches ORT."""
    model = conv_model(**CASES[case])
    feeds = feeds_for(model)
    space = conv_space(conv_node(model), host_spec())
    assert len(space) > 50
    expected = ort_run(model, feeds)["y"]
    for sched in space[::len(space) // 6]:
        monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec, s=sched: s)
        for got in run_both(model, feeds):
            assert_close(got, expected, str(sched))


def test_unpacked_gemms_take_k_in_short_chunks():
    """Unpacked, each k of a chunk is a stream of its own: at most UNPACKED_MAX_KC of them on
    AVX2, and on AVX-512 where the input is several times L2 (a 16-channel plane of 320x320
    is 6.6 MB; of 160x160, 1.7 MB); packed panels are one stream and keep their chunks."""
    from compiler_core.kernels.conv import UNPACKED_MAX_KC
    avx2 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", AVX2)
    for hw, streamed in ((320, True), (160, False)):
        strided = conv_node(conv_model(n=1, c=16, oc=32, hw=hw, k=3, stride=2))  # K 144
        sched = default_conv_schedule(strided, avx2)
        assert not sched.pack and sched.tiles.kc == UNPACKED_MAX_KC
        sched = default_conv_schedule(strided, _avx512("znver4"))
        assert not sched.pack and sched.tiles.kc == (UNPACKED_MAX_KC if streamed else 144)
    packed = conv_node(conv_model(n=1, c=256, oc=256, hw=20, k=1))
    sched = default_conv_schedule(packed, avx2)
    assert sched.pack and sched.tiles.kc == 256


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS + ("znver4",))
def test_intel_two_fma_cores_and_zen4_read_a_short_reduction_on_a_small_plane_in_place(cpu):
    """MobileNetV3's 160 -> 960 1x1 conv at 7x7: channel vectors on Zen 5; on Intel's
    two-FMA cores and Zen 4 the GEMM, reading its 31 KB input in place. A reduction of 512
    keeps channel vectors everywhere, and a wider plane its packing."""
    gemm = cpu == "znver4" or not cpu.startswith("znver")
    short = default_conv_schedule(conv_node(conv_model(1, 160, 960, 7, 1)), _avx512(cpu))
    assert (short.lanes == 0) == gemm and not short.pack
    long = default_conv_schedule(conv_node(conv_model(1, 512, 128, 7, 1)), _avx512(cpu))
    assert long.lanes > 0
    wide = default_conv_schedule(conv_node(conv_model(1, 20, 512, 14, 1)), _avx512(cpu))
    assert wide.pack


def test_the_in_place_gemm_of_a_small_plane_is_right(monkeypatch):
    model = conv_model(1, 160, 960, 7, 1, residual=True)
    feeds = feeds_for(model)
    sched = default_conv_schedule(conv_node(model), _avx512("sapphirerapids"))
    assert sched.lanes == 0 and not sched.pack and sched.split == "rows"
    monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec: sched)
    for got in run_both(model, feeds):
        assert_close(got, ort_run(model, feeds)["y"], str(sched))


def test_avx2_takes_f2x2_for_few_channels_over_an_input_in_l2():
    """F(2x2) over F(4x4) on AVX2 where the channels' harmonic mean is at most 32 and one
    image's input fits L2 (YOLOv8n-320's 16 -> 16 at 80x80, 32 -> 32 at 40x40, SqueezeNet's
    16 -> 64 at 55x55); not for more channels, bigger planes or AVX-512."""
    avx2 = MachineSpec("x86_64-unknown-linux-gnu", "znver3", AVX2)
    avx512 = MachineSpec("x86_64-unknown-linux-gnu", "znver4", AVX512)
    for c, oc, hw in ((16, 16, 80), (32, 32, 40), (16, 64, 55)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
        assert default_conv_schedule(node, avx2).winograd == 2, (c, oc, hw)
        assert default_conv_schedule(node, avx512).winograd == 4, (c, oc, hw)
    for c, oc, hw in ((32, 128, 27), (64, 64, 28), (16, 16, 160), (32, 32, 80)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=3))
        assert default_conv_schedule(node, avx2).winograd == 4, (c, oc, hw)


BY_ROWS = {  # (model, mr, nr): rows of 31 = 16 + 15 positions, 20 channels = 3 x 6 + 2
    "stem, ragged rows and channels": (dict(n=1, c=3, oc=20, hw=62, k=3, stride=2), 6, 32),
    "one vector per tile": (dict(n=1, c=3, oc=20, hw=62, k=3, stride=2), 8, 16),
    "batch of 2, residual": (dict(n=2, c=5, oc=24, hw=31, k=5, residual=True), 4, 48),
    "grouped": (dict(n=1, c=16, oc=32, hw=20, k=3, group=4), 6, 16),
}


@pytest.mark.parametrize("case", BY_ROWS)
def test_convs_by_rows_match_onnxruntime(case, monkeypatch):
    """Tiles along each output row, the last vector of a ragged row masked, stored
    straight into y (kernels/conv_rows.py)."""
    params, mr, nr = BY_ROWS[case]
    model = conv_model(**params)
    feeds = feeds_for(model)
    node = conv_node(model)
    rows = params["hw"] // params.get("stride", 1)
    sched = ConvSchedule(GemmTiles(mr, nr, conv_gemm_shape(node)[0].K, nr), blocks=rows // 3,
                         parallel=True, by_rows=True)
    monkeypatch.setitem(schedule.DEFAULTS, "Conv", lambda node, spec: sched)
    graph = run_pipeline(import_model(model), 3)
    conv = next(n for n in graph.nodes if n.op == "Conv")
    assert conv.schedule.by_rows and len(conv.outputs) == 1  # no wide scratch
    one, two = run_both(model, feeds)
    assert_close(two, ort_run(model, feeds)["y"], case)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("cpu", TWO_FMA_CPUS)
def test_stems_go_by_rows_where_a_rows_vectors_span_no_more_than_the_wide_grid(cpu):
    spec = _avx512(cpu)
    for c, oc, hw, k, by_rows in ((3, 64, 224, 7, True),   # 112 of 115 q columns
                                  (3, 64, 224, 3, True),   # 111 -> 112 of 113
                                  (16, 32, 160, 3, True),  # 80 of 81
                                  (32, 64, 80, 3, False),  # 40 -> 48 of 41
                                  (3, 64, 56, 3, False),   # 28 -> 32 of 29
                                  # 32 of 33, but k = 1152: B over all of k is past L1
                                  (128, 128, 64, 3, False)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=k, stride=2))
        sched = default_conv_schedule(node, spec)
        assert sched.by_rows == by_rows, (c, oc, hw, k)
        assert any(s.by_rows != by_rows for s in conv_space(node, spec))  # the tuner may decide


def test_zen4_runs_image_stems_by_rows_and_packs_other_few_plane_convs():
    spec = _avx512("znver4")
    for c, oc, hw, k, stride, by_rows in ((3, 64, 224, 7, 2, True), (3, 64, 224, 3, 1, True),
                                          (3, 64, 224, 3, 2, True),
                                          # a tile's B over all of k (363) is past L1
                                          (3, 96, 224, 11, 4, False),
                                          (16, 64, 112, 1, 1, False)):
        node = conv_node(conv_model(n=1, c=c, oc=oc, hw=hw, k=k, stride=stride))
        sched = default_conv_schedule(node, spec)
        assert sched.by_rows == by_rows and sched.pack != by_rows, (c, hw, k, stride)
