"""LSTM, GRU and RNN: the whole time loop in one kernel.

Per direction the kernel does two things:

1. Input projection for all time steps at once, before the recurrence (it does not depend
   on the state): `proj[t, b, g] = bias[g] + sum_i x[t, b, i] * WT[i, g]`. The loop over i
   is outermost, four rows of WT at a time, so those rows stay in L1 while they are applied
   to every time step: a matrix product rather than T matrix-vector products that would
   stream all of W from L2 at every step.
2. The recurrence: per step and batch entry, the hidden-state product is added into the
   step's proj row (`row[g] += h[i] * RT[i, g]`), then the gates are applied elementwise.

Both products run over contiguous gates in the row and in the weights, which the converter
transposed to [dirs, in, gates*H]; LLVM turns the inner loops into vector FMAs. The hidden
and cell states live directly in the Y_h / Y_c outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.loops import INDEX, Buf, Const, as_expr, cast, maximum, minimum
from .elementwise import SCALAR
from .fastmath import math_call
from .registry import lowering

ROWS_PER_SWEEP = 4  # weight rows applied per pass over a gate row: a quarter of its loads/stores


# ---------------------------------------------------------------- activations

def _activation(name: str, alpha, beta):
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
    row: Buf | None  # scratch for hidden-state products kept apart (GRU only)
    hidden: int
    layout: int
    clip: float | None

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
        return (t * self.batch + b) * self.width

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

    def accumulate(self, out: Buf, start, n, weights: Buf, d, col, vec_at, length):
        in_sweeps(self.kb, length, lambda first, count: self.sweep(
            out, start, n, weights, d, col, vec_at, first, count))

    def sweep(self, out, start, n, weights, d, col, vec_at, first, count):
        kb = self.kb
        vs = [kb.local(out.dtype, vec_at(first + u), "v") for u in range(count)]
        with kb.loop(n) as g:
            total = out.flat(start + g)
            for u, v in enumerate(vs):
                total = total + kb.get(v) * weights[d, first + u, col + g]
            kb.store(out, start + g, total)

    def project_inputs(self, d, bias_of):
        """proj[t, b, :] = bias + x[t, b, :] @ WT[d] for every step, weight rows outermost."""
        kb = self.kb
        with kb.loop(self.seq) as t, kb.loop(self.batch) as b:
            self.init_row(self.proj, self.proj_start(t, b), self.width, bias_of)
        in_sweeps(kb, self.wt.shape[1], lambda first, count: self._project_rows(d, first, count))

    def _project_rows(self, d, first, count):
        with self.kb.loop(self.seq) as t, self.kb.loop(self.batch) as b:
            self.sweep(self.proj, self.proj_start(t, b), self.width, self.wt, d, 0,
                       lambda i: self.x_at(t, b, i), first, count)


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
    return Cell(kb, x, wt, rt, bias, lens, outs[0], outs[1], scratch[0],
                scratch[1] if len(scratch) > 1 else None,
                node.attrs["hidden_size"], node.attrs["layout"], node.attrs["clip"])


def _init_state(cell: Cell, state: Buf, initial: Buf | None, d):
    kb = cell.kb
    with kb.loop(cell.batch) as b, kb.loop(cell.hidden) as j:
        idx = cell.state_index(d, b, j)
        kb.store(state, idx, initial[idx] if initial is not None else as_expr(0, state.dtype))


def _time_loop(cell: Cell, d, direction, step):
    """Calls step(b, t) for every valid (time, batch) pair in the direction's order."""
    kb = cell.kb
    with kb.loop(cell.seq) as s, kb.loop(cell.batch) as b:
        if cell.lens is None:
            step(b, s if direction == "forward" else Const(cell.seq - 1) - s)
            return
        length = minimum(maximum(cast(cell.lens[b], INDEX), Const(0)), Const(cell.seq))
        active = kb.local(INDEX, length, "length")
        t = s if direction == "forward" else kb.get(active) - 1 - s
        with kb.if_(s < kb.get(active)) as branch:
            step(b, t)
        with kb.else_(branch), kb.loop(cell.hidden) as j:
            # steps past a sequence's end produce zeros; its state stays as it was
            kb.store(cell.y, cell.y_index(s, d, b, j), as_expr(0, cell.y.dtype))


# ---------------------------------------------------------------- LSTM

@lowering("LSTM")
def lower_lstm(node, kb, ins, outs):
    cell = _make_cell(node, kb, ins, outs)
    initial_h, initial_c, peep = ins[5], ins[6], ins[7]
    c, H = outs[2], cell.hidden
    for d, direction in enumerate(node.attrs["directions"]):
        f, g, h = (_activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, initial_h, d)
        _init_state(cell, c, initial_c, d)
        cell.project_inputs(d, lambda k, d=d: cell.bias_sum(d, k, (0, 4 * H)))

        def step(b, t, d=d, f=f, g=g, h=h):
            start = cell.proj_start(t, b)
            cell.accumulate(cell.proj, start, 4 * H, cell.rt, d, 0, cell.state(d, b), H)
            with kb.loop(H) as j:
                _lstm_update(node, cell, c, peep, d, b, t, j, start, (f, g, h))

        _time_loop(cell, d, direction, step)


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
    """proj holds the input part of z, r, h (with W's bias). The hidden part goes to `row`:
    [0, 3H) for z, r, h (with R's bias), then [3H, 4H) for r * h_prev, or r alone when
    linear_before_reset, where r scales the hidden part of h instead."""
    cell = _make_cell(node, kb, ins, outs)
    H, lbr, row = cell.hidden, node.attrs["linear_before_reset"], cell.row
    for d, direction in enumerate(node.attrs["directions"]):
        f, g = (_activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, ins[5], d)
        cell.project_inputs(d, lambda k, d=d: cell.bias_sum(d, k, (0,)))

        def step(b, t, d=d, f=f, g=g):
            start, state = cell.proj_start(t, b), cell.state(d, b)
            hidden_rows = 3 * H if lbr else 2 * H
            cell.init_row(row, 0, hidden_rows, lambda k: cell.bias_sum(d, k, (3 * H,)))
            cell.accumulate(row, 0, hidden_rows, cell.rt, d, 0, state, H)
            with kb.loop(H) as j:
                r = f(cell.clipped(cell.proj.flat(start + H + j) + row.flat(H + j)))
                kb.store(row, 3 * H + j, r if lbr else r * state(j))
            if not lbr:
                cell.init_row(row, 2 * H, H, lambda k: cell.bias_sum(d, 2 * H + k, (3 * H,)))
                cell.accumulate(row, 2 * H, H, cell.rt, d, 2 * H,
                                lambda i: row.flat(3 * H + i), H)
            with kb.loop(H) as j:
                _gru_update(cell, d, b, t, j, start, (f, g), lbr)

        _time_loop(cell, d, direction, step)


def _gru_update(cell, d, b, t, j, start, funcs, lbr):
    kb, H, row, proj = cell.kb, cell.hidden, cell.row, cell.proj
    f, g = funcs
    z = kb.local(row.dtype, f(cell.clipped(proj.flat(start + j) + row.flat(j))), "z")
    hidden_part = row.flat(3 * H + j) * row.flat(2 * H + j) if lbr else row.flat(2 * H + j)
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
    for d, direction in enumerate(node.attrs["directions"]):
        (f,) = (_activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, ins[5], d)
        cell.project_inputs(d, lambda k, d=d: cell.bias_sum(d, k, (0, H)))

        def step(b, t, d=d, f=f):
            start = cell.proj_start(t, b)
            cell.accumulate(cell.proj, start, H, cell.rt, d, 0, cell.state(d, b), H)
            with kb.loop(H) as j:
                h_new = kb.local(cell.y.dtype, f(cell.clipped(cell.proj.flat(start + j))), "h_new")
                kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
                kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))

        _time_loop(cell, d, direction, step)
