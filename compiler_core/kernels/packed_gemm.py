"""Y = act(A @ W + bias [+ residual]) with W constant, packed once at compile time.

W (K x N) is stored as panels of `width` = nr * lanes columns, each panel K rows of
`width` contiguous floats (zeros past N), so the register tile (kernels/microkernel.py)
reads one sequential stream of W whatever N is. A is the node's first input seen as an
M x K row-major matrix (leading dims folded into M).

Loop nest (GotoBLAS order, every size a schedule knob):
    parallel over work items = row blocks (mc rows) x panel groups (nc panels)
      k chunks of kc (partial sums wait in Y between chunks; the epilogue runs on the last)
        panels of the group: the kc x width slice of the panel stays in L1
          row tiles of mr: the mr x kc slice of A streams from L2
or, with `rows_outer`, row tiles outside the group's panels: each tile's mr x kc slice of A
stays in L1 while the group's kc x nc panels stream from L2.
The last M % mr rows and a last partial panel get edge tiles of the same nest.
With `strassen` the nest runs seven half-size products (kernels/strassen.py), all of them
in each work item, their tiles adding into the quadrants of Y.

Weights may be stored as float16 or int8 (passes/weight_precision.py). float16 ones the
tile widens in registers. int8 ones come with a scale per packed column (input 4) and are
multiplied as integers: each panel interleaves pairs of rows (panels, K2, width, 2), the
kernel first rounds every row of A to int16 with a scale of its own (outputs 1 and 2, its
scratch), and the tile sums products of pairs in int32 (kernels/microkernel.py), twice
the products per instruction of widening every weight to float. Each k chunk's sums
are scaled back to float, row scale times column scale, and the bias joins in the
epilogue. A's rounding costs a relative 2^-15 of its row's largest value, far below the
weights' own int8 rounding (`activation_levels`).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.loops import INT32, Expr, Get, as_expr, broadcast, call, cast, maximum, minimum, \
    reduce_lanes, select
from .epilogue import apply_activation
from .fma_ports import intel_two_fma_ports, two_wide_fma_ports
from .microkernel import PREFETCH_BYTES, Tile, TileOperands, emit_tile
from .recurrent import L1_BYTES
from . import strassen
from .registry import lowering
from .schedule import default_rule, search_space


ROUND_IN_PARALLEL = 32768  # elements of A (int8 weights) rounded by both threads: >~10 us


@dataclass(frozen=True)
class GemmSchedule:
    mr: int      # rows per register tile
    nr: int      # vectors per register tile row
    lanes: int   # floats per vector (the target's)
    kc: int      # k per chunk
    mc: int      # rows per work item (a multiple of mr)
    nc: int      # panels per work item
    rows_outer: bool = False  # row tiles outside the item's panels (module docstring)
    strassen: bool = False    # seven half-size products (kernels/strassen.py); the knobs above are theirs

    @property
    def width(self) -> int:
        return self.nr * self.lanes


def gemm_dims(node) -> tuple[int, int, int]:
    """(M, N, K) of a PackedGemm node."""
    a, y = node.inputs[0], node.outputs[0]
    return math.prod(a.shape[:-1]), y.shape[-1], a.shape[-1]


def loop_dims(node, schedule: GemmSchedule) -> tuple[int, int, int]:
    """(M, N, K) of the products the loops of `schedule` run: halved for Strassen's."""
    halve = 2 if schedule.strassen else 1
    return tuple(d // halve for d in gemm_dims(node))


# Rows of a register tile two vectors wide: 6 with 16 vector registers, 8 with 32, and 12
# (24 accumulators, as ONNX Runtime's AVX-512 SGEMM kernel has) on Intel's two-FMA cores,
# where each tile row's broadcast of A and the tile's B vectors compete with two FMAs a
# cycle for the load ports, and a taller tile also streams each B panel through fewer row
# tiles of an item. Xeon (LLVM: rocketlake, a Sapphire Rapids-class cloud core), whole
# models 12 rows / 8, interleaved, 1 | 2 threads: BERT-384 0.952 | 0.969 (its FFN GEMMs,
# 384 x 1536 by 384, 3.3 -> 3.2 ms), BERT-128 0.943 | 0.947.
TILE_ROWS_INTEL_TWO_FMA = 12


@default_rule("PackedGemm")
def default_gemm_schedule(node, spec) -> GemmSchedule:
    M, N, K = gemm_dims(node)
    if _strassen_pays(M, N, K) and _strassen_measured(spec):
        return _strassen_schedule(M // 2, N // 2, K // 2, spec)
    return _plain_schedule(M, N, K, spec)


# Work items of Strassen's products, at least, for the threads to share.
STRASSEN_ITEMS = 8
# k chunks of Strassen's products, at most: its row tiles keep their mr x kc slice of A's
# sums in L1 (24 KB at 8 rows). Against the plain rule's 384, 1 thread, same CPU: 128 x 1536
# by 384 1.276 -> 1.240 ms, 384 x 1536 by 384 3.82 -> 3.74; 384 x 384 by 1536 the same.
STRASSEN_KC = 768


def _strassen_schedule(M: int, N: int, K: int, spec) -> GemmSchedule:
    """The plain rule's register tile for the half-size products; each work item a few row
    tiles over a group of panels, row tiles outside the panels, so that a tile sums its rows
    of A's quadrants once for every panel of the group (into L1) while the group's weights
    stream from L2. Against the plain rule's items and order, with A's five sums in one
    sweep before the products (its stores missed the caches), AMD EPYC (LLVM: znver4), 1 |
    2 threads, Strassen/plain product: 128 x 384 by 1536 0.95-0.96 -> 0.89 | 0.96 -> 0.89,
    384 x 1536 by 384 0.96 -> 0.92-0.93 | 0.92 -> 0.92, 384 x 384 by 384 0.93-1.00 ->
    0.90-0.94 | 0.93 -> 0.92; 512 x 1024 by 1024 0.89 | 0.86, 1024 x 1024 by 4096 0.85 |
    0.82, 128 x 4096 by 1024 1.00 | 0.90, 256 x 4096 by 4096 (64 MB of weights) 0.95 | -."""
    s = _plain_schedule(M, N, K, spec)
    tiles_per_item = max(1, (M // s.mr) // STRASSEN_ITEMS)
    kc = math.ceil(K / math.ceil(K / STRASSEN_KC))
    panels = -(-N // s.width)
    fit = max(STRASSEN_MIN_PANELS, _strassen_w_slice(spec) // (kc * s.width * 4))
    groups = -(-panels // min(panels, fit))
    return replace(s, kc=kc, mc=s.mr * tiles_per_item, nc=-(-panels // groups),
                   rows_outer=True, strassen=True)


STRASSEN_MIN_PANELS = 4  # per group, whatever the weights' bytes


def _strassen_w_slice(spec) -> int:
    """Bytes of weights an item of Strassen's streams over a k chunk, at most (its group of
    panels): all of BERT's on Zen 4 (590 KB of a 1 MB L2: a smaller group ran its FFN output
    0.97 against 0.91 of the plain product, AVX2 code on the same core); half of a Zen 2/3
    L2 elsewhere (AVX2 code on Zen 4, groups of 256 KB and 128 KB: 0.89-0.96 and 0.92-0.97
    of the plain product on BERT's shapes, where all panels gave 0.88-0.91)."""
    return 640 * 1024 if _one_wide_fma(spec) else 256 * 1024


# Strassen where its half-size products are still big GEMMs: measured gains on AMD EPYC
# (LLVM: znver4) from 128 x 384 by 384 up (kernels/strassen.py), in its AVX-512 code and in
# its AVX2 code (x86-64-v3: 0.86-0.92 of the plain product on BERT's shapes, 1 and 2
# threads; the FMA rate of a Zen 3 core). On cores of two 512-bit FMAs a cycle it lost:
# Intel Xeon (LLVM: rocketlake), whole models Strassen/plain, 1 | 2 threads, BERT-384
# 1.020 | 1.018, BERT-128 1.17 | 1.24; there (and on Zen 5 and Arm, unmeasured) it is a
# candidate for the tuner, not the default.
STRASSEN_MIN_ROWS = 128
STRASSEN_MIN_SIDE = 384  # K and N


def _one_wide_fma(spec) -> bool:
    """512-bit vectors at one FMA a cycle (Zen 4)."""
    return spec.vector_bits >= 512 and not two_wide_fma_ports(spec)


def _strassen_measured(spec) -> bool:
    return _one_wide_fma(spec) or (spec.arch == "x86_64" and spec.vector_bits == 256)


def _strassen_pays(M: int, N: int, K: int) -> bool:
    return (strassen.fits(M, N, K) and M >= STRASSEN_MIN_ROWS
            and min(N, K) >= STRASSEN_MIN_SIDE)


def plain_gemm_schedule(node, spec) -> GemmSchedule:
    """The default schedule without Strassen."""
    return _plain_schedule(*gemm_dims(node), spec)


def _plain_schedule(M: int, N: int, K: int, spec) -> GemmSchedule:
    lanes = spec.vector_bits // 32
    nr = 2 if N > lanes else 1
    if M < 4:  # few rows, too few accumulators to hide the FMA latency: more vectors per row
        nr = min(4, -(-N // lanes))
    mr = min((spec.vector_registers - nr - 1) // nr, _tile_rows(spec, nr), M)
    if _long_reduction_of_many_rows(spec, M, K, mr):
        return _panel_per_item(M, N, K, mr, nr, lanes)
    kc = K if K <= 512 else math.ceil(K / math.ceil(K / 384))
    panels = -(-N // (nr * lanes))
    # row items of equal height: threads take contiguous runs of items, so one tall item
    # and one short one would leave a thread idle
    tiles = max(1, M // mr)
    mc = mr * -(-tiles // -(-tiles // max(1, 96 // mr)))
    nc = panels if -(-M // mc) >= 4 else max(1, panels // 4)
    return GemmSchedule(mr, nr, lanes, kc, mc, nc)


# AVX2, products of many rows over a long reduction (BERT-384's FFN output, 384 x 1536 by
# 384): k in one chunk, no partial sums through Y, and each work item one panel for every
# row, its K x width slice in L2 for every row tile, where the default's items of 96 rows
# in chunks of 384 each streamed all of W. Only where a tile's slice of A is past half of
# L1: with it in L1, row tiles over groups of panels (rows_outer) ran BERT-384's FFN input
# 1.12-1.17x faster alone, but 0.97x in the model, and its 384 x 384 by 384 products 0.90x.
# AMD EPYC (LLVM: znver3), new/old: one MatMul + bias alone, 1 | 2 threads, 384 x 1536 by
# 384 1.09-1.19 | 1.09, 510 x 1024 by 1024 1.07; in BERT-384 (its 6 FFN outputs, per-kernel
# profiles of both artifacts in turn) 0.87 | 0.90, the model's other kernels 0.97-0.99 |
# 1.00-1.03 in the same profiles; at 128 rows the same was 0.96x alone.
TALL_ROWS = 256
TALL_WHOLE_K = 1536
TALL_MIN_ITEMS = 4  # work items for the threads: rows split where there are fewer panels


def _long_reduction_of_many_rows(spec, M: int, K: int, mr: int) -> bool:
    return (spec.vector_bits == 256 and M >= TALL_ROWS and K <= TALL_WHOLE_K
            and not _a_slice_fits_l1(mr, K))


def _a_slice_fits_l1(mr: int, kc: int) -> bool:
    """Whether a tile's mr x kc slice of A (float32) fits half of L1, beside B's stream."""
    return mr * kc * 4 <= L1_BYTES // 2


def _panel_per_item(M, N, K, mr, nr, lanes) -> GemmSchedule:
    panels = -(-N // (nr * lanes))
    tiles = max(1, M // mr)
    row_items = min(tiles, -(-TALL_MIN_ITEMS // panels))
    return GemmSchedule(mr, nr, lanes, K, mr * -(-tiles // row_items), 1)


def _tile_rows(spec, nr: int) -> int:
    if nr == 2 and intel_two_fma_ports(spec):
        return TILE_ROWS_INTEL_TWO_FMA
    return 6 if spec.vector_registers <= 16 else 8


@search_space("PackedGemm")
def gemm_space(node, spec) -> list[GemmSchedule]:
    """The plain GEMM's knobs, and where the sizes allow, the same knobs for Strassen's
    half-size products."""
    M, N, K = gemm_dims(node)
    out = _plain_space(M, N, K, spec)
    if strassen.fits(M, N, K) and min(M, N, K) >= 2 * spec.vector_bits // 32:
        out += [replace(s, strassen=True) for s in _plain_space(M // 2, N // 2, K // 2, spec)]
    return out


def _plain_space(M: int, N: int, K: int, spec) -> list[GemmSchedule]:
    lanes = spec.vector_bits // 32
    out = []
    for nr in (1, 2, 3, 4):
        top = (spec.vector_registers - nr - 1) // nr
        for mr in sorted({min(top, M), min(max(1, top // 2), M), min(4, M)}):
            panels = -(-N // (nr * lanes))
            for kc in sorted({min(K, 128), min(K, 256), min(K, 384), min(K, 512)}):
                for rows in (4, 8, 16):
                    mc = mr * max(1, min(-(-M // mr), rows))
                    for nc in sorted({panels, max(1, panels // 2), max(1, panels // 4)}):
                        out.append(GemmSchedule(mr, nr, lanes, kc, mc, nc))
                        # tall items of several panels: each tile's A slice stays in L1
                        if rows == 16 and nc > 1 and _a_slice_fits_l1(mr, kc):
                            out.append(GemmSchedule(mr, nr, lanes, kc, mc, nc, True))
    return out


def strassen_layers(graph) -> list[dict]:
    """For meta.json: the dense layers computed by Strassen's seven products."""
    return [{"onnx_node": n.name, "gemm": dict(zip("MNK", gemm_dims(n)))}
            for n in graph.nodes
            if n.op == "PackedGemm" and n.schedule is not None and n.schedule.strassen]


def activation_levels(pairs: int) -> int:
    """The largest int16 an activation is rounded to, for int8 weights: a k chunk's int32
    sum of the products of `pairs` pairs of rows, |q| <= 127 each, must not overflow
    (32767 for chunks of up to 258 pairs, k <= 516)."""
    return min(32767, (2**31 - 1) // (127 * 2 * pairs))


def pair_rows(q: np.ndarray) -> np.ndarray:
    """Packed panels (panels, K, width) -> (panels, ceil(K/2), width, 2): rows 2k and 2k+1
    of each column adjacent (a zero row past an odd K), the int8 tile's layout."""
    panels, K, width = q.shape
    padded = np.zeros((panels, K + K % 2, width), q.dtype)
    padded[:, :K] = q
    return np.ascontiguousarray(padded.reshape(panels, -1, 2, width).transpose(0, 1, 3, 2))


def pack_panels(w: np.ndarray, sched: GemmSchedule) -> np.ndarray:
    """W (K, N) -> (panels, K, width), zero past N."""
    K, N = w.shape
    panels = -(-N // sched.width)
    padded = np.zeros((K, panels * sched.width), w.dtype)
    padded[:, :N] = w
    return np.ascontiguousarray(padded.reshape(K, panels, sched.width).transpose(1, 0, 2))


@lowering("PackedGemm")
def lower_packed_gemm(node, kb, ins, outs):
    _PackedGemm(node, kb, ins, outs).emit()


@dataclass(frozen=True)
class _Write:
    """Where a part's tiles go: Y(row0 + m, col0 + n), added with `sign` to what Y holds
    unless `first`; the bias joins on the first write, residual and activation on the last."""
    row0: int
    col0: int
    sign: int = 1
    first: bool = True
    last: bool = True


@dataclass(frozen=True)
class _Part:
    """One product the kernel computes: the whole GEMM, or one of Strassen's seven."""
    a: object        # Buf: A (or its int16 pairs)
    a_at: int        # flat index of the part's A(0, 0)
    lda: int         # flat distance between its rows
    w_at: int        # flat index of its first panel
    writes: tuple
    # A's operand is a sum: (flat distance of the other quadrant, its sign); each row tile
    # sums its slice into a scratch on the stack before its panels (_fill_sums)
    second: tuple | None = None


class _PackedGemm:
    def __init__(self, node, kb, ins, outs):
        self.kb, self.s = kb, node.schedule
        self.a, self.w, self.bias, self.residual, self.scale = (ins + [None] * 3)[:5]
        self.y = outs[0]
        self.ldy = gemm_dims(node)[1]  # Y's row: N of the whole product
        self.act = node.attrs.get("activation")
        self.tile = Tile(self.s.mr, self.s.nr, self.s.lanes)
        # int8 weights: A as int16 pairs and its row scales; the reduction counts pairs
        self.integer = self.scale is not None
        self.pairs, self.row_scale = (outs[1], outs[2]) if self.integer else (None, None)
        self.M, self.N, self.K = loop_dims(node, self.s)
        self.panels = -(-self.N // self.s.width)
        self.k_steps = -(-self.K // 2) if self.integer else self.K
        self.kc = -(-self.s.kc // 2) if self.integer else self.s.kc
        self.chunks = -(-self.k_steps // self.kc)
        self.parts = self._strassen_parts() if self.s.strassen else [self._whole()]
        self.sums = kb.scratch("a_sums", self.a.dtype, self.s.mr * self.s.kc) \
            if self.s.strassen else None

    def _whole(self) -> _Part:
        return _Part(self.pairs if self.integer else self.a, 0, self.k_steps, 0, (_Write(0, 0),))

    def _strassen_parts(self) -> list[_Part]:
        M, N, K = self.M, self.N, self.K
        per_part = self.panels * K * self.s.width
        parts = []
        for i, p in enumerate(strassen.PRODUCTS):
            writes = tuple(_Write(w.quadrant[0] * M, w.quadrant[1] * N, w.sign, w.first, w.last)
                           for w in strassen.writes(i))
            (_, q0), *rest = p.a
            second = None
            if rest:  # a sum of two quadrants
                sign, q1 = rest[0]
                second = (self._quadrant_at(q1) - self._quadrant_at(q0), sign)
            parts.append(_Part(self.a, self._quadrant_at(q0), 2 * K, i * per_part, writes,
                               second))
        return parts

    def emit(self):
        if self.integer:
            self._round_rows()
        self._emit_items()

    def _emit_items(self):
        """One parallel loop over work items (and one over the edge rows' panel groups);
        an item runs every part over its rows and panels: Strassen's seven products of one
        item touch the same places of each quadrant, so items never share a quadrant's
        tile, and one parallel region does all seven (a region per product made the
        kernel wait for a preempted thread seven times: BERT-128 at 2 threads beside a
        busy loop 1.27x slower than the plain product, AMD EPYC, LLVM: znver4)."""
        s, kb = self.s, self.kb
        full_tiles = self.M // s.mr
        tiles_per_item = s.mc // s.mr
        row_items = -(-full_tiles // tiles_per_item) if full_tiles else 0
        panel_items = -(-self.panels // s.nc)
        if row_items:
            with kb.loop(row_items * panel_items, kind="parallel", name="item") as item:
                rb, pg = item // panel_items, item % panel_items
                t0 = rb * tiles_per_item
                t1 = minimum(t0 + tiles_per_item, as_expr(full_tiles))
                for part in self.parts:
                    self._item(part, pg, lambda body: self._rows(t0, t1, body), s.mr)
        if self.M % s.mr:
            edge = as_expr(full_tiles)
            with kb.loop(panel_items, kind="parallel", name="pg") as pg:
                for part in self.parts:
                    self._item(part, pg, lambda body: body(edge), self.M % s.mr)

    def _quadrant_at(self, q) -> int:
        """Flat index of A's quadrant q (row half, column half) in A."""
        return q[0] * self.M * 2 * self.K + q[1] * self.K

    def _fill_sums(self, part, t, mr, k_range):
        """Row tile t's rows of a sum of A's quadrants over the chunk, into the scratch
        (mr x kc, in L1) its tiles read over the item's panels."""
        kb, a, (k0, k1) = self.kb, self.a, k_range
        distance, sign = part.second
        for i in range(mr):
            row = part.a_at + (t * self.s.mr + i) * part.lda
            with kb.loop(k1, start=k0, name="k") as k:
                x, y = a.flat(row + k), a.flat(row + distance + k)
                kb.store_flat(self.sums, i * self.s.kc + k - k0, x + y if sign > 0 else x - y)

    def _round_rows(self):
        """Each row of A to int16 pairs: q = round(a / s) with s = max |a| / levels (s = 1
        for an all-zero row), two per int32 word, the lower half first."""
        kb, a, K, lanes = self.kb, self.a, self.K, self.s.lanes
        levels = activation_levels(self.kc)
        # many rows are worth their own parallel region (a fork/join, ~1 us)
        kind = "parallel" if self.M > 1 and self.M * K >= ROUND_IN_PARALLEL else "serial"
        with kb.loop(self.M, kind=kind, name="m") as m:
            row = m * K
            amax = kb.local(a.dtype, 0.0, "amax", lanes)
            with kb.loop(K // lanes, name="v") as v:
                kb.set(amax, maximum(Get(amax), call("abs", a.vec(row + v * lanes, lanes))))
            largest = kb.local(a.dtype, reduce_lanes("max", Get(amax)), "largest")
            for k in range(K // lanes * lanes, K):
                kb.set(largest, maximum(Get(largest), call("abs", a.flat(row + k))))
            # an all-zero row gets scale 1; a NaN in the row makes its scale, and so its
            # outputs, NaN, as a float product would
            scale = kb.local(a.dtype, select(Get(largest).eq(0.0), as_expr(1.0, a.dtype),
                                             Get(largest) / float(levels)), "scale")
            kb.store(self.row_scale, m, Get(scale))
            inverse = kb.local(a.dtype, 1.0 / Get(scale), "inverse")

            def level(k):
                return cast(call("roundeven", a.flat(row + k) * Get(inverse)), INT32)
            with kb.loop(K // 2, name="k") as k:
                self._store_pair(m, k, level(2 * k), level(2 * k + 1))
            if K % 2:
                self._store_pair(m, K // 2, level(K - 1), as_expr(0, INT32))

    def _store_pair(self, m, k, low, high):
        # high * 65536 cannot overflow: |high| <= 32767
        word = high * as_expr(65536, INT32) + (low & as_expr(0xFFFF, INT32))
        self.kb.store(self.pairs, m * self.k_steps + k, word)

    def _rows(self, t0, t1, body):
        with self.kb.loop(t1, start=t0, name="t") as t:
            body(t)

    def _item(self, part, pg, over_rows, mr):
        """Every k chunk of one work item; chunks write partial sums, the last finishes."""
        for phase, c_range in self._chunk_phases():
            with _maybe_loop(self.kb, c_range) as c:
                k_range = (c * self.kc, minimum(c * self.kc + self.kc, as_expr(self.k_steps)))
                self._panels(part, pg, over_rows, mr, k_range, phase)

    def _chunk_phases(self):
        """(phase, chunk range): the first chunk starts from zero (or the bias), the last
        applies the epilogue; a single chunk does both."""
        n = self.chunks
        if n == 1:
            return [("only", (0, 1))]
        phases = [("first", (0, 1))]
        if n > 2:
            phases.append(("mid", (1, n - 1)))
        return phases + [("last", (n - 1, n))]

    def _panels(self, part, pg, over_rows, mr, k_range, phase):
        s, kb = self.s, self.kb
        first = pg * s.nc
        full = self.N // s.width
        stop = minimum(first + s.nc, as_expr(full))
        cols = self.N % s.width
        partial_group = (first + s.nc) > full  # the group that holds the partial panel

        def tile(t, p, nr, cols_in_panel):
            self._tile(part, t, p, mr, nr, cols_in_panel, k_range, phase)

        def partial(t):
            tile(t, as_expr(full), -(-cols // s.lanes), cols)
        if s.rows_outer or part.second:
            def tile_over_group(t):  # its slice of A stays in L1 over the group's panels
                if part.second:
                    self._fill_sums(part, t, mr, k_range)
                with kb.loop(stop, start=first, name="p") as p:
                    tile(t, p, s.nr, s.width)
                if cols:
                    with kb.if_(partial_group):
                        partial(t)
            over_rows(tile_over_group)
            return
        with kb.loop(stop, start=first, name="p") as p:
            over_rows(lambda t: tile(t, p, s.nr, s.width))
        if cols:
            with kb.if_(partial_group):
                over_rows(partial)

    def _tile(self, part, t, p, mr, nr, cols, k_range, phase):
        """One register tile at row tile t, panel p; the panel has `cols` real columns."""
        s, K = self.s, self.k_steps
        row0 = t * s.mr
        # a reduction step reads one weight per column, or a pair of them
        per_step = s.width * (2 if self.integer else 1)
        if part.second:  # the tile's rows of the sum, filled for this chunk
            a, a_at, lda = self.sums, (lambda ks: ks[0] - k_range[0]), s.kc
        else:
            a, a_at, lda = part.a, (lambda ks: part.a_at + row0 * part.lda + ks[0]), part.lda
        ops = TileOperands(a, a_at, tuple(i * lda for i in range(s.mr)),
                           self.w, lambda ks: part.w_at + (p * K + ks[0]) * per_step,
                           PREFETCH_BYTES // self.w.dtype.itemsize)
        col0 = p * s.width
        # one write adding into Y starts from it; several start from zero and add to each
        # (int8 tiles sum integers of one chunk: they never start from Y)
        alone = len(part.writes) == 1 and part.writes[0].sign > 0 and not self.integer
        into = part.writes[0] if alone else None

        def valid(j):
            return min(s.lanes, cols - j * s.lanes)

        def finish(i, j, v):
            for w in part.writes:
                self._store(w, w is into, phase, row0 + i, col0 + j * s.lanes, valid(j), v)
        emit_tile(self.kb, self.tile, [k_range], ops,
                  lambda i, j: self._initial(into, phase, row0 + i, col0 + j * s.lanes,
                                             valid(j)),
                  finish, mr=mr, nr=nr, pairs=self.integer)

    def _at(self, w: _Write, m, n):
        return (w.row0 + m) * self.ldy + w.col0 + n

    def _initial(self, into, phase, m, n, valid) -> Expr:
        if self.integer:
            return as_expr(0, INT32)
        if into is None:
            return as_expr(0.0, self.y.dtype)
        if _holds(into, phase):
            return self.y.vec(self._at(into, m, n), self.s.lanes, valid)
        if self.bias is not None:
            return self.bias.vec(into.col0 + n, self.s.lanes)  # padded to whole panels
        return as_expr(0.0, self.y.dtype)

    def _store(self, w: _Write, started, phase, m, n, valid, value):
        """Y += sign * the tile's vector (or the vector itself where the tile started from Y
        or the bias), finished on the part's last write to Y."""
        lanes, at = self.s.lanes, self._at(w, m, n)
        if self.integer:  # int8 weights: y = row scale * column scale * (qa . qw)
            scale = broadcast(self.row_scale.flat(m), lanes) * self.scale.vec(n, lanes)
            value = cast(value, self.y.dtype) * scale
        if not started:
            if _holds(w, phase):
                held = self.y.vec(at, lanes, valid)
                value = held + value if w.sign > 0 else held - value
            else:
                if w.sign < 0:
                    value = as_expr(0.0, self.y.dtype) - value
                if self.bias is not None:
                    value = value + self.bias.vec(w.col0 + n, lanes)
        if w.last and phase in ("last", "only"):
            if self.residual is not None:
                value = value + self.residual.vec(at, lanes, valid)
            value = apply_activation(self.act, value)
        self.kb.store_flat(self.y, at, value, valid)


def _holds(w: _Write, phase: str) -> bool:
    """Whether Y already holds partial sums of this write's quadrant."""
    return not (w.first and phase in ("first", "only"))


@contextlib.contextmanager
def _maybe_loop(kb, bounds):
    """A loop over [start, stop), or just the constant start when it has one iteration."""
    start, stop = bounds
    if stop - start == 1:
        yield as_expr(start)
        return
    with kb.loop(stop, start=start, name="kc") as c:
        yield c
