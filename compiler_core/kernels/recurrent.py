"""LSTM, GRU and RNN: the whole time loop in one kernel.

For every time step and batch entry the gate pre-activations are built in a scratch row:
bias first, then one multiply-add sweep per input element, `row[g] += x[i] * WT[i, g]`,
with the weights transposed by the converter so that the inner loop runs over contiguous
gates in both the row and the weights (LLVM turns it into vector FMAs). The hidden and
cell states live directly in the Y_h / Y_c outputs, so no other scratch is needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.loops import INDEX, Buf, Const, as_expr, call, cast, maximum, minimum
from .elementwise import SCALAR
from .registry import lowering


# ---------------------------------------------------------------- activations

def _activation(name: str, alpha, beta):
    """Scalar function for one entry of the `activations` attribute."""
    if name == "affine":
        return lambda e: e * as_expr(alpha, e.dtype) + as_expr(beta, e.dtype)
    if name == "scaledtanh":
        return lambda e: as_expr(alpha, e.dtype) * call("tanh", e * as_expr(beta, e.dtype))
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
    row: Buf         # scratch for the gate pre-activations
    hidden: int
    layout: int
    clip: float | None

    @property
    def seq(self) -> int:
        return self.x.shape[0] if self.layout == 0 else self.x.shape[1]

    @property
    def batch(self) -> int:
        return self.x.shape[1] if self.layout == 0 else self.x.shape[0]

    def x_at(self, t, b, i):
        return self.x[(t, b, i) if self.layout == 0 else (b, t, i)]

    def y_index(self, t, d, b, j):
        return (t, d, b, j) if self.layout == 0 else (b, t, d, j)

    def state_index(self, d, b, j):
        return (d, b, j) if self.layout == 0 else (b, d, j)

    def clipped(self, e):
        if self.clip is None:
            return e
        return minimum(maximum(e, as_expr(-self.clip, e.dtype)), as_expr(self.clip, e.dtype))

    def bias_sum(self, d, gate, offsets):
        """Sum of bias entries at `gate + offset` for each offset (W bias, R bias)."""
        if self.bias is None:
            return as_expr(0, self.row.dtype)
        total = self.bias[d, gate + offsets[0]]
        for off in offsets[1:]:
            total = total + self.bias[d, gate + off]
        return total

    # -- gate rows: row[start + g] = bias(g) + sum_i vec(i) * weights[d, i, col + g]
    def init_row(self, start, n, bias_of):
        with self.kb.loop(n) as g:
            self.kb.store(self.row, start + g, bias_of(g))

    def accumulate(self, start, n, weights: Buf, d, col, vec_at, length):
        kb = self.kb
        with kb.loop(length) as i:
            v = kb.local(self.row.dtype, vec_at(i), "v")
            with kb.loop(n) as g:
                kb.store(self.row, start + g,
                         self.row.flat(start + g) + kb.get(v) * weights[d, i, col + g])

    def add_input_and_hidden(self, start, n, d, col, t, b):
        self.accumulate(start, n, self.wt, d, col, lambda i: self.x_at(t, b, i), self.wt.shape[1])
        self.accumulate(start, n, self.rt, d, col,
                        lambda i: self.h[self.state_index(d, b, i)], self.hidden)


def _make_cell(node, kb, ins, outs) -> Cell:
    x, wt, rt, bias, lens = ins[:5]
    return Cell(kb, x, wt, rt, bias, lens, outs[0], outs[1], outs[-1],
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
    c = outs[2]
    H = cell.hidden
    for d, direction in enumerate(node.attrs["directions"]):
        f, g, h = (_activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, initial_h, d)
        _init_state(cell, c, initial_c, d)

        def step(b, t, d=d, f=f, g=g, h=h):
            cell.init_row(0, 4 * H, lambda k: cell.bias_sum(d, k, (0, 4 * H)))
            cell.add_input_and_hidden(0, 4 * H, d, 0, t, b)
            with kb.loop(H) as j:
                _lstm_update(node, cell, c, peep, d, b, t, j, f, g, h)

        _time_loop(cell, d, direction, step)


def _lstm_update(node, cell, c, peep, d, b, t, j, f, g, h):
    """Gate order in the row: input, output, forget, cell (ONNX's iofc)."""
    kb, H, row = cell.kb, cell.hidden, cell.row
    c_prev = kb.local(c.dtype, c[cell.state_index(d, b, j)], "c_prev")

    def peephole(k, c_value):
        return row.flat(k * H + j) + (peep[d, k * H + j] * c_value if peep is not None else 0)

    i_gate = kb.local(row.dtype, f(cell.clipped(peephole(0, kb.get(c_prev)))), "i")
    if node.attrs["input_forget"]:
        f_gate = as_expr(1, row.dtype) - kb.get(i_gate)
    else:
        f_gate = f(cell.clipped(peephole(2, kb.get(c_prev))))
    candidate = g(cell.clipped(row.flat(3 * H + j)))
    c_new = kb.local(c.dtype, f_gate * kb.get(c_prev) + kb.get(i_gate) * candidate, "c_new")
    o_gate = f(cell.clipped(peephole(1, kb.get(c_new))))
    h_new = kb.local(row.dtype, o_gate * h(kb.get(c_new)), "h_new")
    kb.store(c, cell.state_index(d, b, j), kb.get(c_new))
    kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
    kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))


# ---------------------------------------------------------------- GRU

@lowering("GRU")
def lower_gru(node, kb, ins, outs):
    """Row layout: [0, 3H) input part of z, r, h; [3H, 6H) hidden part; [6H, 7H) r * h_prev
    (or r alone when linear_before_reset, where r scales the hidden part instead)."""
    cell = _make_cell(node, kb, ins, outs)
    H, lbr = cell.hidden, node.attrs["linear_before_reset"]
    for d, direction in enumerate(node.attrs["directions"]):
        f, g = (_activation(*a) for a in node.attrs["activations"][d])
        _init_state(cell, cell.h, ins[5], d)

        def step(b, t, d=d, f=f, g=g):
            state = lambda i: cell.h[cell.state_index(d, b, i)]  # noqa: E731
            cell.init_row(0, 3 * H, lambda k: cell.bias_sum(d, k, (0,)))
            cell.accumulate(0, 3 * H, cell.wt, d, 0, lambda i: cell.x_at(t, b, i), cell.wt.shape[1])
            hidden_rows = 3 * H if lbr else 2 * H
            cell.init_row(3 * H, hidden_rows, lambda k: cell.bias_sum(d, k, (3 * H,)))
            cell.accumulate(3 * H, hidden_rows, cell.rt, d, 0, state, H)
            with kb.loop(H) as j:
                r = f(cell.clipped(cell.row.flat(H + j) + cell.row.flat(4 * H + j)))
                kb.store(cell.row, 6 * H + j, r if lbr else r * state(j))
            if not lbr:
                cell.init_row(5 * H, H, lambda k: cell.bias_sum(d, 2 * H + k, (3 * H,)))
                cell.accumulate(5 * H, H, cell.rt, d, 2 * H, lambda i: cell.row.flat(6 * H + i), H)
            with kb.loop(H) as j:
                _gru_update(cell, d, b, t, j, f, g, lbr, state)

        _time_loop(cell, d, direction, step)


def _gru_update(cell, d, b, t, j, f, g, lbr, state):
    kb, H, row = cell.kb, cell.hidden, cell.row
    z = kb.local(row.dtype, f(cell.clipped(row.flat(j) + row.flat(3 * H + j))), "z")
    if lbr:
        pre = row.flat(2 * H + j) + row.flat(6 * H + j) * row.flat(5 * H + j)
    else:
        pre = row.flat(2 * H + j) + row.flat(5 * H + j)
    candidate = g(cell.clipped(pre))
    h_new = kb.local(row.dtype, (as_expr(1, row.dtype) - kb.get(z)) * candidate
                     + kb.get(z) * state(j), "h_new")
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

        def step(b, t, d=d, f=f):
            cell.init_row(0, H, lambda k: cell.bias_sum(d, k, (0, H)))
            cell.add_input_and_hidden(0, H, d, 0, t, b)
            with kb.loop(H) as j:
                h_new = kb.local(cell.row.dtype, f(cell.clipped(cell.row.flat(j))), "h_new")
                kb.store(cell.h, cell.state_index(d, b, j), kb.get(h_new))
                kb.store(cell.y, cell.y_index(t, d, b, j), kb.get(h_new))

        _time_loop(cell, d, direction, step)

