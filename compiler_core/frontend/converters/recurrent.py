"""Converters for LSTM, GRU and RNN.

IR form: one node per ONNX node, op "LSTM" / "GRU" / "RNN", whose kernel runs the whole
time loop. Inputs keep ONNX order with two changes: W and R arrive transposed to
[dirs, in, gates*H] (so the gate update is a contiguous multiply-add the vectorizer
likes; for constant weights the transpose happens at compile time), and absent optional
inputs are None. Outputs are always Y, Y_h (and Y_c for LSTM) followed by scratch, per
direction: the input projections of every step [seq*batch*gates*H] and, for GRU, a row per
batch entry for the
hidden part of the gates [batch*4H]; the converter hands back only the outputs the model
names.

Attributes: hidden_size, directions (["forward"], ["reverse"] or ["forward", "reverse"]),
activations (per direction, a list of [name, alpha, beta]), clip (float or None), layout,
input_forget (LSTM), linear_before_reset (GRU).

sequence_lens is supported as run-time data: batch entries stop updating after their length,
their Y rows beyond it are zero and Y_h holds the state of their last valid step.
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter

# activation name -> default (alpha, beta); None means the function takes no parameter
ACTIVATIONS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None),
    "softsign": (None, None), "softplus": (None, None),
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
}
# op -> (number of gates, default activations of one direction, extra scratch per batch
# entry in units of H: GRU keeps the hidden part of its gates [3H] and r * h_prev [H] apart)
CELLS = {
    "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"], 0),
    "GRU": (3, ["Sigmoid", "Tanh"], 4),
    "RNN": (1, ["Tanh"], 0),
}


def _directions(cx) -> list[str]:
    direction = cx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise CompileError(f"direction must be forward, reverse or bidirectional, "
                           f"got {direction!r}")
    return ["forward", "reverse"] if direction == "bidirectional" else [direction]


def _activations(cx, per_direction: list[str], num_dirs: int) -> list[list]:
    """Per direction, [name, alpha, beta] with parameters consumed in order (as ONNX Runtime
    does: only functions that take alpha/beta consume entries; missing ones use defaults)."""
    names = list(cx.attr("activations", per_direction * num_dirs))
    if len(names) == len(per_direction) and num_dirs == 2:
        names = names * 2
    if len(names) != len(per_direction) * num_dirs:
        raise CompileError(f"{cx.node.op_type} needs {len(per_direction) * num_dirs} "
                           f"activations ({len(per_direction)} per direction), got {names}")
    alphas = iter(cx.attr("activation_alpha", []))
    betas = iter(cx.attr("activation_beta", []))
    funcs = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise CompileError(f"activation {name!r} is not supported; use one of "
                               f"{sorted(ACTIVATIONS)}")
        alpha, beta = ACTIVATIONS[key]
        alpha = None if alpha is None else float(next(alphas, alpha))
        beta = None if beta is None else float(next(betas, beta))
        funcs.append([key, alpha, beta])
    n = len(per_direction)
    return [funcs[k * n:(k + 1) * n] for k in range(num_dirs)]


def _transposed_weights(cx, w):
    """[dirs, gates*H, in] -> [dirs, in, gates*H]."""
    shape = (w.shape[0], w.shape[2], w.shape[1])
    if w.is_const:
        return cx.const(np.ascontiguousarray(w.const.transpose(0, 2, 1)), "weights_t")
    return cx.emit("Transpose", [w], [(shape, w.dtype)], {"perm": [0, 2, 1]},
                   names=[f"{w.name}_t"])[0]


def _check_shapes(x, w, r, hidden, gates, num_dirs, layout):
    if len(x.shape) != 3:
        raise CompileError(f"X must be 3-D, got shape {list(x.shape)}")
    in_size = x.shape[2]
    want_w, want_r = (num_dirs, gates * hidden, in_size), (num_dirs, gates * hidden, hidden)
    if tuple(w.shape) != want_w or tuple(r.shape) != want_r:
        raise CompileError(f"W and R must have shapes {list(want_w)} and {list(want_r)} "
                           f"(hidden_size={hidden}), got {list(w.shape)} and {list(r.shape)}")
    if layout not in (0, 1):
        raise CompileError(f"layout must be 0 or 1, got {layout}")


def _check_optional_shapes(inputs, gates, hidden, num_dirs, batch, state_shape):
    expected = {3: ("B", (num_dirs, 2 * gates * hidden)), 4: ("sequence_lens", (batch,)),
                5: ("initial_h", state_shape), 6: ("initial_c", state_shape),
                7: ("P", (num_dirs, 3 * hidden))}
    for k, (name, shape) in expected.items():
        v = inputs[k]
        if v is not None and tuple(v.shape) != shape:
            raise CompileError(f"{name} must have shape {list(shape)}, got {list(v.shape)}")


def _attributes(cx, op, dirs, hidden, layout, default_acts) -> dict:
    attrs = {"hidden_size": hidden, "directions": dirs, "layout": layout,
             "activations": _activations(cx, default_acts, len(dirs)),
             "clip": None if cx.attr("clip") is None else float(cx.attr("clip"))}
    if op == "LSTM":
        attrs["input_forget"] = int(cx.attr("input_forget", 0))
    if op == "GRU":
        attrs["linear_before_reset"] = int(cx.attr("linear_before_reset", 0))
    return attrs


def _convert(cx, inputs):
    op = cx.node.op_type
    gates, default_acts, scratch_rows = CELLS[op]
    inputs = list(inputs) + [None] * (8 - len(inputs))
    x, w, r = inputs[:3]
    dirs = _directions(cx)
    hidden = int(cx.attr("hidden_size", r.shape[-1]))
    layout = int(cx.attr("layout", 0))
    _check_shapes(x, w, r, hidden, gates, len(dirs), layout)
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    y_shape = (seq, len(dirs), batch, hidden) if layout == 0 else (batch, seq, len(dirs), hidden)
    state_shape = (len(dirs), batch, hidden) if layout == 0 else (batch, len(dirs), hidden)
    _check_optional_shapes(inputs, gates, hidden, len(dirs), batch, state_shape)
    outputs = [(y_shape, x.dtype), (state_shape, x.dtype)]
    if op == "LSTM":
        outputs.append((state_shape, x.dtype))
    results = len(outputs)
    # per direction: the directions may run on two threads (kernels/recurrent.py)
    outputs.append(((len(dirs) * seq * batch * gates * hidden,), x.dtype))  # input projections
    if scratch_rows:
        outputs.append(((len(dirs) * batch * scratch_rows * hidden,), x.dtype))
    ins = [x, _transposed_weights(cx, w), _transposed_weights(cx, r), *inputs[3:]]
    ins = ins[:8] if op == "LSTM" else ins[:6]
    attrs = _attributes(cx, op, dirs, hidden, layout, default_acts)
    return cx.emit(op, ins, outputs, attrs)[:results]


for _op in CELLS:
    converter(_op, 1)(_convert)
