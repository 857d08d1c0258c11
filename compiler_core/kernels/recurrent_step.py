"""One time step of a GRU or LSTM whose products were taken out as separate nodes.

passes/sparse_weights.py rewrites a single-step GRU/LSTM (a sampling net's step) into
products (block-sparse or dense, decided per matrix) and one of these gate kernels:

    GRUStepGates  (linear_before_reset=1, gates z, r, n), ins: zr = [x, h] @ [W | R]_zr^T
    + biases (batch, 2H), xn = x @ W_n^T + Wb_n, hn = h @ R_n^T + Rb_n (batch, H), h:
        z = f(zr_z); r = f(zr_r); n = g(xn + r * hn); h' = (1 - z) * n + z * h
    LSTMStepGates (gates i, o, f, c), ins: g = [x, h] @ [W | R]^T + biases (batch, 4H), c:
        i, o, f = f(g); c' = f * c + i * g(g_c); h' = o * h(c')

outs: Y, Y_h (and Y_c), which hold the same batch x H numbers for one step.
"""
from __future__ import annotations

from ..ir.loops import as_expr
from .recurrent import activation
from .registry import lowering


@lowering("GRUStepGates")
def lower_gru_step_gates(node, kb, ins, outs):
    zr, xn, hn, h_prev = ins
    H = node.attrs["hidden_size"]
    f, g = (activation(*a) for a in node.attrs["activations"])
    with kb.loop(zr.shape[0]) as b, kb.loop(H) as j:
        at = b * H + j
        z = kb.local(zr.dtype, f(zr.flat(b * 2 * H + j)), "z")
        r = f(zr.flat(b * 2 * H + H + j))
        n = kb.local(zr.dtype, g(xn.flat(at) + r * hn.flat(at)), "n")
        new = (as_expr(1.0, zr.dtype) - kb.get(z)) * kb.get(n) + kb.get(z) * h_prev.flat(at)
        for out in outs:
            kb.store_flat(out, at, new)


@lowering("LSTMStepGates")
def lower_lstm_step_gates(node, kb, ins, outs):
    gates, c_prev = ins
    H = node.attrs["hidden_size"]
    f, g, h = (activation(*a) for a in node.attrs["activations"])
    y, y_h, y_c = outs
    with kb.loop(gates.shape[0]) as b, kb.loop(H) as j:
        row = b * 4 * H + j

        def pre(k):
            return gates.flat(row + k * H)
        c = kb.local(gates.dtype, f(pre(2)) * c_prev.flat(b * H + j) + f(pre(0)) * g(pre(3)),
                     "c")
        new = kb.local(gates.dtype, f(pre(1)) * h(kb.get(c)), "h")
        kb.store_flat(y_c, b * H + j, kb.get(c))
        for out in (y, y_h):
            kb.store_flat(out, b * H + j, kb.get(new))
