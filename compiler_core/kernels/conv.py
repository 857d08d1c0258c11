"""Convolution as an implicit GEMM over a prepared input (see frontend/converters/nn.py).

`ConvPad` pads the input and splits it into stride phases:
    xq[n, c, ph_1..ph_r, q_1..q_r] = x[n, c, q_i * s_i + ph_i - pad_i]   (zero outside x)
(the first q dim may have extra rows of zeros: slack for reads past the last window),
after which every kernel tap reads a *contiguous* run of xq whatever the stride, at a
constant offset `koff[k]` (k = input channel and tap). So for one image and one group

    Y[m, p] = sum_k W[m, k] * xq[koff[k] + p]

is a GEMM whose B rows are windows of xq: p walks the q grid row-major, so the outputs of
one row are followed by (Q_last - O_last) "wide" columns that are computed and thrown
away; that waste is what buys unit stride without bounds checks. When there is no waste
the tiles store straight into Y, otherwise into a scratch (OC, P) buffer that is cropped.
Bias and a fused activation are applied on the way into Y.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..ir.loops import (INDEX, Get, as_expr, logical_and, maximum, minimum, row_major_strides,
                        select)
from .elementwise import loop_kind
from .epilogue import apply_activation, is_heavy
from .fma_ports import (amd_two_wide_fma_ports, intel_two_fma_ports, one_wide_fma_port,
                        two_wide_fma_ports)
from .matmul import (MAX_MR, SMALL_N, GemmShape, GemmTiles, Operand, Output, default_tiles,
                     emit_gemm, even_chunk_size, l2_columns)
from .conv_blocked import row_pieces, row_span
from .conv_rows import lower_conv_rows
from .conv_skinny import (MAX_VECTORS, SKINNY_COLUMNS, emit_skinny_gemm, output_rows, plane_rows,
                          row_tile, skinny_vectors)
from .recurrent import L1_BYTES
from .registry import lowering
from .schedule import default_rule, search_space


def wide_size(out_spatial, q_spatial) -> int:
    """Columns of the wide output: up to and including the last real output position."""
    return sum((o - 1) * s for o, s in zip(out_spatial, row_major_strides(q_spatial))) + 1


# strides whose phases (prod(strides)) exceed this get one bounds-checked nest for all phases
MAX_SPECIALISED_PHASES = 16


@lowering("ConvPad")
def lower_conv_pad(node, kb, ins, outs):
    x, xq = ins[0], outs[0]
    strides, pads = node.attrs["strides"], node.attrs["pads_begin"]
    q_shape = xq.shape[-len(strides):]
    fill = as_expr(0, xq.dtype)
    if math.prod(strides) > MAX_SPECIALISED_PHASES:
        _pad_all_phases(kb, x, xq, strides, pads, fill)
        return
    # one (image, channel) plane per iteration: a single parallel region for the whole pad
    with kb.loops(xq.shape[:2], kind=loop_kind(xq.size)) as (n, c):
        for lead in itertools.product(*[range(s) for s in strides[:-1]]):
            phases = [(*lead, ph) for ph in range(strides[-1])]
            boxes = [_inside(x.shape[2:], ph, strides, pads, q_shape) for ph in phases]
            for phase, (lo, hi) in zip(phases, boxes):
                _fill_outside(kb, xq, n, c, phase, lo, hi, q_shape, fill)
            _copy_phases(kb, x, xq, n, c, phases, boxes, strides, pads)


def _pad_all_phases(kb, x, xq, strides, pads, fill):
    """One loop nest for every phase, bounds checked per element: for large strides (an STFT
    written as a conv with stride 128), where one specialised nest per phase would make
    hundreds of loops for LLVM to compile."""
    rank = len(strides)
    with kb.loops(xq.shape) as idx:
        n, c, phase, q = idx[0], idx[1], idx[2:2 + rank], idx[2 + rank:]
        src = [qi * s + ph - p for qi, s, ph, p in zip(q, strides, phase, pads)]
        inside = None
        for si, extent in zip(src, x.shape[2:]):
            ok = logical_and(si >= 0, si < extent)
            inside = ok if inside is None else logical_and(inside, ok)
        clamped = tuple(minimum(maximum(si, 0), extent - 1) for si, extent in zip(src, x.shape[2:]))
        kb.store(xq, idx, select(inside, x[(n, c, *clamped)], fill))


def _inside(in_spatial, phase, strides, pads, q_shape):
    """The box [lo, hi) of q whose source q * s + ph - pad lies inside x (static)."""
    lo = [max(0, math.ceil((p - ph) / s)) for p, ph, s in zip(pads, phase, strides)]
    hi = [max(a, min(q, math.ceil((n + p - ph) / s)))
          for a, q, n, p, ph, s in zip(lo, q_shape, in_spatial, pads, phase, strides)]
    return lo, hi


def _fill_outside(kb, xq, n, c, phase, lo, hi, q_shape, fill):
    """Write `fill` everywhere in the phase plane but the box: for each dim d, the slabs
    before lo[d] and after hi[d] (dims before d limited to the box, dims after d whole)."""
    empty = any(a >= b for a, b in zip(lo, hi))
    slabs = [[(0, q) for q in q_shape]] if empty else []
    for d in range(len(q_shape) if not empty else 0):
        for start, stop in ((0, lo[d]), (hi[d], q_shape[d])):
            if start < stop:
                whole = [(0, q) for q in q_shape[d + 1:]]
                slabs.append([*zip(lo[:d], hi[:d]), (start, stop), *whole])
    for slab in slabs:
        with kb.loops([b - a for a, b in slab]) as idx:
            q = [i + a for i, (a, _) in zip(idx, slab)]
            kb.store(xq, (n, c, *[as_expr(ph) for ph in phase], *q), fill)


def _copy_phases(kb, x, xq, n, c, phases, boxes, strides, pads):
    """Copy the phases that differ only in the last dim's phase. Over the range of q that
    is inside x for all of them, one loop writes every phase: its loads x[q * s + ph - pad]
    for ph < s are one interleaved group, which LLVM vectorizes as whole-vector loads and
    shuffles (alone, each phase's stride-s loads are scalar). The phases' few remaining
    columns at the edges get loops of their own."""
    common_lo, common_hi = max(lo[-1] for lo, _ in boxes), min(hi[-1] for _, hi in boxes)
    if common_lo >= common_hi or any(a >= b for lo, hi in boxes for a, b in zip(lo, hi)):
        for phase, (lo, hi) in zip(phases, boxes):
            if all(a < b for a, b in zip(lo, hi)):
                _copy_phase(kb, x, xq, n, c, phase, strides, pads, lo, hi)
        return
    lo, hi = boxes[0][0][:-1] + [common_lo], boxes[0][1][:-1] + [common_hi]
    with kb.loops([b - a for a, b in zip(lo, hi)]) as rel:
        q = [r + a for r, a in zip(rel, lo)]
        for phase in phases:
            src = tuple(qi * s + ph - p for qi, s, ph, p in zip(q, strides, phase, pads))
            kb.store(xq, (n, c, *[as_expr(ph) for ph in phase], *q), x[(n, c, *src)])
    for phase, (lo, hi) in zip(phases, boxes):
        for a, b in ((lo[-1], min(common_lo, hi[-1])), (max(common_hi, lo[-1]), hi[-1])):
            if a < b:
                _copy_phase(kb, x, xq, n, c, phase, strides, pads, lo[:-1] + [a], hi[:-1] + [b])


def _copy_phase(kb, x, xq, n, c, phase, strides, pads, lo, hi):
    with kb.loops([b - a for a, b in zip(lo, hi)]) as rel:
        q = [r + a for r, a in zip(rel, lo)]
        src = tuple(qi * s + ph - p for qi, s, ph, p in zip(q, strides, phase, pads))
        kb.store(xq, (n, c, *[as_expr(ph) for ph in phase], *q), x[(n, c, *src)])


# ---------------------------------------------------------------- schedule

# Below this many FLOPs a conv runs on one thread: a fork/join costs a few microseconds.
PARALLEL_MIN_FLOPS = 2_000_000
# ...unless it streams this many bytes of weights: a conv of one or a few pixels (squeeze-
# excite's) is a matrix-vector product bound by reading them, 25 us per MB on one znver4
# core, and two cores read them faster than one.
PARALLEL_MIN_WEIGHT_BYTES = 256 * 1024
# Work items to aim for: enough for 2-4 threads to balance, few enough that each item
# keeps whole register tiles busy.
TARGET_ITEMS = 8


@dataclass(frozen=True)
class ConvSchedule:
    """The implicit GEMM's tiles, and how its work is split over threads: each (image,
    group) GEMM is cut into `blocks` pieces along `split` ("columns" of the output plane or
    "rows" = output channels); every piece of every image and group is one work item."""
    tiles: GemmTiles
    split: str = "columns"
    blocks: int = 1
    parallel: bool = False
    # lanes > 0: kernels/conv_skinny.py's tiles of `vectors` vectors of `lanes` output
    # channels by up to `positions` output positions, `blocks` items of whole panels of
    # channels (when the weights are constant; else the column tiles, or below SMALL_N
    # columns the dot products)
    lanes: int = 0
    vectors: int = 0
    positions: int = 0
    # Winograd F(m x m, 3x3) (kernels/winograd.py) with items of `tile_rows` rows of
    # tiles when m > 0; `tiles` are then those of its (OC, tile_rows * tiles per row, C)
    # GEMMs. 0: the implicit GEMM.
    winograd: int = 0
    tile_rows: int = 0
    # True: each phase is a parallel loop of its own over all items (for planes of fewer
    # items than threads); False: one parallel loop over items (an item's V and M stay in
    # cache between its phases)
    winograd_phases: bool = False
    # True: each item first copies its columns of B (the input windows) into panels of
    # tiles.nr columns, k after k (see _panel_packer); False: the tiles read B in place
    pack: bool = False
    # True: one GEMM per output row (out_spatial[-1] columns) whose tiles store straight
    # into y, with no wide scratch to crop; the work items are `blocks` runs of rows of each
    # (image, group) plane
    by_rows: bool = False
    # True: the conv runs in the blocked layout (kernels/conv_blocked.py, put there by
    # passes/blocked_layout.py) in tiles of `positions` output positions by `vectors`
    # vectors of output channels; the GEMM knobs above are then unused
    blocked: bool = False


def conv_gemm_shape(node) -> tuple[GemmShape, int]:
    """(the GEMM of one image and group, images x groups)."""
    y, koff, wide = node.outputs[0], node.inputs[3], conv_wide(node)
    group = node.attrs["group"]
    columns = wide.shape[1] if wide is not None else math.prod(y.shape[2:])
    return GemmShape(y.shape[1] // group, columns, koff.shape[0]), y.shape[0] * group


def conv_wide(node):
    """The scratch for the wide output, if the conv has one (outputs: y, [wide], [panels])."""
    extra = node.outputs[1:len(node.outputs) - bool(node.attrs.get("panels"))]
    return extra[0] if extra else None


@default_rule("Conv")
def default_conv_schedule(node, spec) -> ConvSchedule:
    """Blocked where passes/blocked_layout.py chose the blocked layout for the conv."""
    sched = _plain_layout_schedule(node, spec)
    if node.attrs.get("layout") == "blocked":
        return blocked_schedule(sched, node, spec)
    return sched


def blocked_candidate(node, spec, lanes: int) -> bool:
    """Whether the conv may run blocked in blocks of `lanes` channels: it can, and in the
    plain layout it would run as the implicit GEMM (channel vectors and Winograd beat the
    blocked kernel where they are the default: see kernels/conv_blocked.py)."""
    if not blocked_eligible(node, lanes):
        return False
    sched = _plain_layout_schedule(node, spec)
    return not (sched.lanes or sched.winograd or sched.by_rows)


def blocked_eligible(node, lanes: int) -> bool:
    """A 2-D conv of one group whose channels fill whole vectors, with constant float32
    weights, outside any branch."""
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    return (len(node.attrs["kernel_shape"]) == 2 and node.attrs["group"] == 1
            and not node.guards and w.is_const and w.dtype == np.float32
            and x.dtype == np.float32 and x.shape[1] % lanes == 0
            and y.shape[1] % lanes == 0)


def blocked_schedule(base: ConvSchedule, node, spec, vectors: int = 2,
                     split: str | None = None, positions: int = 0) -> ConvSchedule:
    """Tiles of `vectors` channel blocks by `positions` positions, by default as many as
    the registers hold beside them (14 by 2 with 32 registers, 6 by 2 with 16). `split` as
    for the GEMM: "columns", work items of output rows that run every panel of output
    channels in turn (the input read once: by default where it is bigger than the
    weights), or "rows", items of a panel for a group of rows (the weights read once)."""
    vectors = min(vectors, _channel_blocks(node, spec))
    positions = positions or _blocked_max_positions(spec, vectors)
    if split is None:
        split = "columns" if node.inputs[0].nbytes > node.inputs[1].nbytes else "rows"
    return ConvSchedule(base.tiles, split=split, parallel=base.parallel, vectors=vectors,
                        positions=positions, blocked=True)


def _channel_blocks(node, spec) -> int:
    """Blocks of output channels in the region's block size."""
    return node.outputs[0].shape[1] // node.attrs.get("block", spec.vector_bits // 32)


def _blocked_max_positions(spec, vectors: int) -> int:
    """Accumulator rows the registers hold beside `vectors` weight vectors and a broadcast."""
    return min(BLOCKED_MAX_POSITIONS, (spec.vector_registers - 1 - vectors) // vectors)


def blocked_positions(node, spec, vectors: int) -> list[int]:
    """Positions per tile that cut the output rows differently, most first: fewer than
    the registers hold can pay. AMD EPYC (LLVM: znver3), MobileNetV3's 1x1 convs alone, 1
    thread, against 6 positions by 2 vectors: 16 -> 16 channels at 112x112 0.85 in tiles
    of 4 by 2, 40 -> 240 at 28x28 0.96 in 8 by 1."""
    width, seen, out = node.outputs[0].shape[3], set(), []
    for p in range(_blocked_max_positions(spec, vectors), 1, -1):
        span = row_span(width, p)  # tilings alike build alike kernels
        cut = (span, row_pieces(width, p) if span == 1 else None)
        if cut not in seen:
            seen.add(cut)
            out.append(p)
    return out


def _plain_layout_schedule(node, spec) -> ConvSchedule:
    shape, pieces = conv_gemm_shape(node)
    lanes = spec.vector_bits // 32
    tiles = _wide_tiles(default_tiles(shape, lanes), shape, spec)
    flops = 2 * shape.M * shape.N * shape.K * pieces
    winograd = _default_winograd(node, spec, lanes)
    if shape.N < SKINNY_COLUMNS or (_channel_vectors_pay(node, shape, lanes, spec)
                                    and not _winograd_first(node, winograd, spec)):
        return skinny_schedule(node, spec, tiles)
    if flops < PARALLEL_MIN_FLOPS:
        return _default_packing(ConvSchedule(tiles), node, shape, pieces, spec)
    if winograd:
        return _default_winograd_schedule(node, winograd, spec, shape)
    blocks = -(-TARGET_ITEMS // pieces)
    if shape.N >= blocks * 2 * tiles.nr:
        sched = ConvSchedule(tiles, "columns", blocks, True)
    else:
        sched = ConvSchedule(tiles, "rows", max(1, min(blocks, shape.M // (2 * tiles.mr))), True)
        few = _few_column_blocks(shape, tiles.nr) if pieces == 1 else 0
        if few:
            packed = _default_packing(ConvSchedule(tiles, "columns", few, True), node, shape,
                                      pieces, spec)
            if packed.pack:
                return packed
    sched = _default_packing(sched, node, shape, pieces, spec)
    if sched.split == "rows" and sched.pack:  # each row item packs all of B
        sched = dataclasses.replace(sched, blocks=min(sched.blocks, PACKED_ROW_BLOCKS))
    if ((not sched.pack or _stem_on_one_wide_port(node, spec)) and sched.tiles.kc >= shape.K
            and rows_beat_wide(node, sched.tiles, lanes)):
        return rows_schedule(node, sched.tiles)
    return sched


BLOCKED_MAX_POSITIONS = 14
STEM_MAX_PLANES = 4  # input planes of an image stem (RGB, RGBA)


def _image_stem(node) -> bool:
    return node.inputs[0].shape[1] // node.attrs["group"] <= STEM_MAX_PLANES


# Zen 4 (one 512-bit FMA a cycle) keeps packing B for most few-plane convs, but an image
# stem runs faster by rows, reading its 3 planes in place, wherever rows_beat_wide holds.
# AMD EPYC (LLVM: znver4), 1 thread, alone, packed -> by rows: 3 -> 64 3x3 at 224x224
# (VGG-19) 2.85-2.93 -> 1.71-1.73 ms, 3x3 stride 2 at 111x111 (SqueezeNet) 0.57-0.60 ->
# 0.43-0.44, 7x7 stride 2 at 112x112 (ResNet-50) 2.76-2.78 -> 2.25-2.36. In place without
# rows it gains less or loses (2.41-2.49, 0.54-0.55, 2.50; AlexNet's 11x11 stride 4, whose
# tile slice of B over all of k is past L1, 2.20 -> 2.25), and 16-plane 1x1 convs in place
# lose at 112x112 (MobileNetV3, 0.276 -> 0.283 ms): those stay packed.
def _stem_on_one_wide_port(node, spec) -> bool:
    return one_wide_fma_port(spec) and _image_stem(node)


# By rows (kernels/conv_rows.py), Xeon (LLVM: rocketlake), 1 thread, each conv in its model,
# against the wide GEMM and its crop: 7x7 stride-2 stems 3 -> 64 at 112x112 (ResNet-50,
# Inception v1, DenseNet-121) 1.72-1.86 -> 1.50-1.55 ms; SqueezeNet's 3x3 stride-2 stem
# 3 -> 64 at 111x111 0.483 -> 0.302 (0.262 -> 0.163 at 2 threads); YOLOv8n-320's 3x3
# stride-2 convs 3 -> 16 at 160x160 0.305 -> 0.258 and 16 -> 32 at 80x80 0.511 -> 0.461.
# Where a row's vectors compute more columns than the wide grid's row, it loses: 3x3
# convs at 40x40 (3 vectors for 40 positions) 0.19-0.21 -> 0.22-0.24 ms, ResNet-50's
# stride-2 3x3 convs at 28x28 and 14x14 2.04 -> 2.45 and 1.73 -> 2.86. By rows the
# reduction is not cut into chunks, so a tile's slice of B over all of k must stay in L1
# across the row tiles: 3x3 stride-2 convs of 128 channels at 32x32 (k = 1152) and 256 at
# 16x16 took 1.19x and 1.26x the time by rows, a 5x5 conv of 64 at 112x112 1.03x.
def rows_beat_wide(node, tiles: GemmTiles, lanes: int) -> bool:
    """Whether a row's whole vectors span no more columns than a row of the wide grid
    does (both compute the same positions, and by rows there is no scratch to crop) and
    a tile's B over all of k fits in L1. (By rows B is read in place in one chunk of k:
    where the wide GEMM would pack its input or cut k into short chunks of streams, the
    default keeps doing so.)"""
    wide = conv_wide(node)
    out_spatial = node.outputs[0].shape[2:]
    if wide is None or len(out_spatial) < 2:
        return False
    q_width, k = node.inputs[0].shape[-1], node.inputs[3].shape[0]
    return (-(-out_spatial[-1] // lanes) * lanes <= q_width
            and k * tiles.nr * node.outputs[0].dtype.itemsize <= L1_BYTES)


def rows_schedule(node, tiles: GemmTiles) -> ConvSchedule:
    """By rows, one row per work item (an even share for every thread)."""
    rows = math.prod(node.outputs[0].shape[2:-1])
    return ConvSchedule(tiles, blocks=rows, parallel=True, by_rows=True)


def _wide_tiles(tiles: GemmTiles, shape: GemmShape, spec) -> GemmTiles:
    """More accumulators on cores that issue two 512-bit FMAs a cycle (Zen 4 one): tiles
    of 6 rows by 3 vectors (18 accumulators, half a load per FMA instead of two thirds) on
    planes of 16 such tiles or more, else of 8 rows by 2 vectors (16; the last of a small
    plane's 3-vector tiles is mostly empty). Sapphire Rapids-class Xeon,
    1 thread: ResNet-50's 7x7 stem 1868 -> 1366 us, its 256 -> 64 1x1 conv at 56x56 834
    -> 742 us; Emerald Rapids, 1 thread, the tuner's best (8x2 tiles) against the 6x2
    default: 256 -> 1024 channels at 14x14 960 -> 889 us, 512 -> 1000 at 13x13 1300 ->
    1163 (both also with other blockings). Zen 4 keeps the 6 x 2 measured there."""
    lanes = spec.vector_bits // 32
    if not two_wide_fma_ports(spec) or tiles.mr < MAX_MR or tiles.nr != 2 * lanes:
        return tiles
    ragged = intel_two_fma_ports(spec) and _eight_rows_fit_better(shape.M, tiles.mr)
    if shape.N >= 16 * 3 * lanes and not ragged:
        return dataclasses.replace(tiles, nr=3 * lanes, nc=l2_columns(tiles.kc, 3 * lanes))
    if shape.M >= 8:  # a ragged count of rows is a multiple of 8
        return dataclasses.replace(tiles, mr=8)
    return tiles


# On Intel's two-FMA cores, output channels that are a multiple of 8 and that tiles of 6
# rows leave ragged by a twentieth or more (8, 16, 32, 40, 56, 80 channels; 16 and 32 compute
# 12.5 % of their rows for nothing, in a last tile of 4 or 2 of 6 rows) take tiles of 8
# rows by 2 vectors. Found by tuning YOLOv8n-320: its 16 -> 32 3x3 stride-2 conv at 80x80
# 826 -> 729 us alone. Xeon (LLVM: rocketlake, a Sapphire Rapids-class cloud core), whole
# models new/old, interleaved, 1 | 2 threads: YOLOv8n-320 (13 convs) 0.986 | 0.986,
# YOLOv8n-640 0.982 | 0.993, MobileNetV3 0.981 | 0.975, SqueezeNet (its two 16-channel
# squeezes) 0.999 | 1.009, Inception v1 1.000 | 0.994.
RAGGED_ROWS_MIN_WASTE = Fraction(1, 20)


def _eight_rows_fit_better(rows: int, mr: int) -> bool:
    wasted = -(-rows // mr) * mr - rows
    return rows % 8 == 0 and wasted >= RAGGED_ROWS_MIN_WASTE * rows


# Output positions over vector lanes fill fewer of them than this (a 7x7 plane: 49 of 64
# AVX-512 lanes, 61 wide columns with a 3x3's padding): output channels go over the lanes
# instead (kernels/conv_skinny.py), where the reductions are long enough that the
# accumulators' lane-by-lane stores stay a small part of the work.
CHANNEL_VECTORS_BELOW_FILL = 0.85
CHANNEL_VECTORS_MIN_K = 128
# On Intel's two-FMA cores and on Zen 4 those stores weigh more: a 1x1 conv of a shorter
# reduction runs faster as the GEMM, reading its input in place (IN_PLACE_MAX_INPUT_BYTES).
# AMD EPYC (LLVM: znver4), 1 thread, alone, channel vectors -> GEMM in place: 544 -> 544
# in 4 groups at 7x7 0.81-0.84; whole models new/old, interleaved, both orders, 1 | 2
# threads: ShuffleNet 0.963-0.968 | 0.957-0.965, MobileNetV3 (whose 160 -> 960 convs then
# join its blocked region) 0.979-0.984 | 0.962-0.983. The tuner had found the same GEMM
# for ShuffleNet's, 25% faster alone. Xeon
# (LLVM: rocketlake, a Sapphire Rapids-class cloud core), alone, channel vectors -> GEMM,
# 1 | 2 threads: 160 -> 960 channels at 7x7 (MobileNetV3, K 160) 0.87 | 0.87, 544 -> 544
# in 4 groups at 7x7 (ShuffleNet, K 136) 0.80 | 0.80; with longer reductions channel
# vectors keep winning: 512 -> 128 at 7x7 1.14 | 1.09, 960 -> 160 1.16 | 1.11, 832 -> 384
# at 6x6 1.22 | 1.08. Whole models new/old with both rules, interleaved: MobileNetV3 0.988
# | 0.991, ShuffleNet 0.977 | 0.943 (no other bench model's convs change).
CHANNEL_VECTORS_MIN_K_1X1 = 256
# With 16 vector registers (AVX2) every panel of 2 x 8 channels reads the whole input again:
# past this much of such reads the GEMM wins (znver3, 1 thread: ResNet-50's 512-channel 3x3
# stride-2 conv to 7x7, 32 panels x 655 KB, 5.2-7.1 -> 4.4-4.7 ms). An image stem (<= 4
# input channels, a reduction of 128 or more: 7x7 or 11x11 taps) goes the other way: the
# GEMM packs an im2col of the input, channel vectors read it as it is (3 -> 64 7x7 stride 2
# at 224x224 3.55 -> 2.64 ms, 3 -> 96 5.21 -> 3.97; 11x11 stride 4 at 2 threads 2.62 -> 1.67).
CHANNEL_VECTORS_MAX_REREAD_BYTES = 8 << 20


def _channel_vectors_pay(node, shape: GemmShape, lanes: int, spec) -> bool:
    min_k = CHANNEL_VECTORS_MIN_K
    if ((intel_two_fma_ports(spec) or one_wide_fma_port(spec))
            and math.prod(node.attrs["kernel_shape"]) == 1):
        min_k = CHANNEL_VECTORS_MIN_K_1X1
    if not (node.inputs[1].is_const and shape.M >= 2 * lanes and shape.K >= min_k):
        return False
    x = node.inputs[0]
    if spec.vector_registers < 32:
        if len(node.attrs["kernel_shape"]) == 2 and _image_stem(node):
            return True
        panels = -(-shape.M // (2 * lanes))
        if panels * x.nbytes > CHANNEL_VECTORS_MAX_REREAD_BYTES:
            return False
    if _zen5_strided_3x3(node, lanes, spec):
        return True
    plane = math.prod(node.outputs[0].shape[2:])
    fill = plane / (-(-shape.N // lanes) * lanes)
    return fill < CHANNEL_VECTORS_BELOW_FILL


# Zen 5 runs stride-2 3x3 convs of 64 or more input channels faster with channels over the
# lanes, where the output channels fill an even number of panels of two vectors (an odd few
# panels are halved to one vector each, to split evenly). znver5, 1 thread, alone:
# 128 -> 128 at 28x28 1079 -> 999 us, 128 -> 256 at 10x10 293 -> 238; whole models
# new/old, 1 | 2 threads: ResNet-50 1.007 | 1.004, YOLOv8n-320 1.013 | 1.002 (Inception
# v2's 96 and 160 channel convs, in one-vector panels, 0.997 | 0.996: left out).
def _zen5_strided_3x3(node, lanes: int, spec) -> bool:
    a = node.attrs
    return (amd_two_wide_fma_ports(spec) and list(a["kernel_shape"]) == [3, 3]
            and max(a["strides"]) == 2 and node.inputs[1].shape[1] >= 64
            and node.outputs[0].shape[1] % (4 * lanes) == 0)


# With 32 vector registers and two 512-bit FMAs a cycle, channel-vector tiles of 7
# positions x 2 vectors run a small plane's 3x3 conv faster than F(2x2) Winograd's GEMMs of
# few columns, until those have 49 tiles. znver5, 1 thread, channel vectors vs F(2x2): 512
# channels at 7x7 0.96 vs 2.02 ms, 256 at 10x10 0.47 vs 0.73, at 12x12 0.67 vs 0.80, at
# 13x13 0.78 vs 0.60. Zen 4's one FMA a cycle runs the direct conv at half that rate, and
# F(2x2) wins there (_default_winograd_schedule).
CHANNEL_VECTORS_MAX_WINOGRAD_TILES = 48


def _winograd_first(node, m: int, spec) -> bool:
    """Whether Winograd F(m x m, 3x3) (m = 0: none) beats channel vectors on this conv."""
    if not m:
        return False
    return (spec.vector_registers < 32 or m == 4 or not two_wide_fma_ports(spec)
            or _tiles(node, m) > CHANNEL_VECTORS_MAX_WINOGRAD_TILES)


def skinny_schedule(node, spec, tiles: GemmTiles, vectors: int = 0, blocks: int = 0):
    """Channels over the lanes: `vectors` vectors of them per tile (by default 2, or as
    many as a GEMM of fewer than SKINNY_COLUMNS columns fits), split into `blocks` items
    of whole panels per image and group (by default enough for TARGET_ITEMS)."""
    shape, pieces = conv_gemm_shape(node)
    lanes = spec.vector_bits // 32
    out_spatial = node.outputs[0].shape[2:]
    if not vectors:
        vectors = (skinny_vectors(shape.N, shape.M, lanes, spec.vector_registers)
                   if shape.N < SKINNY_COLUMNS else min(2, -(-shape.M // lanes)))
    panels = -(-shape.M // (lanes * vectors))
    parallel = (2 * shape.M * shape.N * shape.K * pieces >= PARALLEL_MIN_FLOPS
                or 4 * shape.M * shape.K * pieces >= PARALLEL_MIN_WEIGHT_BYTES)
    if parallel and not blocks and pieces == 1:
        while vectors > 1 and _items_share(panels, _even_items(panels)) > FEW_BLOCKS_MAX_SHARE:
            vectors //= 2  # halves of an odd few panels split evenly
            panels = -(-shape.M // (lanes * vectors))
        if _items_share(panels, min(panels, TARGET_ITEMS)) > FEW_BLOCKS_MAX_SHARE:
            blocks = _even_items(panels)
    blocks = blocks or (min(panels, -(-TARGET_ITEMS // pieces)) if parallel else 1)
    blocks = _equal_items(panels, blocks)
    return ConvSchedule(tiles, "rows", blocks, parallel and pieces * blocks > 1, lanes, vectors,
                        row_tile(plane_rows(out_spatial), out_spatial[-1], vectors,
                                 spec.vector_registers))


def _equal_items(panels: int, items: int) -> int:
    """How many items of equal numbers of panels (the last may have fewer) `items` gives."""
    return -(-panels // -(-panels // items))


def _items_share(panels: int, items: int) -> float:
    """The larger of two threads' shares of `panels` cut into `items` equal items."""
    size, count = -(-panels // items), _equal_items(panels, items)
    return _larger_run([size] * (count - 1) + [panels - (count - 1) * size]) / panels


def _larger_run(sizes: list[int]) -> int:
    """The larger of the two contiguous runs of items that two threads take."""
    half = -(-len(sizes) // 2)
    return max(sum(sizes[:half]), sum(sizes[half:]))


def _even_items(panels: int) -> int:
    """Items of whole panels that two threads share most evenly, as near TARGET_ITEMS as
    that allows (5 panels go 3 | 2 at best; 10 panels in 10 items, not 5 of 2)."""
    return min(range(1, panels + 1), key=lambda n: (_items_share(panels, n),
                                                    abs(_equal_items(panels, n) - TARGET_ITEMS)))


# Items of whole columns each stream all the weights: only where they are few, and each
# item has a few register tiles of columns (160 -> 960 channels at 7x7, four items of one
# tile: 0.22 -> 0.26 ms on znver3).
FEW_BLOCKS_MAX_WEIGHT_BYTES = 4 << 20
FEW_BLOCKS_MIN_TILES = 3
# the larger of two threads' shares of the columns, as the blocks split them, for column
# items to be worth it; else row items split the channels evenly (SqueezeNet's 512 -> 1000
# at 13x13: 169 columns in tiles of 32 go 96 | 73 at best, 0.57)
FEW_BLOCKS_MAX_SHARE = 0.55
# Row items each pack all of B: as few as balance 2 and 4 threads (znver4, 1 and 2
# threads, 8 items -> 4: 512 -> 1000 at 13x13 1.61 -> 1.56 and 0.83 -> 0.79 ms, 256 ->
# 1024 at 14x14 0.96 -> 0.94 and 0.49 -> 0.48 ms)
PACKED_ROW_BLOCKS = 4


def _few_column_blocks(shape: GemmShape, nr: int) -> int:
    """2 or 4 column blocks for a plane too narrow for TARGET_ITEMS of them, if their work
    splits evenly enough between two threads; else 0. Packed, items of whole columns beat
    row items that each pack all of B (znver3, 1 thread: 512 -> 1000 channels at 13x13
    2.73 -> 2.43 ms, 256 -> 1024 at 14x14 1.34 -> 1.22 ms)."""
    if shape.M * shape.K * 4 > FEW_BLOCKS_MAX_WEIGHT_BYTES:
        return 0
    tiles = -(-shape.N // nr)
    for blocks in (4, 2):
        if -(-tiles // blocks) < FEW_BLOCKS_MIN_TILES:
            continue
        # the columns of each block as split_blocks cuts them; a thread's items are a
        # contiguous run
        size, count, last = split_blocks(ConvSchedule(GemmTiles(1, nr, 1, 1), "columns", blocks),
                                         shape)
        sizes = [size] * (count - 1) + [last]
        if count >= 2 and _larger_run(sizes) <= FEW_BLOCKS_MAX_SHARE * shape.N:
            return blocks
    return 0


# ---------------------------------------------------------------- packed input panels

# B's k-th row is the input plane at koff[k]: a tile's loads of it are K rows a plane apart,
# misaligned, and set-aliasing in L1 when the plane is a multiple of 4 KiB. Copied into
# panels of nr columns (_panel_packer) they are one aligned sequential stream, and the copy
# is paid once per column tile of a work item while the tiles of every row block reuse it,
# so it pays where there are many rows. znver3, 1 thread, 1x1 convs in place -> packed:
# 64 -> 256 channels at 55x55 1.62 -> 1.24 ms; 512 -> 1000 at 32x32 (rows 4 KiB apart)
# 22.4 -> 13.7 ms.
PACK_MIN_ROWS = 64
PACK_MAX_BYTES = 8 << 20  # the panels of one conv (an im2col of a kxk conv is k*k inputs)


def with_packing(sched: ConvSchedule, shape: GemmShape, pieces: int) -> ConvSchedule:
    """The schedule, packing B where that pays: where each work item has many rows (items
    that split the rows pack the same B each; 160 rows split 7 ways at 7x7 on znver3, 1
    thread: 0.44 ms in place, 0.58 ms packing 23 rows' worth each)."""
    rows = split_blocks(sched, shape)[0] if sched.split == "rows" else shape.M
    pack = (rows >= PACK_MIN_ROWS and shape.N >= SMALL_N
            and panels_size(sched, shape, pieces) * 4 <= PACK_MAX_BYTES)
    return dataclasses.replace(sched, pack=pack)


# Packed, a tile's slice of B is one contiguous stream: reductions up to this long run in
# one piece instead of chunks whose partial sums go through the output (znver3, 1 thread,
# 512 -> 1000 channels at 13x13: 256 k per chunk 3.01 ms, all 512 at once 2.71 ms).
PACKED_MAX_KC = 512


# Unpacked, each k of a tile step reads B from its own place (an input plane, or a tap's
# run of one): a chunk of kc is kc streams, more than the caches' prefetchers follow.
# AMD EPYC (LLVM: znver3), 1 thread, YOLOv8n-640's 3x3 stride-2 conv of 16 -> 32 channels
# at 320x320 (K 144): 6.08 ms in one chunk, 5.69 / 5.47 / 5.15 ms in chunks of 72 / 48 /
# 24; the whole model new/old 0.967 and 0.997 (two runs), 0.955 at 2 threads. AVX-512
# reads a quarter of B per FMA and only gains where B streams from L3 or memory (an input
# several times L2): AMD EPYC (LLVM: znver4), 1 thread, the same conv 4.72 ms in one
# chunk, 4.05 / 3.76 / 3.39 ms in chunks of 72 / 48 / 24, at 160x160 (a 1.7 MB input)
# 618 / 617 us in one / of 48; chunked everywhere, SqueezeNet's 1x1 convs over planes in
# L2 lost (new/old 0.994 | 0.985 at 1 | 2 threads).
UNPACKED_MAX_KC = 48
UNPACKED_CHUNKS_MIN_INPUT_BYTES_512 = 4 << 20


# Packed panels save the tiles one stream of B per input plane they read: a few planes are
# few streams, which the prefetchers follow, and where two 512-bit FMA ports make the
# multiplies cheap the copy then costs more than it saves. Emerald Rapids, 1 thread, in
# place / packed: 16 -> 64 channels 3x3 at 55x55 1.27x, 1x1 1.16x, 3 -> 64 3x3 stride 2 at
# 224x224 1.07x; with 24 to 48 input channels 0.93-1.07x, with 64 or more 0.73-1.03x.
PACK_MIN_PLANES_TWO_WIDE_PORTS = 17
# An input that fits in L1 is read in place on Intel's two-FMA cores and on Zen 4: the
# copy buys no stream there (znver4, 544 -> 544 in 4 groups at 7x7, packed -> in place
# 0.91). Xeon (LLVM: rocketlake), alone, packed -> in place, 1 | 2 threads: 160 ->
# 960 channels at 7x7 (rows split 4 ways) 0.85 | 0.92, 544 -> 544 in 4 groups at 7x7 (2
# row items packed, 4 in place) 0.83 | 0.83. Wider planes keep their packing: without the
# column bound a 13x13 conv of SqueezeNet went in place and the model lost (new/old 1.04 |
# 1.07).
IN_PLACE_MAX_INPUT_BYTES = L1_BYTES
IN_PLACE_MAX_COLUMNS = 64


def _default_packing(sched: ConvSchedule, node, shape: GemmShape, pieces: int,
                     spec) -> ConvSchedule:
    """The schedule with B packed where that pays, and the reduction chunks that go with
    it: packed, up to PACKED_MAX_KC of k in one; unpacked, UNPACKED_MAX_KC at most on AVX2
    and on AVX-512 where the input is several times L2."""
    sched = with_packing(sched, shape, pieces)
    planes = node.inputs[0].shape[1] // node.attrs["group"]
    few_planes = two_wide_fma_ports(spec) and planes < PACK_MIN_PLANES_TWO_WIDE_PORTS
    small_in_l1 = ((intel_two_fma_ports(spec) or one_wide_fma_port(spec))
                   and shape.N <= IN_PLACE_MAX_COLUMNS
                   and node.inputs[0].nbytes // pieces <= IN_PLACE_MAX_INPUT_BYTES)
    if sched.pack and (few_planes or small_in_l1):
        sched = dataclasses.replace(sched, pack=False)
    if not sched.pack:
        streamed = node.inputs[0].nbytes >= UNPACKED_CHUNKS_MIN_INPUT_BYTES_512
        if sched.tiles.kc <= UNPACKED_MAX_KC or (spec.vector_bits >= 512 and not streamed):
            return sched
        return dataclasses.replace(sched, tiles=dataclasses.replace(
            sched.tiles, kc=even_chunk_size(shape.K, UNPACKED_MAX_KC)))
    if shape.K > PACKED_MAX_KC:
        return sched
    nr = sched.tiles.nr
    return dataclasses.replace(sched, tiles=GemmTiles(sched.tiles.mr, nr, shape.K,
                                                      l2_columns(shape.K, nr)))


def panel_width(sched: ConvSchedule, shape: GemmShape) -> int:
    return max(1, min(sched.tiles.nr, shape.N))


def item_panels(sched: ConvSchedule, shape: GemmShape) -> int:
    """Elements of one work item's panels: its column block (all columns when the items
    split rows: each then packs the same B, a copy per item of a few rows' worth of FMAs)."""
    nr = panel_width(sched, shape)
    columns = shape.N
    if sched.split == "columns":
        size, _, last = split_blocks(sched, shape)
        columns = max(size, last)  # the last block may be the longest
    return -(-columns // nr) * nr * shape.K


def panels_size(sched: ConvSchedule, shape: GemmShape, pieces: int) -> int:
    """Elements of the panels scratch: one region per work item."""
    return pieces * split_blocks(sched, shape)[1] * item_panels(sched, shape)


# ---------------------------------------------------------------- Winograd or direct

WINOGRAD_SIZES = (4, 2)  # output tile sizes m of F(m x m, 3x3)
# Below these the transforms cost more than the multiplies they save. znver3, 1 thread,
# direct -> Winograd: 16 channels at 160x160 1.44 -> 1.07 ms, 32 at 80x80 1.45 -> 0.78,
# 256 at 14x14 (16 tiles) 2.80 -> 1.37, but 256 at 12x12 (9 tiles) 2.18 -> 2.47.
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_TILES = 16


def winograd_eligible(node) -> bool:
    """A stride-1, dilation-1, ungrouped 2-D 3x3 conv with constant weights."""
    a = node.attrs
    return (list(a.get("kernel_shape", ())) == [3, 3] and list(a["strides"]) == [1, 1]
            and list(a["dilations"]) == [1, 1] and a["group"] == 1
            and node.inputs[1].is_const and "skinny_width" not in a)


# Cores that issue two 512-bit FMAs a cycle run the direct conv's GEMM twice as fast and
# Winograd's transforms no faster, so Winograd wants more channels there: this many on each
# side and twice as many on one. Emerald Rapids, 1 thread, F(4x4) -> direct: 16 -> 16
# channels at 80x80 377 -> 248 us, 32 -> 32 at 40x40 338 -> 242, 16 -> 64 at 55x55 523 ->
# 408; the other way, 32 -> 128 at 27x27 305 -> 405 and (F(2x2) -> channel vectors) 48 ->
# 192 at 13x13 190 -> 236, and DenseNet-121 (its 128 -> 32 convs) 4.5% slower in all.
WINOGRAD_MIN_CHANNELS_TWO_FMA = 32


# With this many channels on each side, F(4x4)'s 36 GEMMs run fast enough on Intel's
# two-FMA cores that one vector of 16 tiles pays, where fewer channels want two
# (winograd_tile_size). Emerald Rapids, F(2x2) -> F(4x4) on planes of 16-31 tiles, whole
# models new/old (ABBA-paired runs), 1 | 2 threads: ResNet-50 (256 -> 256 at 14x14) 1.016
# | 1.012; VGG-19 (512 at 14x14) 1.006 | 0.998 and YOLOv8n-640 (256 at 20x20) 0.998 |
# 0.989, both noise. With fewer channels F(4x4) loses: Inception v2 (64-192 at 14x14)
# 0.967 | 0.989, DenseNet-121 (128 -> 32) 0.985 | 0.999, YOLOv8n-320 (64-128 at 20x20)
# 0.904 | 0.928.
F4_ONE_VECTOR_MIN_CHANNELS = 256


# On Zen 5, F(2x2) pays from 32 channels on each side, without the 64 on one that Intel's
# two-FMA cores want: its two FADD pipes beside the two FMA pipes take the transforms'
# additions, we think, as Intel's ports that share adds and FMAs do not. znver5, 1 thread,
# YOLOv8n's 32 -> 32 3x3 convs at 40x40 in the model: direct 133 us, F(2x2) 108 us (F(4x4)
# 121 us alone: heavier transforms, for few channels); 16 -> 16 at 80x80 stays direct
# (F(4x4) 136 against 130 us). Whole models new/old, 1 | 2 threads: YOLOv8n-320 1.012 |
# 1.014, YOLOv8n-640 1.024 | 1.028. A narrow side of 16-31 channels takes F(2x2) too where
# the other has 64 or more, the GEMMs' share then large (found by tuning SqueezeNet at 1
# thread: 16 -> 64 at 55x55, direct 284-318 us, F(2x2) 217-237 us, in the model and alone).
def _default_winograd(node, spec, lanes: int) -> int:
    """The default's Winograd tile size m of F(m x m, 3x3), 0 for the direct conv."""
    if not winograd_eligible(node):
        return 0
    if not two_wide_fma_ports(spec):
        m = winograd_tile_size(node, lanes)
        return 2 if m == 4 and _f2_for_few_channels(node, spec) else m
    channels = _channels(node)
    amd = amd_two_wide_fma_ports(spec)
    if _many_channels_for_two_fma(node):
        one_vector = not amd and min(channels) >= F4_ONE_VECTOR_MIN_CHANNELS
        return winograd_tile_size(node, lanes, WINOGRAD_MIN_TILES if one_vector else None)
    if min(channels) < WINOGRAD_MIN_CHANNELS_TWO_FMA:
        expanding = (min(channels) >= WINOGRAD_MIN_CHANNELS
                     and max(channels) >= 2 * WINOGRAD_MIN_CHANNELS_TWO_FMA)
        return min(2, winograd_tile_size(node, lanes)) if amd and expanding else 0
    return min(2, winograd_tile_size(node, lanes)) if amd else 0


def _channels(node) -> tuple[int, int]:
    """(input, output) channels of a conv of one group."""
    return node.inputs[1].shape[1], node.outputs[0].shape[1]


def _many_channels_for_two_fma(node) -> bool:
    """Enough channels on each side, and twice that on one, for a two-FMA core's Winograd
    to follow the tile counts (winograd_tile_size) rather than its rules for few channels."""
    channels = _channels(node)
    return (min(channels) >= WINOGRAD_MIN_CHANNELS_TWO_FMA
            and max(channels) >= 2 * WINOGRAD_MIN_CHANNELS_TWO_FMA)


# On AVX2, with few channels and an input plane that fits L2, F(2x2) beats F(4x4). Our
# reading (not measured apart): its transforms, whose work grows with C + OC where the
# GEMMs' grows with C x OC, are lighter per output; its 4x4 patches read each input 4 times
# (F(4x4)'s 6x6 ones 2.25), which costs little from L2 and more past it. znver3, in the
# model, F(4x4) -> F(2x2), 1 | 2 threads: 16 -> 16 channels at 80x80 (410 KB) 0.77 | 0.76,
# 16 -> 64 at 55x55 0.84-0.86 | 0.83-0.88, 32 -> 32 at 40x40 0.81 | 0.74-0.79; but 32 -> 128
# at 27x27 1.27-1.29 | 1.22-1.24, and from inputs past L2 1.10-1.24 (16 -> 16 at 160x160,
# 1.6 MB) and 0.92-1.34 (32 -> 32 at 80x80, 820 KB) at 1 thread. The line: the channels'
# harmonic mean 2 C OC / (C + OC) (16, 25.6, 32 and 51.2 here) and the size of one image's
# padded input.
F2_MAX_HARMONIC_CHANNELS_AVX2 = 32
F2_MAX_INPUT_BYTES_AVX2 = 512 * 1024


def _f2_for_few_channels(node, spec) -> bool:
    x, c, oc = node.inputs[0], node.inputs[1].shape[1], node.outputs[0].shape[1]
    return (spec.vector_bits == 256 and x.nbytes // x.shape[0] <= F2_MAX_INPUT_BYTES_AVX2
            and 2 * c * oc <= F2_MAX_HARMONIC_CHANNELS_AVX2 * (c + oc))


# Zen 4 (32 registers, one 512-bit FMA a cycle): where winograd_tile_size picks F(2x2) for
# too few tiles to fill two vectors, F(4x4) with register tiles of 6 channels by ONE vector
# of tiles is faster, its 36 GEMMs no longer half-empty (found by tuning SqueezeNet at 2
# threads: 48/64 -> 192/256 at 13x13 1.26-1.30x alone). Whole models, interleaved, new/old,
# 1 | 2 threads: SqueezeNet 0.966 | 0.964, DenseNet-121 0.984 | 0.979, ResNet-50 (256 at
# 14x14) 0.978 | 0.971, Inception v2 0.949 | 0.952, VGG-19 (512 at 14x14) 0.987 | 0.989,
# YOLOv8n-320 0.938 | 0.946. (With its default two-vector tiles F(4x4) lost at 14x14: see
# winograd_tile_size.)
# That holds while F(4x4)'s tiles fill the vector. On smaller planes (12x12 and below)
# F(2x2), in one-vector register tiles while its own tiles fill fewer than two, beats both
# F(4x4) and the channel vectors of _winograd_first. AMD EPYC (LLVM: znver4), 1 thread,
# alone, channel vectors -> F(2x2): ZFNet-512's 256 -> 512 and 512 -> 512 at 12x12 (36
# tiles) 2.99 -> 1.74 and 6.08 -> 3.74 ms, AlexNet's 256 -> 384 2.24 -> 1.30; YOLOv8n-320's
# 256 at 10x10 (25 tiles, one vector) 1.06 -> 0.62 (two vectors 1.59), 128 0.27 -> 0.17;
# Inception v2's 192 -> 320 at 7x7 (16 tiles) 0.50 -> 0.32, 160 -> 224 0.29 -> 0.20;
# ResNet-50's 512 at 7x7 2.06 -> 1.76; DenseNet-121's 128 -> 32 at 7x7 0.034 both. F(4x4)
# in one vector of its 4-9 tiles there: 3.28 ms (ResNet-50), 0.34 (YOLOv8n), 0.49 (v2).
# (Found by tuning ZFNet-512.) Whole models, interleaved, new/old, 1 | 2 threads: ZFNet-512
# 0.856 | 0.867, YOLOv8n-320 0.928 | 0.930, AlexNet 0.957 | 0.984, Inception v2 0.966 |
# 0.969, ResNet-50 0.988 | 0.991, DenseNet-121 1.000 | 1.003.
# Zen 5 gains the same where F(2x2) came from a plane of too few tiles with many channels,
# not from its rule for few channels (_default_winograd: there F(4x4) in one vector lost,
# SqueezeNet's 16 -> 64 at 55x55 among them). Found by tuning Inception v1 on znver5, 1
# thread, alone, F(2x2) -> F(4x4) in one vector: 96-160 -> 208-320 at 14x14 0.80-0.87.
# Whole models, interleaved, new/old, 1 | 2 threads: ResNet-50 0.973 | 0.986, Inception v1
# 0.976 | 0.988, Inception v2 0.977 | 0.983, YOLOv8n-320 0.977 | 0.974, SqueezeNet 0.983 |
# 0.984, DenseNet-121 0.995 at 1 thread.
def _default_winograd_schedule(node, m: int, spec, shape: GemmShape) -> ConvSchedule:
    lanes = spec.vector_bits // 32
    if m == 2 and _one_vector_tiles_pay(node, spec):
        one_vector = winograd_gemm_tiles(6, lanes, shape)
        if _tiles(node, 4) >= lanes:
            return winograd_schedule(node, 4, lanes, tiles=one_vector)
        return winograd_schedule(node, 2, lanes,
                                 tiles=one_vector if _tiles(node, 2) < 2 * lanes else None)
    return winograd_schedule(node, m, lanes)


def _one_vector_tiles_pay(node, spec) -> bool:
    return spec.cpu == "znver4" or (amd_two_wide_fma_ports(spec)
                                    and _many_channels_for_two_fma(node))


def winograd_gemm_tiles(mr: int, nr: int, shape: GemmShape) -> GemmTiles:
    """Register tiles of mr channels by nr tiles for Winograd's GEMMs, over chunks of at
    most 256 input channels (shape: the conv's GEMM, K = C x 9)."""
    return GemmTiles(mr, nr, min(shape.K // 9, 256), 64 * nr)


def _tiles(node, m: int) -> int:
    """F(m x m, 3x3)'s tiles per output plane."""
    return math.prod(-(-d // m) for d in node.outputs[0].shape[2:])


def winograd_tile_size(node, lanes: int, f4_min_tiles: int | None = None) -> int:
    """F(4x4, 3x3) where its tiles are enough and few outputs of edge tiles are thrown
    away; else F(2x2, 3x3) (2.25x fewer multiplies instead of 4x) for small planes on the
    same conditions; 0: the direct conv. The conditions keep the GEMMs' columns filling
    register tiles, and enough channels that the GEMMs dominate the transforms. znver3, 1
    thread, direct -> F(2x2): 256 channels at 10x10 1.58 -> 0.71 ms, 512 at 7x7 3.20 ->
    1.79 ms; at 14x14 F(4x4) beats F(2x2), 1.37 vs 1.55 ms.

    F(4x4) also wants two vectors of tiles (its GEMMs' columns): with 16 lanes, one
    vector of 16 tiles or 25 in two leaves its 36 GEMMs short and their weights (4x the
    conv's) barely reused. znver4, 1 thread, F(4x4) -> F(2x2): 256 channels at 14x14
    (16 tiles) 1258 -> 1077 us, 192 at 14x14 723 -> 619, 128 at 20x20 (25 tiles)
    978 -> 669; from 28x28 (49 tiles) F(4x4) wins, 128 channels 882 vs 1457 us.
    `f4_min_tiles` replaces those two vectors (F4_ONE_VECTOR_MIN_CHANNELS)."""
    y = node.outputs[0]
    if min(node.inputs[1].shape[1], y.shape[1]) < WINOGRAD_MIN_CHANNELS:
        return 0
    for m in (4, 2):
        tiles = _tiles(node, m)
        least = (f4_min_tiles or max(WINOGRAD_MIN_TILES, 2 * lanes) if m == 4
                 else WINOGRAD_MIN_TILES)
        if tiles >= least and tiles * m * m <= 1.35 * y.shape[2] * y.shape[3]:
            return m
    return 0


# Columns of an item's GEMMs at most. Wider items stream U (36 x OC x C weights) fewer
# times, until V and M outgrow what the caches hold. znver5, 1 | 2 threads, alone, against
# the old rule (at most ~128 columns: its measurements had V and M aliasing in L1, see
# kernels/winograd.position_stride): 64 channels at 224x224 in items of 224 columns 1.09
# | 0.99, of 392 1.06 | 0.92, of 784 1.00 | 0.89; 128 at 112x112, 196 columns 1.12 | 1.11,
# 392 1.12 | 1.08; 256 at 56x56 one item of 196 1.13 | 1.12; 80 at 80x80 200 columns
# 1.15 | 1.17, 400 (one item) 1.16 | 1.25; 64 at 56x56 one item of 196 1.05 | 1.06.
WINOGRAD_MAX_ITEM_COLUMNS = 224


def winograd_tile_rows(tile_rows_total: int, tiles_per_row: int) -> int:
    """Rows of tiles per work item: wide GEMMs of up to WINOGRAD_MAX_ITEM_COLUMNS columns
    (narrow items are slow: 128 channels at 28x28 on znver3, 49 columns 1.04 ms, 28
    columns 1.79 ms, 14 columns 3.9 ms); dummy rows of tiles that pad the last item cost
    their share."""
    best, best_cost = 1, math.inf
    most = max(1, min(tile_rows_total, WINOGRAD_MAX_ITEM_COLUMNS // tiles_per_row))
    for r in range(1, most + 1):
        padded = -(-tile_rows_total // r) * r
        cost = padded / tile_rows_total * (1 + 100 / (r * tiles_per_row))
        if cost < best_cost:
            best, best_cost = r, cost
    return best


# A plane of one item runs each phase as a parallel loop of its own (3 fork/joins), or a
# second thread would have nothing to do; several items keep an item's V and M in cache
# between its phases, which pays even where the items split unevenly over the threads.
# znver5, 1 | 2 threads, items against phases: 128 channels at 112x112 in 4 items 1.12 |
# 1.11 against 1.02 | 1.02 (the old default, 7 items in phases: 1.00 | 1.00), in 2 items
# 1.12 | 1.08 against 1.05 | 1.06; 64 at 224x224 in 14 items 1.09 | 0.99 against 0.81 | 0.77.
WINOGRAD_MIN_ITEMS = 2


def winograd_schedule(node, m: int, lanes: int, tile_rows: int | None = None,
                      tiles: GemmTiles | None = None, phases: bool | None = None) -> ConvSchedule:
    y = node.outputs[0]
    c, oc = node.inputs[1].shape[1], y.shape[1]
    th, tw = (-(-d // m) for d in y.shape[2:])
    rows = tile_rows or winograd_tile_rows(th, tw)
    items = y.shape[0] * -(-th // rows)
    tiles = tiles or default_tiles(GemmShape(oc, rows * tw, c), lanes)
    phases = items < WINOGRAD_MIN_ITEMS if phases is None else phases
    return ConvSchedule(tiles, "columns", 1, True, winograd=m, tile_rows=rows,
                        winograd_phases=phases)


# register tiles as (rows, vectors per row), of 6-16 accumulators; the first three also for
# Winograd's GEMMs
TILE_SHAPES = ((6, 2), (4, 3), (3, 4), (4, 2), (2, 4), (1, 8))
# more on targets with 32 vector registers (AVX-512)
WIDE_TILE_SHAPES = ((8, 2), (6, 3), (4, 4))


@search_space("Conv")
def conv_space(node, spec) -> list[ConvSchedule]:
    shape, pieces = conv_gemm_shape(node)
    lanes = spec.vector_bits // 32
    shapes = TILE_SHAPES + (WIDE_TILE_SHAPES if spec.vector_registers >= 32 else ())
    tile_shapes = [(mr, v * lanes) for mr, v in shapes]
    base = default_conv_schedule(node, spec)
    if base.blocked:  # the layout is the graph's choice: the tuner tunes the tiles within it
        others = {blocked_schedule(base, node, spec, v, split, p)
                  for v in range(1, min(3, _channel_blocks(node, spec)) + 1)
                  for p in blocked_positions(node, spec, v)
                  for split in ("columns", "rows")} - {base}
        return [base] + sorted(others, key=lambda s: (s.vectors, -s.positions, s.split))
    out = [base] if base.lanes else []
    if base.pack:  # the tuner measures whether packing pays
        out.append(dataclasses.replace(base, pack=False))
    if conv_wide(node) is not None and len(node.outputs[0].shape) > 3:  # by rows or wide
        out += [rows_schedule(node, GemmTiles(mr, nr, shape.K, nr))
                for mr, nr in tile_shapes[:3] if mr <= shape.M]
        if base.by_rows and base not in out:
            out.insert(0, base)
    if winograd_eligible(node) and shape.N >= SKINNY_COLUMNS:
        # a direct schedule stays in the space below: the tuner measures both algorithms
        for m in WINOGRAD_SIZES:
            out.append(winograd_schedule(node, m, lanes))
            out.append(winograd_schedule(node, m, lanes, phases=not out[-1].winograd_phases))
            rows, tile_rows = out[-1].tile_rows, -(-node.outputs[0].shape[2] // m)
            for r in sorted({max(1, rows // 2), min(tile_rows, 2 * rows)} - {rows}):
                out.append(winograd_schedule(node, m, lanes, tile_rows=r))
            for mr, nr in tile_shapes[:3]:
                out.append(winograd_schedule(node, m, lanes,
                                             tiles=winograd_gemm_tiles(mr, nr, shape)))
    if node.inputs[1].is_const and shape.N >= SKINNY_COLUMNS and shape.M >= lanes:
        for vectors in range(1, min(MAX_VECTORS, -(-shape.M // lanes)) + 1):
            out.append(skinny_schedule(node, spec, base.tiles, vectors))
    for mr, nr in tile_shapes:
        if mr > shape.M or shape.N < SMALL_N:
            continue
        for kc in sorted({min(shape.K, k) for k in (128, 256, 384, 512)}):
            for nc_tiles in (4, 16, 64):
                tiles = GemmTiles(mr, nr, kc, nc_tiles * nr)
                for split, blocks in (("columns", 1), ("columns", 2), ("columns", 4),
                                      ("columns", 8), ("rows", 2), ("rows", 4)):
                    out.append(with_packing(ConvSchedule(tiles, split, blocks,
                                                         base.parallel or blocks > 1),
                                            shape, pieces))
    return out or [base]


def split_blocks(sched: ConvSchedule, shape: GemmShape) -> tuple[int, int, int]:
    """(block size, block count, size of the last block) along the split axis; row blocks
    are whole register tiles (packed weights start a tile at every multiple of mr).

    Blocks are as near total / blocks as whole units allow, and the last one takes what
    is left over (less than a block more), so that threads taking contiguous runs of items
    get even shares: rounding the size up instead left 784 columns in tiles of 32 asked
    for 8 blocks as 6 of 128 and one of 16 (512 vs 272 columns on 2 threads), 196 in 2
    as 128 and 68; now 7 of 96 and one of 112, 96 and 100."""
    total, unit = (shape.N, sched.tiles.nr) if sched.split == "columns" else (shape.M, sched.tiles.mr)
    unit = max(1, min(unit, total))
    size = max(unit, total // max(1, sched.blocks) // unit * unit)
    count = total // size
    return size, count, total - (count - 1) * size


# ---------------------------------------------------------------- lowering

@lowering("Conv")
def lower_conv(node, kb, ins, outs):
    if node.schedule.by_rows:
        return lower_conv_rows(node, kb, ins, outs)
    xq, w, bias, koff, residual = (ins + [None])[:5]
    y, wide = outs[0], (outs[1] if conv_wide(node) is not None else None)
    panels = outs[-1] if node.attrs.get("panels") else None
    group, act = node.attrs["group"], node.attrs.get("activation")
    sched = node.schedule
    N, C = xq.shape[:2]
    OC, out_spatial = y.shape[1], y.shape[2:]
    rank = len(out_spatial)
    q_shape = xq.shape[-rank:]
    # the wide scratch may have a few more columns than wide_size (whole register tiles)
    P = wide.shape[1] if wide is not None else wide_size(out_spatial, q_shape)
    icg, ocg, kred = C // group, OC // group, koff.shape[0]
    chan = int(np.prod(xq.shape[2:], dtype=np.int64))
    plane = int(np.prod(out_spatial, dtype=np.int64))
    shape = GemmShape(ocg, P, kred)

    def epilogue(n, oc):
        """(value, offset in the output plane) -> act(value + bias[oc] + residual), with the
        bias loaded once per output channel (passes/fuse_activation.py fuses the rest)."""
        b = kb.local(y.dtype, bias[oc], "bias") if bias is not None else None

        def finish(value, offset):
            if b is not None:
                value = value + Get(b)
            if residual is not None:
                value = value + residual.flat((n * OC + oc) * plane + offset)
            return apply_activation(act, value)
        return finish

    skinny = "skinny_width" in node.attrs
    count = sched.blocks if skinny else split_blocks(sched, shape)[1]
    kind = "parallel" if sched.parallel else "serial"
    with kb.loop(N * group * count, kind=kind, name="item") as item:
        n, g, blk = item // (group * count), (item // count) % group, item % count
        x_base = (n * C + g * icg) * chan
        row0 = g * ocg
        if wide is None:
            out = Output(y, lambda m, p0: (n * OC + row0 + m) * P + p0,
                         lambda m: epilogue(n, row0 + m), heavy=is_heavy(act))
        else:
            out = Output(wide, lambda m, p0: (n * OC + row0 + m) * P + p0)
        if skinny:  # straight into y: passes/pack_weights.py dropped the wide scratch
            out = Output(y, lambda m, p: (n * OC + row0 + m) * plane + p,
                         lambda m: epilogue(n, row0 + m), heavy=is_heavy(act))
            emit_skinny_gemm(kb, w, g, ocg, kred, sched, xq, lambda k: x_base + koff[k],
                             output_rows(out_spatial, q_shape), out, blk)
        else:
            b = Operand(xq, lambda k, p: x_base + koff[k] + p)
            pack = panels is not None and _panel_packer(kb, panels, b, shape, sched, item)
            _block_gemm(kb, sched, shape, blk, _weights(w, g, ocg, kred, node.attrs), b, out,
                        y.dtype, pack, "packed_mr" in node.attrs)
    if wide is not None:
        _crop(kb, y, wide, q_shape, epilogue, kind)


def _block_gemm(kb, sched, shape, blk, a, b, out, dtype, pack=None, a_tiled=False):
    """Block `blk` of the GEMM along the schedule's split axis (the last block may be
    shorter: it gets its own copy of the loops, so every loop bound stays constant).
    `pack(off, width)`, if given, packs a column block's B and returns it as an operand."""
    size, count, tail = split_blocks(sched, shape)

    def emit(off, width):
        if sched.split == "columns":
            part = GemmShape(shape.M, width, shape.K)
            b_part = pack(off, width) if pack else Operand(
                b.buf, lambda k, p: b.base(k, p + off), b.step)
            a_part = a
            out_part = Output(out.buf, lambda m, p0: out.start(m, p0 + off),
                              out.row_epilogue and (lambda m: _shifted(out.finisher(m), off)),
                              out.heavy)
        else:
            part = GemmShape(width, shape.N, shape.K)
            a_part = Operand(a.buf, lambda m, k: a.base(m + off, k), a.step)
            b_part = pack(as_expr(0), shape.N) if pack else b
            out_part = Output(out.buf, lambda m, p0: out.start(m + off, p0),
                              out.row_epilogue and (lambda m: out.finisher(m + off)), out.heavy)
        emit_gemm(kb, part, a_part, b_part, out_part, dtype, sched.tiles, a_tiled, bool(pack))

    if count == 1:
        emit(as_expr(0), shape.N if sched.split == "columns" else shape.M)
    elif tail == size:
        emit(blk * size, size)
    else:
        with kb.if_(blk < count - 1) as branch:
            emit(blk * size, size)
        with kb.else_(branch):
            emit(as_expr((count - 1) * size), tail)


def _panel_packer(kb, panels, b, shape: GemmShape, sched: ConvSchedule, item):
    """pack(off, width): copy B's columns [off, off + width) into work item `item`'s panels,
        panels[item * item_panels + (p // nr * K + k) * nr + p % nr] = B(k, off + p),
    and return them as the block's B operand (columns counted from off)."""
    nr, K = panel_width(sched, shape), shape.K
    base = item * item_panels(sched, shape)

    def copy(tile, src_column, columns):
        with kb.loop(K, name="k") as k:
            src = kb.local(INDEX, b.base(k, src_column), "src")
            dst = kb.local(INDEX, base + (tile * K + k) * nr, "dst")
            with kb.loop(columns, name="j") as j:
                kb.store_flat(panels, Get(dst) + j, b.buf.flat(Get(src) + j))

    def pack(off, width):
        full, rest = divmod(width, nr)
        if full:
            with kb.loop(full, name="tile") as t:
                copy(t, off + t * nr, nr)
        if rest:
            copy(as_expr(full), off + full * nr, rest)
        return Operand(panels, lambda k, p: base + (p // nr * K + k) * nr + p % nr)
    return pack


def _shifted(finish, off):
    return lambda value, p: finish(value, p + off)


def _weights(w, g, ocg, kred, attrs) -> Operand:
    """W as the GEMM's A operand: ONNX layout, or tile-packed by passes/pack_weights.py
    (element (m, k) of group g at ((g * rows + m0) * K + k * MR + m - m0), m0 = m - m % MR)."""
    mr = attrs.get("packed_mr")
    if mr is None:
        return Operand(w, lambda m, k: (g * ocg + m) * kred + k, kred)
    rows = -(-ocg // mr) * mr
    # tiles start at multiples of MR, so base(m0, k) + i reaches row m0 + i
    return Operand(w, lambda m0, k: (g * rows + m0) * kred + k * mr, 1)


def _crop(kb, y, wide, q_shape, epilogue, kind):
    """Copy the real outputs out of the wide buffer through the epilogue, one output
    channel of one image per iteration."""
    N, OC, out_spatial = y.shape[0], y.shape[1], y.shape[2:]
    qstr, ystr = row_major_strides(q_shape), row_major_strides(out_spatial)
    P = wide.shape[1]
    with kb.loop(N * OC, kind=kind, name="noc") as noc:
        n, oc = noc // OC, noc % OC
        finish = epilogue(n, oc)
        with kb.loops(out_spatial) as o:
            src = sum((oi * s for oi, s in zip(o, qstr)), as_expr(0))
            offset = sum((oi * s for oi, s in zip(o, ystr)), as_expr(0))
            kb.store(y, (n, oc, *o), finish(wide.flat(noc * P + src), offset))


def conv_tap_offsets(in_channels, kernel, dilations, strides, q_shape) -> np.ndarray:
    """koff[k] for k = (ic, tap...) in W's layout: where that tap's window starts in xq."""
    qstr = row_major_strides(q_shape)
    plane = int(np.prod(q_shape, dtype=np.int64))
    phases = row_major_strides(strides)
    chan = plane * int(np.prod(strides, dtype=np.int64))
    offs = []
    for ic in range(in_channels):
        for tap in itertools.product(*[range(k) for k in kernel]):
            off = ic * chan
            for t, d, s, ps, qs in zip(tap, dilations, strides, phases, qstr):
                shift, phase = divmod(t * d, s)
                off += phase * ps * plane + shift * qs
            offs.append(off)
    return np.asarray(offs, np.int64)


@lowering("ConvTranspose")
def lower_conv_transpose(node, kb, ins, outs):
    """Per image and group: col = W^T X (a GEMM), then col2im scatters col into y.

    col[(oc, tap), i] is what input position i contributes to output i * s - pad + tap * d.
    W is (C, OC / group, *kernel), so for a fixed input channel the (oc, tap) rows are
    contiguous and the GEMM's A operand is read along rows of W.
    """
    x, w, bias = ins
    y, col = outs
    group = node.attrs["group"]
    N, C = x.shape[:2]
    OC = y.shape[1]
    icg, ocg = C // group, OC // group
    taps = int(np.prod(w.shape[2:], dtype=np.int64))
    rows = ocg * taps
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    with kb.loop(N, name="n") as n:
        _fill_bias(kb, y, n, bias)
        with kb.loop(group, name="g") as g:
            x_base = (n * C + g * icg) * plane
            emit_gemm(kb, GemmShape(rows, plane, icg),
                      Operand(w, lambda m, k: (g * icg + k) * rows + m),
                      Operand(x, lambda k, p: x_base + k * plane + p),
                      Output(col, lambda m, p0: m * plane + p0), y.dtype)
            _col2im(kb, y, col, n, g * ocg, ocg, w.shape[2:], node.attrs, x.shape[2:])


def _fill_bias(kb, y, n, bias):
    OC = y.shape[1]
    plane = int(np.prod(y.shape[2:], dtype=np.int64))
    with kb.loop(OC, name="oc") as oc:
        value = bias[oc] if bias is not None else as_expr(0.0, y.dtype)
        with kb.loop(plane, name="s") as s:
            kb.store_flat(y, (n * OC + oc) * plane + s, value)


def _col2im(kb, y, col, n, oc0, ocg, kernel, attrs, in_spatial):
    """One static loop nest per kernel tap, over exactly the inputs that land inside y."""
    strides, dilations, pads = attrs["strides"], attrs["dilations"], attrs["pads_begin"]
    out_spatial = y.shape[2:]
    in_plane = int(np.prod(in_spatial, dtype=np.int64))
    in_strides = row_major_strides(in_spatial)
    for tap_index, tap in enumerate(itertools.product(*[range(k) for k in kernel])):
        lo = [max(0, math.ceil((p - t * d) / s))
              for p, t, d, s in zip(pads, tap, dilations, strides)]
        hi = [min(i, math.ceil((o + p - t * d) / s)) for i, o, p, t, d, s in
              zip(in_spatial, out_spatial, pads, tap, dilations, strides)]
        if any(a >= b for a, b in zip(lo, hi)):
            continue
        with kb.loop(ocg, name="oc") as oc:
            row = (oc * _tap_count(kernel) + tap_index) * in_plane
            with kb.loops([b - a for a, b in zip(lo, hi)]) as rel:
                i = [r + a for r, a in zip(rel, lo)]
                o = tuple(ii * s - p + t * d
                          for ii, s, p, t, d in zip(i, strides, pads, tap, dilations))
                src = row + sum((ii * st for ii, st in zip(i, in_strides)), as_expr(0))
                dst = (n, oc0 + oc, *o)
                kb.store(y, dst, y[dst] + col.flat(src))


def _tap_count(kernel) -> int:
    return int(np.prod(kernel, dtype=np.int64))
