"""Depthwise 2-D convolution (one filter per channel: group == channels == output channels),
read straight from the unpadded NCHW input (frontend/converters/nn.py picks this path).

Per (image, channel) plane, output rows whose window stays inside the input are one loop
and the few others (top and bottom) static code with only their in-bounds kernel rows.
Each row goes in vectors of output columns (the target's lanes), all K*K taps accumulated
in registers with the weights broadcast, in independent chains (DepthwiseSchedule: how
many, whether planes split over the threads and whether small planes go flat, below, are
the autotuner's knobs): the vectors whose taps all lie inside the row are one loop without
checks; the edge vectors and a partial last one are static code whose taps read only their
in-bounds lanes: masked loads on AVX-512, and plain loads and blends with zeros without its
cheap masked loads (AVX2, NEON) wherever the whole vector lies inside the plane (_tap). With stride 2 a tap is a strided vector load (ir/loops.VLoad:
a run loaded whole and shuffled), as LLVM's loop vectorizer left rows of 14 or 7 outputs
scalar and summed the taps across lanes. On AVX2 (DepthwiseSchedule.dense_columns) a vector
of stride-2 outputs is two vectors of taps at every column instead, plain loads, its even
lanes picked once (ir/loops.Pick). Or (DepthwiseSchedule.phase_rows, stride 2) each plane's
rows are first split into their even and odd columns in a scratch array of the thread's,
zero-padded, after which every tap is a plain load.
Small planes of stride 1 whose rows fill few lanes go flat instead (DepthwiseSchedule.flat):
the plane as one run of vectors, each tap a load whose lanes are masked where the tap falls
outside the plane (a 7x7 plane in 4 vectors of 16 lanes instead of 7 rows of one).
Rows of taps go in blocks of output rows (DepthwiseSchedule.row_block): each vector of an
input row is loaded once for every output row whose window holds it. One row at a time the
loads set the pace, not the FMAs: a whole vector at any column offset crosses a cache line.
The generic path (ConvPad, then an implicit GEMM of one row per group) wrote the whole
input once more and ran at about 20 GFLOP/s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.loops import MAX_SCRATCH_BYTES, Get, as_expr, broadcast, chain_add, pick_lanes
from .conv import PARALLEL_MIN_FLOPS
from .epilogue import apply_activation
from .registry import lowering
from .schedule import default_rule, search_space

# Depthwise convs run at a quarter to a half of a GEMM conv's FLOP rate (two loads and one
# FMA per tap), so the same fork/join pays off at a quarter of its FLOPs: on znver4 at 2
# threads a 5x5 over 672 channels at 7x7 (1.7 MFLOP) took 78 us on one thread.
PARALLEL_MIN_TAP_FLOPS = PARALLEL_MIN_FLOPS // 4

# The flat path's code is static per vector and tap: at most this many taps' loads per
# plane (a 14x14 plane in 16 lanes with 5x5 taps is 13 x 25).
FLAT_MAX_LOADS = 400


@dataclass(frozen=True)
class DepthwiseSchedule:
    # independent chains the taps are summed in: one chain of 25 FMAs (5x5) waits four
    # cycles on each; two were best in all on znver4 (four on 7x7 planes, two on 28x28)
    accumulators: int
    parallel: bool  # planes split over the threads (only where there are several)
    # the plane as one run of vectors, a tap's lanes masked where they cross a row's end
    # (stride 1, same-size planes): rows shorter than a vector fill its lanes
    flat: bool = False
    # with a column stride s > 1, a vector of outputs is s vectors of taps at every column
    # (s x the FMAs, plain loads) whose lanes are picked once, not a strided load (a masked
    # run and a shuffle) per tap
    dense_columns: bool = False
    # with column stride 2, each plane's rows are first split into their even and odd
    # columns, zero-padded, in a scratch array of the thread's (phase_rows_fit): every tap
    # is then a plain load, and each input row is shuffled once, not once per tap
    phase_rows: bool = False
    # output rows computed together (rows of taps, not dense columns or phase rows): each
    # loaded vector of an input row serves every row of the block whose window holds it
    row_block: int = 1


@dataclass(frozen=True)
class BlockedDepthwiseSchedule:
    """In the blocked layout (kernels/depthwise_blocked.py)."""
    positions: int  # outputs along a row per register tile
    parallel: bool
    blocked: ClassVar[bool] = True  # passes/blocked_layout.py rewrites the node for it


def phase_rows_fit(node, lanes: int) -> bool:
    """Whether a plane's phase rows (phase_row_width each) fit a scratch array."""
    if _column_stride(node) != 2:
        return False
    return _phase_rows_bytes(node, lanes) <= MAX_SCRATCH_BYTES


def _phase_rows_bytes(node, lanes: int) -> int:
    x = node.inputs[0]
    return 2 * x.shape[2] * phase_row_width(node, lanes) * x.dtype.itemsize


def phase_row_width(node, lanes: int) -> int:
    """Columns of one phase row: every output vector's taps read whole vectors in it."""
    OW, KW = node.outputs[0].shape[3], node.attrs["kernel_shape"][1]
    return -(-OW // lanes) * lanes + (KW - 1) // 2


def _planes(node) -> int:
    """(image, channel) planes: the parallel loop's extent."""
    return node.outputs[0].shape[0] * node.outputs[0].shape[1]


def flat_fits(node, lanes: int) -> bool:
    """Whether the flat path applies and needs fewer vectors than rows of vectors do."""
    H, W = node.inputs[0].shape[2:]
    OH, OW = node.outputs[0].shape[2:]
    KH, KW = node.attrs["kernel_shape"]
    if tuple(node.attrs["strides"]) != (1, 1) or (OH, OW) != (H, W):
        return False
    vectors = -(-H * W // lanes)
    return vectors < H * -(-W // lanes) and vectors * KH * KW <= FLAT_MAX_LOADS


# AVX2 cores on which flat planes and phase rows (where they fit) beat rows of vectors and
# dense columns. AMD EPYC (LLVM: znver1), 1 thread, MobileNetV3's depthwise convs, the
# tuner's times in the model: flat 14x14 planes, 3x3 over 184-672 channels, 0.33-0.34x
# the time of rows (672 channels 634 -> 209 us); phase rows, stride 2, 0.60-0.75x of
# dense columns (5x5 over 672 channels at 14x14 652 -> 390 us, over 72 at 56x56 561 ->
# 422, 3x3 over 240 at 28x28 319 -> 230). AMD EPYC (LLVM: znver3), 1 thread, in the model:
# flat 14x14 planes, 3x3 over 200-672 channels, 0.47-0.51x (672 channels 113 -> 54 us);
# phase rows as on AVX-512 (_phase_rows_pay), stride 2: 5x5 over 72 channels at 56x56
# 0.74x, but 3x3 over 112 at 56x56 (ShuffleNet) 1.21x, over 136 at 28x28 1.00x (over 240
# in MobileNetV3 0.80x) and 5x5 over 672 at 14x14, 7 outputs a row, 1.18x.
FLAT_AVX2_CPUS = ("znver1", "znver3")
PHASE_ROWS_WHEREVER_IN_L1_CPUS = ("znver1",)


# Outputs per register tile of a blocked depthwise conv (kernels/depthwise_blocked.py):
# 8 and 12 the same in MobileNetV3 (znver4, 0.998 | 0.998), 12 ahead alone on 5x5 taps
# (stride 2 over 72 channels at 56x56 48 -> 36 us, 5x5 over 120 at 28x28 53 -> 50).
BLOCKED_POSITIONS = 12


@default_rule("DepthwiseConv")
def default_depthwise_schedule(node, spec) -> DepthwiseSchedule | BlockedDepthwiseSchedule:
    KH, KW = node.attrs["kernel_shape"]
    flops = 2 * node.outputs[0].size * KH * KW
    if node.attrs.get("layout") == "blocked":  # passes/blocked_layout.py's choice
        return BlockedDepthwiseSchedule(BLOCKED_POSITIONS, flops >= PARALLEL_MIN_TAP_FLOPS)
    lanes = spec.vector_bits // 32
    wide, flat_avx2 = spec.vector_bits >= 512, spec.cpu in FLAT_AVX2_CPUS
    # measured on AVX-512, where masked loads cost what plain ones do, and on Zen 1
    flat = (wide or flat_avx2) and flat_fits(node, lanes)
    phases = (_phase_rows_in_l1(node, lanes) if spec.cpu in PHASE_ROWS_WHEREVER_IN_L1_CPUS
              else (wide or flat_avx2) and _phase_rows_pay(node, lanes))
    # AVX2's masked loads and cross-lane shuffles cost two to four times a plain load: a
    # strided tap took about 4 cycles (znver3). AVX-512 does either in one instruction,
    # which beat twice the FMAs on 3x3 taps but not on 5x5 ones, one row at a time (znver4,
    # 1 thread, stride 2: 5x5 over 72 channels at 56x56 126 -> 92 us, over 672 at 14x14 76
    # -> 56; 3x3 over 64 at 112x112 108 -> 115). Blocks of rows (_row_block) load each
    # strided tap once for several rows, and 5x5 taps go strided too (Xeon rocketlake, 1
    # thread, dense -> strided in blocks of 4 rows: 5x5 over 672 at 14x14 51 -> 42 us, over
    # 240 at 28x28 63 -> 42, over 16 at 128x128 76 -> 55)
    dense = _column_stride(node) > 1 and not wide and not phases
    rows = 1 if flat or dense or phases else _row_block(spec)
    return DepthwiseSchedule(2, flops >= PARALLEL_MIN_TAP_FLOPS and _planes(node) > 1, flat,
                             dense, phases, rows)


def _row_block(spec) -> int:
    """Rows of taps in blocks of 4 with 32 vector registers, of 2 with 16, where the taps
    (kept in registers, else broadcast from memory into the FMAs) and the block's sums
    still mostly fit. Xeon rocketlake, 1 thread, stride 1 unless said: 5x5 over 120
    channels at 28x28 67 -> 54 (2) -> 47 us (4); 3x3 over 72 at 56x56 55 -> 46 -> 40;
    3x3 stride 2 over 240 at 28x28 22 -> 18 -> 17. The same kernels built for AVX2 (16
    registers) on that Xeon: 98 -> 72 -> 70, 61 -> 44 -> 47; 3x3 over 116 at 28x28 25 ->
    22 -> 24."""
    return 4 if spec.vector_registers >= 32 else 2


# Phase rows beat dense columns where 5 or more taps a row share each split row and the
# rows fill whole vectors, with the plane's phase rows in L1 (znver4, 1 thread, stride 2:
# 5x5 over 72 channels at 56x56 101 -> 70 us; 5x5 over 672 at 14x14, 7 outputs a row,
# 57 -> 86; 3x3 over 64 at 112x112, 58 KB of phase rows, 110 -> 152, over 240 at 28x28 24
# -> 28 against strided taps). Measured on AVX-512 only: on AVX2 the tuner's to choose.
PHASE_ROWS_MIN_TAPS = 5
PHASE_ROWS_MAX_BYTES = 32 * 1024


def _phase_rows_pay(node, lanes: int) -> bool:
    return (node.attrs["kernel_shape"][1] >= PHASE_ROWS_MIN_TAPS
            and node.outputs[0].shape[3] >= lanes and _phase_rows_in_l1(node, lanes))


def _phase_rows_in_l1(node, lanes: int) -> bool:
    return phase_rows_fit(node, lanes) and _phase_rows_bytes(node, lanes) <= PHASE_ROWS_MAX_BYTES


def _column_stride(node) -> int:
    return node.attrs["strides"][1]


@search_space("DepthwiseConv")
def depthwise_space(node, spec) -> list[DepthwiseSchedule | BlockedDepthwiseSchedule]:
    if node.attrs.get("layout") == "blocked":  # the layout is the graph's choice
        return [BlockedDepthwiseSchedule(p, par) for p in (4, 6, 8, 12)
                for par in (True, False)]
    splits = (True, False) if _planes(node) > 1 else (False,)
    flats = (True, False) if flat_fits(node, spec.vector_bits // 32) else (False,)
    denses = (True, False) if _column_stride(node) > 1 else (False,)
    phases = (True, False) if phase_rows_fit(node, spec.vector_bits // 32) else (False,)
    plans = [(flat, dense, phase) for phase in phases
             for dense in (denses if not phase else (False,)) for flat in flats]
    # a block of rows sums each output row in one chain: the chains are the block's rows
    return [DepthwiseSchedule(acc, par, *plan) for plan in plans for par in splits
            for acc in (1, 2, 3, 4)] + [DepthwiseSchedule(2, par, *plan, rows)
                                        for plan in plans if not any(plan)
                                        for par in splits for rows in (2, 4)]


def inside_range(n: int, k: int, s: int, pad: int, out: int) -> tuple[int, int]:
    """[lo, hi): the outputs along one axis whose k taps all lie inside the n inputs."""
    lo = min(out, -(-pad // s))
    hi = min(out, (n - 1 + pad - (k - 1)) // s + 1)
    return lo, max(lo, hi)


def valid_taps(o: int, n: int, k: int, s: int, pad: int) -> list[int]:
    """The taps of output o (static) that lie inside the n inputs."""
    return [t for t in range(k) if 0 <= o * s + t - pad < n]


@lowering("DepthwiseConv")
def lower_depthwise_conv(node, kb, ins, outs):
    """Inputs: x (N, C, H, W), w (C, 1, KH, KW), bias, residual; attrs: kernel_shape,
    strides, pads_begin, activation (kernels/epilogue.py), channel_shuffle (A: channel c
    reads x's plane (c % A) * (C / A) + c // A, passes/fold_channel_shuffle.py)."""
    x, w, bias, residual = (ins + [None])[:4]
    y = outs[0]
    N, C = x.shape[:2]
    KH, KW = node.attrs["kernel_shape"]
    sched = node.schedule
    kind = "parallel" if sched.parallel else "serial"
    shuffle = node.attrs.get("channel_shuffle")  # passes/fold_channel_shuffle.py
    with kb.loop(N * C, kind=kind, name="plane") as nc:
        c = nc % C
        x_plane = nc if shuffle is None else nc - c + c % shuffle * (C // shuffle) + c // shuffle
        taps = [[kb.local(y.dtype, w.flat(c * (KH * KW) + i * KW + j), "w") for j in range(KW)]
                for i in range(KH)]
        b = kb.local(y.dtype, bias[c], "bias") if bias is not None else None
        plane = _Plane(node, kb, (x, y, residual), (x_plane, nc), taps, b, sched)
        if sched.flat:
            plane.flat()
        else:
            plane.rows()


class _Plane:
    """The code for one (image, channel) plane, row by row."""

    def __init__(self, node, kb, bufs, planes, taps, bias, sched: DepthwiseSchedule):
        """planes: (the plane of x read, the plane of y written), as Exprs."""
        self.node, self.kb, (self.x, self.y, self.residual) = node, kb, bufs
        self.x_plane, self.nc = planes
        self.accumulators, self.row_block = sched.accumulators, sched.row_block
        self.taps, self.bias = taps, bias
        self.act = node.attrs.get("activation")
        (self.sh, self.sw), (self.ph, self.pw) = node.attrs["strides"], node.attrs["pads_begin"]
        self.dense = sched.dense_columns and self.sw > 1
        self.phases = sched.phase_rows and self.sw == 2
        self.span = (0, 0)  # the output rows the code being built serves, first and last
        # vectors narrower than AVX-512's (AVX2, NEON): taps whose vector stays inside the
        # plane as plain loads and blends (_tap, _flat_taps)
        self.blend = kb.lanes(self.y.dtype) * self.y.dtype.itemsize < 64

    def rows(self):
        """Output rows whose window stays inside the input in a loop, the others (top and
        bottom) static with their in-bounds kernel rows only."""
        H, OH, KH = self.x.shape[2], self.y.shape[2], len(self.taps)
        if self.phases:
            self.split_phases()
        lo, hi = inside_range(H, KH, self.sh, self.ph, OH)
        for oh in [*range(lo), *range(hi, OH)]:
            self.span = (oh, oh)
            self.row(as_expr(oh), valid_taps(oh, H, KH, self.sh, self.ph))
        if hi <= lo:
            return
        block = self.row_block if not (self.dense or self.phases) else 1
        rest = lo + (hi - lo) // block * block if block > 1 else lo
        if rest > lo:
            self.span = (lo, rest - block)  # the blocks' first rows
            with self.kb.loop((rest - lo) // block, name="ohb") as b:
                self.row(b * block + lo, list(range(KH)), block)
        if hi > rest:
            self.span = (rest, hi - 1)
            with self.kb.loop(hi, start=rest, name="oh") as oh:
                self.row(oh, list(range(KH)))

    def split_phases(self):
        """The plane's rows into self.scratch as phase rows: element q of input row h's
        phase p holds column 2q + p - pw of the row, zero outside it."""
        H, W = self.x.shape[2:]
        lanes = self.kb.lanes(self.y.dtype)
        self.phase_width = Q = phase_row_width(self.node, lanes)
        self.scratch = self.kb.scratch("phase_rows", self.y.dtype, 2 * H * Q)
        with self.kb.loop(H, name="h") as h:
            row = (self.x_plane * H + h) * W
            for p in range(2):
                for q0 in range(0, Q, lanes):
                    cols = [2 * (q0 + t) + p - self.pw for t in range(lanes)]
                    inside = [t for t, col in enumerate(cols) if 0 <= col < W]
                    value = (self.x.vec(row + cols[0], lanes, inside[-1] + 1, 2, inside[0])
                             if inside else broadcast(as_expr(0.0, self.y.dtype), lanes))
                    self.kb.store_flat(self.scratch, (h * 2 + p) * Q + q0, value,
                                       min(lanes, Q - q0))

    def phase_row(self, oh, rows: list[int]):
        """Output row oh from the phase rows: tap (i, j) of the outputs from column ow is
        the vector at ow + j // 2 of input row oh * sh + i - ph's phase j % 2."""
        OH, OW, KW = self.y.shape[2], self.y.shape[3], len(self.taps[0])
        lanes, Q = self.kb.lanes(self.y.dtype), self.phase_width
        full, rest = divmod(OW, lanes)

        def vector(ow, width):
            loads = [(i, j, self.scratch.vec(((oh * self.sh + i - self.ph) * 2 + j % 2) * Q
                                             + ow + j // 2, lanes))
                     for i in rows for j in range(KW)]
            self.finish(self.sum_taps(loads, lanes), (self.nc * OH + oh) * OW + ow, lanes,
                        width)
        if full:
            with self.kb.loop(full, name="ow") as k:
                vector(k * lanes, lanes)
        if rest:
            vector(as_expr(full * lanes), rest)

    def row(self, oh, rows: list[int], count: int = 1):
        """Output rows oh .. oh + count - 1 (oh an Expr) from the kernel rows `rows` (the
        in-bounds ones: all of them where count > 1), in vectors of columns: the ones wholly
        inside [lo, hi) in a loop, the others (at the edges, or a partial last one) each
        with its taps' in-bounds lanes."""
        if self.phases:
            self.phase_row(oh, rows)
            return
        W, OW, KW = self.x.shape[3], self.y.shape[3], len(self.taps[0])
        lanes = self.kb.lanes(self.y.dtype)
        # dense columns read on to the column before the next output's first tap
        lo, hi = inside_range(W - (self.sw - 1 if self.dense else 0), KW, self.sw, self.pw, OW)
        first, stop = -(-lo // lanes), hi // lanes  # the vectors inside [lo, hi)
        if stop <= first:
            first = stop = -(-OW // lanes)
        for k in [*range(first), *range(stop, -(-OW // lanes))]:
            self.columns(oh, k * lanes, rows, lanes, min(lanes, OW - k * lanes), count)
        if stop > first:
            with self.kb.loop(stop, start=first, name="ow") as k:
                self.columns(oh, k * lanes, rows, lanes, lanes, count)

    def columns(self, oh, ow, rows: list[int], lanes: int, width: int, count: int = 1):
        """The vector of outputs from column ow in `count` rows from oh: a static int at the
        edges, whose taps read only their in-bounds lanes, or an Expr in the loop, where
        every tap is whole."""
        if self.dense:
            self.dense_vector(oh, ow, rows, lanes, width)
            return
        static = isinstance(ow, int)
        columns = [self._lanes_inside(ow, j, width) if static else (0, lanes)
                   for j in range(len(self.taps[0]))]
        if count > 1:
            self.vectors_of_rows(oh, ow, columns, count, lanes, width)
            return
        self.vector(oh, ow, {(i, j): columns[j] for i in rows for j in range(len(columns))},
                    lanes, width)

    def _lanes_inside(self, ow0: int, j: int, width: int) -> tuple[int, int]:
        """[a, b): the lanes of the vector of columns from ow0 whose tap j is inside x."""
        W = self.x.shape[3]
        inside = [t for t in range(width) if 0 <= (ow0 + t) * self.sw + j - self.pw < W]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)

    def flat(self):
        """The plane as one run of vectors: tap (i, j) of output p reads input p + (i - ph)
        * W + (j - pw), in the lanes whose row and column it keeps inside the plane. The
        stores come after all the loads: a load matching an earlier store's address in its
        low 12 bits waits for it, and taps reach back across the plane (MobileNetV3's
        960-channel 7x7 planes, output 256 bytes below the input modulo 4 KB: 92 -> 42 us)."""
        n, lanes = self.x.shape[2] * self.x.shape[3], self.kb.lanes(self.y.dtype)
        values = [self.kb.local(self.y.dtype, self.sum_taps(self._flat_taps(p0, lanes), lanes),
                                "v", lanes) for p0 in range(0, n, lanes)]
        for p0, v in zip(range(0, n, lanes), values):
            self.finish(Get(v), self.nc * n + p0, lanes, min(lanes, n - p0))

    def _flat_taps(self, p0: int, lanes: int) -> list:
        """[(i, j, the vector tap (i, j) reads for outputs p0 ..)] of the taps with a lane
        inside the plane."""
        H, W = self.x.shape[2:]
        n, loads = H * W, []
        for i, row in enumerate(self.taps):
            for j in range(len(row)):
                mask = tuple(p < n and 0 <= p // W + i - self.ph < H
                             and 0 <= p % W + j - self.pw < W for p in range(p0, p0 + lanes))
                if any(mask):
                    shift = p0 + (i - self.ph) * W + (j - self.pw)
                    load = self.x.vec_inside if self._blends(shift, shift, lanes) \
                        else self.x.vec_lanes
                    loads.append((i, j, load(self.x_plane * n + shift, mask)))
        return loads

    def vector(self, oh, ow, taps: dict, lanes: int, width: int):
        """y[n, c, oh, ow .. ow + width - 1] from the taps {(i, j): lanes [a, b) to read},
        through the epilogue."""
        x, y = self.x, self.y
        H, W = x.shape[2:]
        OH, OW = y.shape[2:]
        x_row = (self.x_plane * H + oh * self.sh - self.ph) * W + ow * self.sw - self.pw
        loads = [(i, j, self._tap(x_row + (i * W + j), ow, i, j, lanes, a, b))
                 for (i, j), (a, b) in taps.items() if a < b]
        self.finish(self.sum_taps(loads, lanes), (self.nc * OH + oh) * OW + ow, lanes, width)

    def vectors_of_rows(self, oh, ow, columns: list, count: int, lanes: int, width: int):
        """y[n, c, oh .. oh + count - 1, ow .. ow + width - 1], every kernel row inside x,
        from column j's lanes columns[j] = [a, b): each input row's taps loaded once and
        summed into every output row whose window holds it."""
        x, y, kb = self.x, self.y, self.kb
        H, W = x.shape[2:]
        OH, OW = y.shape[2:]
        KH = len(self.taps)
        x_row = (self.x_plane * H + oh * self.sh - self.ph) * W + ow * self.sw - self.pw
        zero = broadcast(as_expr(0.0, y.dtype), lanes)
        sums = [kb.local(y.dtype, zero, "acc", lanes) for _ in range(count)]
        for r in range((count - 1) * self.sh + KH):
            users = [(q, r - q * self.sh) for q in range(count) if 0 <= r - q * self.sh < KH]
            for j, (a, b) in enumerate(columns):
                if a >= b or not users:
                    continue
                tap = kb.local(y.dtype, self._tap(x_row + (r * W + j), ow, r, j, lanes, a, b),
                               "x", lanes)
                for q, i in users:
                    term = broadcast(Get(self.taps[i][j]), lanes) * Get(tap)
                    kb.set(sums[q], chain_add(Get(sums[q]), term))
        for q, acc in enumerate(sums):
            self.finish(Get(acc), (self.nc * OH + oh + q) * OW + ow, lanes, width)

    def _tap(self, at, ow, i: int, j: int, lanes: int, a: int, b: int):
        """Lanes [a, b) of the vector of tap (i, j) at flat index `at`, the others 0 (i
        counts rows from the window of the first row, past KH in a block of rows). On
        AVX2 a vector whose lanes all lie inside the plane in every row of self.span
        (those past the row's end are the next row's) is a plain load and a blend, where a
        masked load (VMASKMOVPS) costs several. AMD EPYC (LLVM: znver1), 1 thread, masked
        -> blended: 5x5 over 120 channels at 28x28 699 -> 402 us, over 960 at 7x7 525 ->
        261 us, 3x3 over 72 at 56x56 244 -> 184 us. AVX-512's masked loads cost what plain
        ones do."""
        if self.sw != 1 or (a, b) == (0, lanes) or not isinstance(ow, int):
            return self.x.vec(at, lanes, b, self.sw, a)
        W = self.x.shape[3]
        first, last = ((r * self.sh - self.ph + i) * W + ow - self.pw + j for r in self.span)
        if not self._blends(first, last, lanes):
            return self.x.vec(at, lanes, b, self.sw, a)
        return self.x.vec_inside(at, tuple(a <= t < b for t in range(lanes)))

    def _blends(self, first: int, last: int, lanes: int) -> bool:
        """Whether a partial tap is a plain load and a blend: the vectors it reads, from
        plane offsets first .. last, all lie inside the plane, on a target whose masked
        loads cost more than that (self.blend)."""
        return self.blend and first >= 0 and last + lanes <= self.x.shape[2] * self.x.shape[3]

    def dense_vector(self, oh, ow, rows: list[int], lanes: int, width: int):
        """y[n, c, oh, ow .. ow + width - 1] at column stride s as s vectors of taps at every
        column from the first output's, their every s-th lane picked. A static `ow` (an
        edge vector) reads only the columns inside the row, the others are 0; in the loop
        every column is inside."""
        x, y, s = self.x, self.y, self.sw
        H, W = x.shape[2:]
        OH, OW = y.shape[2:]
        col = ow * s - self.pw  # the column of part 0's lane 0 at tap 0
        x_row = (self.x_plane * H + oh * self.sh - self.ph) * W + col
        parts = []
        for p in range(s):
            loads = []
            for i in rows:
                for j in range(len(self.taps[i])):
                    at = x_row + i * W + j + p * lanes
                    if isinstance(ow, int):
                        mask = tuple(0 <= col + j + p * lanes + q < W for q in range(lanes))
                        if any(mask):
                            loads.append((i, j, x.vec_lanes(at, mask)))
                    else:
                        loads.append((i, j, x.vec(at, lanes)))
            parts.append(self.sum_taps(loads, lanes))
        self.finish(pick_lanes(parts, s), (self.nc * OH + oh) * OW + ow, lanes, width)

    def sum_taps(self, loads: list, lanes: int):
        """The sum of weight (i, j) times its vector over `loads` [(i, j, vector)], in the
        schedule's independent chains."""
        sums = [None] * self.accumulators
        for k, (i, j, tap) in enumerate(loads):
            term = broadcast(Get(self.taps[i][j]), lanes) * tap
            acc = sums[k % self.accumulators]
            sums[k % self.accumulators] = term if acc is None else chain_add(acc, term)
        live = [acc for acc in sums if acc is not None]
        return sum(live[1:], live[0]) if live else broadcast(as_expr(0.0, self.y.dtype), lanes)

    def finish(self, value, out, lanes: int, width: int):
        """Bias, residual and activation on `value`, stored to y from flat index `out`."""
        if self.bias is not None:
            value = value + broadcast(Get(self.bias), lanes)
        valid = width if width < lanes else None
        if self.residual is not None:
            value = value + self.residual.vec(out, lanes, valid)
        self.kb.store_flat(self.y, out, apply_activation(self.act, value), valid)
