"""LSTM, GRU and RNN: the whole time loop in one kernel.

Per direction the kernel does two things:

1. Input projection for all time steps at once, before the recurrence (it does not depend
   on the state): `proj[t, b, g] = bias[g] + sum_i x[t, b, i] * WT[i, g]`. The loop over i
   is outermost, four rows of WT at a time, so those rows stay in L1 while they are applied
   to every time step (two steps per pass share each weight load): a matrix product rather
   than T matrix-vector products that would stream all of W from L2 at every step.
2. The recurrence: per step, the hidden-state product is added into the step's proj row
   (`row[g] += h[i] * RT[i, g]`, two batch entries sharing each weight load), then the
   gates are applied elementwise. When R is larger than L1, every other step reads it
   backwards, so that most of it is still in L1 from the step before (Cell.alternate).

The two directions of a bidirectional node are the two items of a parallel loop (each
with its own scratch): at 2 threads each core runs one direction with its weights.

Both products run over contiguous gates in the row and in the weights, which the converter
transposed to [dirs, in, gates*H]; LLVM turns the inner loops into vector FMAs. The hidden
and cell states live directly in the Y_h / Y_c outputs.

W and R may be stored as float16 or int8 (passes/weight_precision.py): loads are widened
to float32 in registers; int8 ones come with a scale per gate unit (inputs 8 and 9). The
sweeps then add unscaled products to a row that was divided by the scales beforehand and is
multiplied by them afterwards: two passes over the row instead of a multiply per sweep.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..ir.loops import (INDEX, Buf, Const, Get, as_expr, broadcast, cast, chain_add, maximum,
                        minimum)
from .elementwise import SCALAR
from .fastmath import math_call
from .registry import lowering

ROWS_PER_SWEEP = 4  # weight rows applied per pass over a gate row: a quarter of its loads/stores
ROWS_SHARING_WEIGHTS = 2  # gate rows (time steps, batch entries) per pass over weight rows
# a direction's products worth a thread of their own: a fork and join costs a few us, a
# direction of this size ~5 us at 1 thread
PARALLEL_DIRECTION_FLOPS = 200_000
# accumulator vectors per register tile of the recurrent product, split among the rows
# sharing the weights: an FMA's latency times the two FMA ports is 8 independent chains on
# znver3, and 12 leave room (of AVX2's 16 registers) for the broadcast and a weight
TILE_ACCUMULATORS = 12
# the L1 data cache of the cores we target (Zen 3 and 4; 48 KB on recent Intel cores)
L1_BYTES = 32 * 1024


# ---------------------------------------------------------------- activations

def activation(name: str, alpha, beta):
    """Scalar function for one entry of the `activations` attribute."""
    if name == "affine":
        return lambda e: e * as_expr(alpha, e.dtype) + as_expr(beta, e.dtype)
    if name == "scaledtanh":
        return lambda e: as_expr(alpha, e.dtype) * math_call("tanh", e * as_expr(beta, e.dtype))
    onnx_name = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softsign": "Softsign",
                 "softplus": "Softplus", "leakyrelu": "LeakyRelu", "elu": "Elu",
                 "thresholdedrelu": "ThresholdedRelu", "hardsigmoid": "HardSigmoid"}[name]
    attrs = {"alpha": alpha, "beta": beta}
    return lambda e: SCALAR[onnx_name](attrs, e)


# ---------------------------------------------------------------- shared structure

@dataclass
class Cell:
    """The buffers of one recurrent node and their index maps (layout 0 or 1)."""
    kb: object
    x: Buf
    wt: Buf          # [dirs, input, gates*H]
    rt: Buf          # [dirs, H, gates*H]
    bias: Buf | None
    lens: Buf | None
    y: Buf
    h: Buf           # Y_h, also the running hidden state
    proj: Buf        # scratch [seq * batch * gates*H]: input projections, one row per step
    row: Buf | None  # scratch [batch * 4H]: hidden-state products kept apart (GRU only)
    hidden: int
    layout: int
    clip: float | None
    scales: dict = field(default_factory=dict)  # id(wt or rt) -> int8 scales [dirs, gates*H]
    direction: int = 0  # which direction's part of proj and row this view uses

    def of_direction(self, d: int) -> "Cell":
        """The same cell seeing direction d's part of the scratch: every direction has its
        own projections and rows, so the directions can run on different threads."""
        return dataclasses.replace(self, direction=d)

    @property
    def seq(self) -> int:
        return self.x.shape[0] if self.layout == 0 else self.x.shape[1]

    @property
    def batch(self) -> int:
        return self.x.shape[1] if self.layout == 0 else self.x.shape[0]

    @property
    def width(self) -> int:
        """gates * H: the length of one projection row."""
        return self.wt.shape[2]

    def x_at(self, t, b, i):
        return self.x[(t, b, i) if self.layout == 0 else (b, t, i)]

    def y_index(self, t, d, b, j):
        return (t, d, b, j) if self.layout == 0 else (b, t, d, j)

    def state_index(self, d, b, j):
        return (d, b, j) if self.layout == 0 else (b, d, j)

    def state(self, d, b):
        return lambda j: self.h[self.state_index(d, b, j)]

    def proj_start(self, t, b):
        return ((self.direction * self.seq + t) * self.batch + b) * self.width

    def row_start(self, b):
        """GRU's row of batch entry b (4H: the hidden parts of z, r, h, then r or r * h)."""
        return (self.direction * self.batch + b) * 4 * self.hidden

    def alternate(self, pairs):
        """The recurrent product's `reverse` (tile_rows) at the step of these (b, t) pairs:
        1 on every other step when a direction's R is larger than L1, else None (running
        backwards costs ~2% when R stays in L1 anyway)."""
        _, rows, width = self.rt.shape
        if rows * width * self.rt.dtype.itemsize <= L1_BYTES:
            return None
        return pairs[0][1] % 2

    def direction_flops(self) -> int:
        """Multiply-adds of one direction's products, times two."""
        return 2 * self.seq * self.batch * (self.wt.shape[1] + self.rt.shape[1]) * self.width

    def clipped(self, e):
        if self.clip is None:
            return e
        return minimum(maximum(e, as_expr(-self.clip, e.dtype)), as_expr(self.clip, e.dtype))

    def bias_sum(self, d, gate, offsets):
        """Sum of the bias entries at `gate + offset` for each offset (W bias, R bias)."""
        if self.bias is None:
            return as_expr(0, self.proj.dtype)
        total = self.bias[d, gate + offsets[0]]
        for off in offsets[1:]:
            total = total + self.bias[d, gate + off]
        return total

    # -- products: out[start + g] (+)= sum_i vec(i) * weights[d, i, col + g], g < n
    def init_row(self, out: Buf, start, n, bias_of):
        with self.kb.loop(n) as g:
            self.kb.store(out, start + g, bias_of(g))

    def accumulate(self, out: Buf, starts, n, weights: Buf, d, col, vec_ats, length, reverse):
        """For each (start, vec_at): out[start + g] += sum_i vec(i) * weights[d, i, col + g].
        `reverse` (0 or 1 at run time, see tile_rows) runs the register tiles' i backwards."""
        scale = self.scales.get(id(weights))
        for start in starts if scale is not None else []:
            self.rescale(out, start, n, lambda g: scale[d, col + g], divide=True)
        lanes = self.kb.lanes(out.dtype)
        tiled = n // lanes * lanes
        if tiled:
            self.tile_rows(out, starts, tiled, weights, d, col, vec_ats, length, reverse)
        if n > tiled:  # the last n % lanes columns, in sweeps
            in_sweeps(self.kb, length, lambda first, count: self.sweep_rows(
                out, [start + tiled for start in starts], n - tiled, weights, d, col + tiled,
                vec_ats, first, count))
        for start in starts if scale is not None else []:
            self.rescale(out, start, n, lambda g: scale[d, col + g], divide=False)

    def rescale(self, out: Buf, start, n, scale_of, divide: bool):
        with self.kb.loop(n) as g:
            value, scale = out.flat(start + g), scale_of(g)
            self.kb.store(out, start + g, value / scale if divide else value * scale)

    def tile_rows(self, out, starts, n, weights, d, col, vec_ats, length, reverse):
        """For each (start, vec_at): out[start + g] += sum_i vec(i) * W[d, i, col + g], for
        g < n (whole vectors), in register tiles of up to TILE_ACCUMULATORS vectors: the
        partial sums stay in registers for the whole reduction over i, so each weight is one
        vector load and one FMA per row sharing it (the sweeps also load and store the
        output row every ROWS_PER_SWEEP weight rows). A tile with few vectors splits the
        reduction into interleaved chains (even and odd i, ...) so that the FMAs do not
        wait for each other. This is the recurrence's per-step product, on its critical
        path.

        A recurrence reads the same weights at every step, and a layer's R is often a bit
        larger than L1 (LSTM 48: 36 KB): read in the same order each step, the lines needed
        next are always the ones just evicted, and all of R comes from L2. With `reverse`
        set on every other step, i runs backwards then, so a step starts on the rows the
        previous one ended on, still in L1."""
        kb, dtype = self.kb, out.dtype
        row_of = lambda i: i
        if reverse is not None:  # i or length - 1 - i, affine in i: pointers still step
            first = kb.local(INDEX, reverse * (length - 1), "first_row")
            step = kb.local(INDEX, 1 - 2 * reverse, "row_step")
            row_of = lambda i: Get(first) + Get(step) * i
        lanes = kb.lanes(dtype)
        per_row = max(1, TILE_ACCUMULATORS // len(starts))
        for v0 in range(0, n // lanes, per_row):
            offsets = [(v0 + j) * lanes for j in range(min(per_row, n // lanes - v0))]
            chains = max(1, min(length, per_row // len(offsets)))
            acc = [[[kb.local(dtype, out.vec(start + off, lanes) if c == 0 else 0.0, "acc", lanes)
                     for off in offsets] for start in starts] for c in range(chains)]
            whole = length // chains
            with kb.loop(whole, kind="scalar", name="i") as i:
                for c in range(chains):
                    self._tile_step(acc[c], weights, d, col, offsets, vec_ats,
                                    row_of(i * chains + c))
            with kb.loop(length, start=whole * chains, kind="scalar", name="i") as i:
                self._tile_step(acc[0], weights, d, col, offsets, vec_ats, row_of(i))
            for r, start in enumerate(starts):
                for j, off in enumerate(offsets):
                    total = Get(acc[0][r][j])
                    for c in range(1, chains):  # the chains stay chains (loops.chain_add)
                        total = chain_add(total, Get(acc[c][r][j]))
                    kb.store_flat(out, start + off, total)

    def _tile_step(self, acc, weights, d, col, offsets, vec_ats, i):
        """acc[row][j] += vec_row(i) * W[d, i, col + offsets[j] : + lanes]."""
        kb = self.kb
        dtype, lanes = acc[0][0].dtype, acc[0][0].lanes
        _, rows, width = weights.shape
        at = kb.local(INDEX, (d * rows + i) * width + col, "w_at")
        w = [kb.local(dtype, cast(weights.vec(Get(at) + off, lanes), dtype), "w", lanes)
             for off in offsets]
        for row_acc, vec_at in zip(acc, vec_ats):
            v = broadcast(vec_at(i), lanes)
            for a, wj in zip(row_acc, w):
                kb.set(a, chain_add(Get(a), v * Get(wj)))

    def sweep_rows(self, out, starts, n, weights, d, col, vec_ats, first, count):
        """For each (start, vec_at) pair: out[start + g] += sum_u vec(first + u) * W[first + u, g].
        Several output rows share each weight load."""
        kb = self.kb
        vs = [[kb.local(out.dtype, vec_at(first + u), "v") for u in range(count)]
              for vec_at in vec_ats]
        with kb.loop(n) as g:
            w = [cast(weights[d, first + u, col + g], out.dtype) for u in range(count)]
            for start, row_vs in zip(starts, vs):
                total = out.flat(start + g)
                for v, wu in zip(row_vs, w):
                    total = total + kb.get(v) * wu
                kb.store(out, start + g, total)

    def project_inputs(self, d, bias_of):
        """proj[t, b, :] = bias + x[t, b, :] @ WT[d] for every step, weight rows outermost
        and ROWS_SHARING_WEIGHTS steps sharing each weight load."""
        kb = self.kb
        scale = self.scales.get(id(self.wt))
        if scale is not None:  # int8: proj = scale * (bias / scale + x @ Q)
            bias_of = (lambda g, unscaled=bias_of: unscaled(g) / scale[d, g])
        with kb.loop(self.seq) as t, kb.loop(self.batch) as b:
            self.init_row(self.proj, self.proj_start(t, b), self.width, bias_of)
        in_sweeps(kb, self.wt.shape[1], lambda first, count: self._project_rows(d, first, count))
        if scale is not None:
            with kb.loop(self.seq) as t, kb.loop(self.batch) as b:
                self.rescale(self.proj, self.proj_start(t, b), self.width,
                             lambda g: scale[d, g], divide=False)

    def _project_rows(self, d, first, count):
        steps = self.seq * self.batch   # (t, b) pairs, numbered r = t * batch + b
        whole = steps // ROWS_SHARING_WEIGHTS * ROWS_SHARING_WEIGHTS

        def rows(r0, n_rows):
            rs = [r0 + k for k in range(n_rows)]
            # r numbers the (t, b) pairs, so proj_start(0, r) is row (t, b)
            self.sweep_rows(self.proj, [self.proj_start(0, r) for r in rs], self.width,
                            self.wt, d, 0,
                            [self._x_row(r) for r in rs], first, count)

        with self.kb.loop(whole // ROWS_SHARING_WEIGHTS) as block:
            rows(block * ROWS_SHARING_WEIGHTS, ROWS_SHARING_WEIGHTS)
        with self.kb.loop(steps, start=whole) as r:
            rows(r, 1)

    def _x_row(self, r):
        t, b = r // self.batch, r % self.batch
        return lambda i: self.x_at(t, b, i)


def in_sweeps(kb, length, body):
    """body(first, count) over [0, length): ROWS_PER_SWEEP rows at a time, then the rest."""
    whole = length // ROWS_PER_SWEEP * ROWS_PER_SWEEP
    with kb.loop(whole // ROWS_PER_SWEEP) as block:
        body(block * ROWS_PER_SWEEP, ROWS_PER_SWEEP)
    with kb.loop(length, start=whole) as i:
        body(i, 1)


def _make_cell(node, kb, ins, outs) -> Cell:
    """outs: Y, Y_h, (Y_c,) proj, (row, GRU only)."""
    x, wt, rt, bias, lens = ins[:5]
    scratch = outs[3 if node.op == "LSTM" else 2:]
    scales = {id(wt): ins[8], id(rt): ins[9]} if len(ins) > 8 else {}
    return Cell(kb, x, wt, rt, bias, lens, outs[0], outs[1], scratch[0],
                scratch[1] if len(scratch) > 1 else None,
                node.attrs["hidden_size"], node.attrs["layout"], node.attrs["clip"], scales)


def _init_state(cell: Cell, state: Buf, initial: Buf | None, d):
    kb = cell.kb
    with kb.loop(cell.batch) as b, kb.loop(cell.hidden) as j:
        idx = cell.state_index(d, b, j)
        kb.store(state, idx, initial[idx] if initial is not None else as_expr(0, state.dtype))


def per_direction(cell: Cell, directions, body):
    """body(cell viewing direction d, d, direction) for each direction. Two directions
    are independent until the end: a parallel loop of two items gives each its own
    thread, always the same one, so each core keeps its direction's weights in its own
    L2 call after call (one thread runs them one after the other, as before)."""
    if len(directions) == 1:
        body(cell.of_direction(0), 0, directions[0])
        return
    kind = "parallel" if cell.direction_flops() >= PARALLEL_DIRECTION_FLOPS else "serial"
    with cell.kb.loop(2, kind=kind, name="direction") as item:
        with cell.kb.if_(item.eq(0)) as branch:
            body(cell.of_direction(0), 0, directions[0])
        with cell.kb.else_(branch):
            body(cell.of_direction(1), 1, directions[1])


def _time_loop(cell: Cell, d, direction, prepare, update):
    """Per time step, batch entries go in groups of ROWS_SHARING_WEIGHTS: prepare(pairs)
    builds the gate pre-activations of the group's (b, t) pairs, sharing every recurrent
    weight load, then update(b, t) applies the cell to each entry still in its sequence."""
    kb = cell.kb
    whole = cell.batch // ROWS_SHARING_WEIGHTS * ROWS_SHARING_WEIGHTS
    with kb.loop(cell.seq) as s:
        with kb.loop(whole // ROWS_SHARING_WEIGHTS) as group:
            entries = [group * ROWS_SHARING_WEIGHTS + k for k in range(ROWS_SHARING_WEIGHTS)]
            _step(cell, d, direction, s, entries, prepare, update)
        with kb.loop(cell.batch, start=whole) as b:
            _step(cell, d, direction, s, [b], prepare, update)


def _step(cell: Cell, d, direction, s, entries, prepare, update):
    kb = cell.kb
    if cell.lens is None:
        t = s if direction == "forward" else Const(cell.seq - 1) - s
        prepare([(b, t) for b in entries])
        for b in entries:
            update(b, t)
        return
    lengths = [kb.local(INDEX, minimum(maximum(cast(cell.lens[b], INDEX), Const(0)),
                                       Const(cell.seq)), "length") for b in entries]
    # An entry past its end still goes through prepare, on a row its sequence no longer
    # needs (a later step forward, row 0 backward); its state is left alone.
    times = [s if direction == "forward" else maximum(kb.get(n) - 1 - s, Const(0))
             for n in lengths]
    prepare(list(zip(entries, times)))
    for b, t, n in zip(entries, times, lengths):
        with kb.if_(s < kb.get(n)) as branch:
            update(b, t)
        with kb.else_(branch), kb.loop(cell.hidden) as j:
            # steps past a sequence's end produce zeros
            kb.store(cell.y, cell.y_index(s, d, b, j), as_expr(0, cell.y.dtype))


# ---------------------------------------------------------------- LSTM

@lowering("LSTM")
def lower_lstm(node, kb, ins, outs):
    cell = _make_cell(node, kb, ins, outs)
    initial_h, initial_c, peep = ins[5], ins[6], ins[7]
    c, H = outs[2], cell.hidden

    def direction_body(cell, d, direction):
        f, g, h = (activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, initial_h, d)
        _init_state(cell, c, initial_c, d)
        cell.project_inputs(d, lambda k: cell.bias_sum(d, k, (0, 4 * H)))

        def prepare(pairs):
            cell.accumulate(cell.proj, [cell.proj_start(t, b) for b, t in pairs], 4 * H,
                            cell.rt, d, 0, [cell.state(d, b) for b, _ in pairs], H,
                            cell.alternate(pairs))

        def update(b, t):
            with kb.loop(H) as j:
                _lstm_update(node, cell, c, peep, d, b, t, j, cell.proj_start(t, b), (f, g, h))

        _time_loop(cell, d, direction, prepare, update)

    per_direction(cell, node.attrs["directions"], direction_body)


def _lstm_update(node, cell, c, peep, d, b, t, j, start, funcs):
    """Gate order in the row: input, output, forget, cell (ONNX's iofc)."""
    kb, H, row = cell.kb, cell.hidden, cell.proj
    f, g, h = funcs
    c_prev = kb.local(c.dtype, c[cell.state_index(d, b, j)], "c_prev")

    def pre_activation(k, c_value):
        value = row.flat(start + k * H + j)
        return value + peep[d, k * H + j] * c_value if peep is not None else value

    i_gate = kb.local(row.dtype, f(cell.clipped(pre_activation(0, kb.get(c_prev)))), "i")
    if node.attrs["input_forget"]:
        f_gate = as_expr(1, row.dtype) - kb.get(i_gate)
    else:
        f_gate = f(cell.clipped(pre_activation(2, kb.get(c_prev))))
    candidate = g(cell.clipped(row.flat(start + 3 * H + j)))
    c_new = kb.local(c.dtype, f_gate * kb.get(c_prev) + kb.get(i_gate) * candidate, "c_new")
    o_gate = f(cell.clipped(pre_activation(1, kb.get(c_new))))
    h_new = kb.local(row.dtype, o_gate * h(kb.get(c_new)), "h_new")
    kb.store(c, cell.state_index(d, b, j), kb.get(c_new))
    kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
    kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))


# ---------------------------------------------------------------- GRU

@lowering("GRU")
def lower_gru(node, kb, ins, outs):
    """proj holds the input part of z, r, h (with W's bias). The hidden part goes to a row
    of 4H per batch entry: [0, 3H) for z, r, h (with R's bias), then [3H, 4H) for
    r * h_prev, or r alone when linear_before_reset, where r scales the hidden part of h."""
    cell = _make_cell(node, kb, ins, outs)
    H, lbr = cell.hidden, node.attrs["linear_before_reset"]

    def direction_body(cell, d, direction):
        f, g = (activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, ins[5], d)
        cell.project_inputs(d, lambda k: cell.bias_sum(d, k, (0,)))

        def prepare(pairs):
            _gru_hidden_parts(cell, d, pairs, f, lbr)

        def update(b, t):
            with kb.loop(H) as j:
                _gru_update(cell, d, b, t, j, (f, g), lbr)

        _time_loop(cell, d, direction, prepare, update)

    per_direction(cell, node.attrs["directions"], direction_body)


def _gru_hidden_parts(cell, d, pairs, f, lbr):
    kb, H, row = cell.kb, cell.hidden, cell.row
    starts = [cell.row_start(b) for b, _ in pairs]
    states = [cell.state(d, b) for b, _ in pairs]
    hidden_rows = 3 * H if lbr else 2 * H
    for start in starts:
        cell.init_row(row, start, hidden_rows, lambda k: cell.bias_sum(d, k, (3 * H,)))
    cell.accumulate(row, starts, hidden_rows, cell.rt, d, 0, states, H, cell.alternate(pairs))
    for (b, t), start, state in zip(pairs, starts, states):
        with kb.loop(H) as j:
            r = f(cell.clipped(cell.proj.flat(cell.proj_start(t, b) + H + j)
                               + row.flat(start + H + j)))
            kb.store(row, start + 3 * H + j, r if lbr else r * state(j))
    if not lbr:  # h's hidden part multiplies r * h_prev, so it waits for r
        for start in starts:
            cell.init_row(row, start + 2 * H, H,
                          lambda k: cell.bias_sum(d, 2 * H + k, (3 * H,)))
        cell.accumulate(row, [start + 2 * H for start in starts], H, cell.rt, d, 2 * H,
                        [lambda i, st=start: row.flat(st + 3 * H + i) for start in starts], H,
                        cell.alternate(pairs))


def _gru_update(cell, d, b, t, j, funcs, lbr):
    kb, H, row, proj = cell.kb, cell.hidden, cell.row, cell.proj
    f, g = funcs
    start, row_start = cell.proj_start(t, b), cell.row_start(b)
    hidden = lambda k: row.flat(row_start + k * H + j)  # gate k's hidden part
    z = kb.local(row.dtype, f(cell.clipped(proj.flat(start + j) + hidden(0))), "z")
    hidden_part = hidden(3) * hidden(2) if lbr else hidden(2)
    candidate = g(cell.clipped(proj.flat(start + 2 * H + j) + hidden_part))
    h_prev = cell.state(d, b)(j)
    h_new = kb.local(row.dtype, (as_expr(1, row.dtype) - kb.get(z)) * candidate
                     + kb.get(z) * h_prev, "h_new")
    kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
    kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))


# ---------------------------------------------------------------- RNN

@lowering("RNN")
def lower_rnn(node, kb, ins, outs):
    cell = _make_cell(node, kb, ins, outs)
    H = cell.hidden

    def direction_body(cell, d, direction):
        (f,) = (activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, ins[5], d)
        cell.project_inputs(d, lambda k: cell.bias_sum(d, k, (0, H)))

        def prepare(pairs):
            cell.accumulate(cell.proj, [cell.proj_start(t, b) for b, t in pairs], H, cell.rt,
                            d, 0, [cell.state(d, b) for b, _ in pairs], H, cell.alternate(pairs))

        def update(b, t):
            start = cell.proj_start(t, b)
            with kb.loop(H) as j:
                h_new = kb.local(cell.y.dtype, f(cell.clipped(cell.proj.flat(start + j))), "h_new")
                kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
                kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))

        _time_loop(cell, d, direction, prepare, update)

    per_direction(cell, node.attrs["directions"], direction_body)
