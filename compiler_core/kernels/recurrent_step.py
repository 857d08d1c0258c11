"""One time step of a GRU or LSTM whose products were taken out as separate nodes.

passes/sparse_weights.py rewrites a single-step GRU/LSTM (a sampling net's step) into two
products, gx = x @ W^T + Wb and gh = h @ R^T + Rb (block-sparse or dense, decided per
matrix), and one of these gate kernels, which reads both rows and the previous state:

    GRUStepGates  (linear_before_reset=1, gates z, r, h):
        z = f(gx_z + gh_z); r = f(gx_r + gh_r); n = g(gx_h + r * gh_h)
        h' = (1 - z) * n + z * h
    LSTMStepGates (gates i, o, f, c):
        i, o, f = f(gx + gh); c' = f * c + i * g(gx_c + gh_c); h' = o * h(c')

ins: gx (batch, gates*H), gh (batch, gates*H), the previous h (GRU) or c (LSTM);
outs: Y, Y_h (and Y_c), which hold the same batch x H numbers for one step.
"""
from __future__ import annotations

from ..ir.loops import as_expr
from .recurrent import activation
from .registry import lowering


@lowering("GRUStepGates")
def lower_gru_step_gates(node, kb, ins, outs):
    gx, gh, h_prev = ins
    H = node.attrs["hidden_size"]
    f, g = (activation(*a) for a in node.attrs["activations"])
    batch = gx.shape[0]
    with kb.loop(batch) as b, kb.loop(H) as j:
        row = b * 3 * H + j
        z = kb.local(gx.dtype, f(gx.flat(row) + gh.flat(row)), "z")
        r = f(gx.flat(row + H) + gh.flat(row + H))
        n = kb.local(gx.dtype, g(gx.flat(row + 2 * H) + r * gh.flat(row + 2 * H)), "n")
        h = h_prev.flat(b * H + j)
        new = (as_expr(1.0, gx.dtype) - kb.get(z)) * kb.get(n) + kb.get(z) * h
        for out in outs:
            kb.store_flat(out, b * H + j, new)


@lowering("LSTMStepGates")
def lower_lstm_step_gates(node, kb, ins, outs):
    gx, gh, c_prev = ins
    H = node.attrs["hidden_size"]
    f, g, h = (activation(*a) for a in node.attrs["activations"])
    y, y_h, y_c = outs
    batch = gx.shape[0]
    with kb.loop(batch) as b, kb.loop(H) as j:
        row = b * 4 * H + j

        def pre(k):
            return gx.flat(row + k * H) + gh.flat(row + k * H)
        c = kb.local(gx.dtype, f(pre(2)) * c_prev.flat(b * H + j) + f(pre(0)) * g(pre(3)), "c")
        new = kb.local(gx.dtype, f(pre(1)) * h(kb.get(c)), "h")
        kb.store_flat(y_c, b * H + j, kb.get(c))
        for out in (y, y_h):
            kb.store_flat(out, b * H + j, kb.get(new))
