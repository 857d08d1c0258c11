"""Converters for DFT and STFT (kernels in kernels/signal.py).

Both lower to direct O(n^2) transforms. The twiddle factors cos/sin(2*pi*m/n) are computed
here with numpy in float64 and passed as one constant table; the kernels index it with
(k * j) mod n, so every length needs only n entries.
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..limits import check_tensor
from ..registry import converter
from .common import const_value, norm_axis


def twiddle_table(cx, lengths):
    """-> (constant (sum(lengths), 2) table of [cos, sin](2*pi*m/n), {n: first row of n})."""
    offsets, rows = {}, []
    for n in sorted(set(lengths)):
        check_tensor((n, 2), np.float64, "the DFT twiddle table")
        offsets[n] = sum(len(r) for r in rows)
        angle = 2 * np.pi * np.arange(n) / n
        rows.append(np.stack([np.cos(angle), np.sin(angle)], axis=1))
    return cx.const(np.concatenate(rows), "twiddles"), offsets


def _scalar_int(v, what: str) -> int | None:
    value = const_value(v, what)
    if value is None:
        return None
    if np.asarray(value).size != 1:
        raise CompileError(f"{what} must be a scalar, got shape {list(np.shape(value))}")
    return int(np.asarray(value).reshape(-1)[0])


def _check_signal(x, what: str):
    if len(x.shape) < 2 or x.shape[-1] not in (1, 2):
        raise CompileError(f"{what} must end in a dimension of 1 (real) or 2 (complex), got "
                           f"{list(x.shape)}")
    if x.dtype.kind != "f":
        raise CompileError(f"{what} must be float, got {x.dtype}")


# ---------------------------------------------------------------- DFT

def _dft_geometry(x_shape, axis, length, inverse, onesided):
    """-> (transform length n, output length along the axis, output channels 1 or 2)."""
    size = x_shape[axis]
    if inverse and onesided:  # a half spectrum in, a real signal out (numpy's irfft)
        n = length if length is not None else 2 * (size - 1)
        return n, n, 1
    n = length if length is not None else size
    return n, (n // 2 + 1 if onesided else n), 2


def _dft(cx, x, length, axis, runtime_axis=None):
    _check_signal(x, "DFT's input")
    inverse, onesided = bool(cx.attr("inverse", 0)), bool(cx.attr("onesided", 0))
    if length is not None and length < 1:
        raise CompileError(f"DFT's dft_length must be positive, got {length}")
    rank = len(x.shape)
    candidates = [axis] if runtime_axis is None else list(range(rank - 1))
    plans = {a: _dft_geometry(x.shape, a, length, inverse, onesided) for a in candidates}
    shapes = {_out_shape(x.shape, a, plans[a]) for a in candidates}
    if len(shapes) > 1:
        raise CompileError("DFT's axis must be known at compile time here: the output shape "
                           f"depends on it ({sorted(map(list, shapes))}); make it a constant")
    if any(n < 1 for n, _, _ in plans.values()):
        raise CompileError(f"DFT of length 0 along the axis of input {list(x.shape)}")
    table, offsets = twiddle_table(cx, [n for n, _, _ in plans.values()])
    attrs = {"plans": [(a, n, m, offsets[n]) for a, (n, m, _) in plans.items()],
             "inverse": inverse, "onesided": onesided}
    inputs = [x, table] + ([runtime_axis] if runtime_axis is not None else [])
    return [cx.emit1("DFT", inputs, shapes.pop(), x.dtype, attrs)]


def _out_shape(x_shape, axis, plan):
    _, m, channels = plan
    return tuple(m if d == axis else s for d, s in enumerate(x_shape[:-1])) + (channels,)


def _dft_axis(axis: int, rank: int) -> int:
    axis = norm_axis(axis, rank, "DFT's axis")
    if axis == rank - 1:
        raise CompileError("DFT's axis must not be the last one (it holds real/imaginary parts)")
    return axis


@converter("DFT", 17)
def dft_v17(cx, inputs):
    x = inputs[0]
    length = _scalar_int(inputs[1] if len(inputs) > 1 else None, "DFT's dft_length")
    return _dft(cx, x, length, _dft_axis(cx.attr("axis", 1), len(x.shape)))


@converter("DFT", 20)
def dft_v20(cx, inputs):
    x = inputs[0]
    length = _scalar_int(inputs[1] if len(inputs) > 1 else None, "DFT's dft_length")
    axis = inputs[2] if len(inputs) > 2 else None
    if axis is None:
        return _dft(cx, x, length, _dft_axis(-2, len(x.shape)))
    if axis.is_const:
        return _dft(cx, x, length, _dft_axis(_scalar_int(axis, "DFT's axis"), len(x.shape)))
    if axis.size != 1:
        raise CompileError(f"DFT's axis must be a scalar, got shape {list(axis.shape)}")
    return _dft(cx, x, length, None, runtime_axis=axis)


# ---------------------------------------------------------------- STFT

@converter("STFT", 17)
def stft(cx, inputs):
    signal, step = inputs[0], inputs[1]
    window = inputs[2] if len(inputs) > 2 else None
    length_input = inputs[3] if len(inputs) > 3 else None
    _check_signal(signal, "STFT's signal")
    if len(signal.shape) != 3:
        raise CompileError(f"STFT's signal must be (batch, length, 1 or 2), got "
                           f"{list(signal.shape)}")
    step = _scalar_int(step, "STFT's frame_step")
    length = _scalar_int(length_input, "STFT's frame_length")
    if window is not None:
        if len(window.shape) != 1 or length not in (None, window.shape[0]):
            raise CompileError(f"STFT's window {list(window.shape)} must be 1-D with "
                               f"frame_length ({length}) values")
        length = window.shape[0]
    length = signal.shape[1] if length is None else length
    if step < 1 or not 1 <= length <= signal.shape[1]:
        raise CompileError(f"STFT needs frame_step >= 1 and 1 <= frame_length <= signal length "
                           f"{signal.shape[1]}; got {step} and {length}")
    onesided = bool(cx.attr("onesided", 1))
    frames = 1 + (signal.shape[1] - length) // step
    bins = length // 2 + 1 if onesided else length
    table, _ = twiddle_table(cx, [length])
    attrs = {"frame_step": step, "frame_length": length}
    inputs = [signal, table] + ([window] if window is not None else [])
    return [cx.emit1("STFT", inputs, (signal.shape[0], frames, bins, 2), signal.dtype, attrs)]
