"""Integer and quantized matrix products and convolutions, decomposed into existing IR ops.

Operands are widened to int32 and their zero points subtracted, then the int32 MatMul or
Conv (nn.py's converters) accumulates exactly, as ONNX's reference does. QLinear* ops then
scale the int32 result in float64 (exact for any int32 times a float32 scale), round half
to even and saturate through the elementwise QuantizeLinear op with scale 1.
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter
from .common import broadcast
from .nn import conv, matmul

I32, F32, F64 = np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.float64)
QUANTIZED = {"int8", "uint8"}


def _cast(cx, v, dtype):
    dtype = np.dtype(dtype)
    if v.dtype == dtype:
        return v
    if v.is_const:
        return cx.const(v.const.astype(dtype), "cast")
    return cx.emit1("Cast", [v], v.shape, dtype, {"to": dtype.name})


def _reshaped(cx, v, shape):
    if v.shape == tuple(shape):
        return v
    if v.is_const:
        return cx.const(v.const.reshape(shape), "reshaped")
    return cx.emit1("Reshape", [v], shape, v.dtype, {"shape": tuple(shape)})


def _binary(cx, op, a, b, dtype=None):
    return cx.emit1(op, [a, b], broadcast(a.shape, b.shape), dtype or a.dtype)


def _check_quantized(v, what):
    if v is not None and v.dtype.name not in QUANTIZED:
        raise CompileError(f"{what} must be int8 or uint8, got {v.dtype}")


def _centered(cx, q, zp, zp_shape=None):
    """int32(q) - int32(zp); folded at compile time when both are constants (weights)."""
    q32 = _cast(cx, q, I32)
    if zp is None:
        return q32
    zp32 = _cast(cx, _reshaped(cx, zp, zp_shape) if zp_shape else zp, I32)
    if q32.is_const and zp32.is_const:
        return cx.const(q32.const - zp32.const, "centered")
    return _binary(cx, "Sub", q32, zp32)


def _per_row_shape(v, a, what: str):
    """A per-row parameter of A (M values) broadcasts as an (M, 1) column."""
    if v is None or v.size == 1 or len(a.shape) < 2:
        return None
    rows = a.shape[-2]
    if v.size != rows:
        raise CompileError(f"{what} must be a scalar or have one value per row of A "
                           f"({rows}), got shape {list(v.shape)}")
    return (rows, 1)


def _channel_shape(v, channels: int, rank: int):
    """A per-output-channel parameter broadcasts as (C, 1, ...) against weights or outputs."""
    if v is None or v.size == 1:
        return None
    if v.size != channels:
        raise CompileError(f"per-channel parameter must have {channels} values (one per output "
                           f"channel), got shape {list(v.shape)}")
    return (channels,) + (1,) * rank


def _optional(inputs, k):
    return inputs[k] if len(inputs) > k else None


def _integer_matmul(cx, a, a_zp, b, b_zp):
    for v, what in ((a, "A"), (b, "B"), (a_zp, "a_zero_point"), (b_zp, "b_zero_point")):
        _check_quantized(v, what)
    a_zp_shape = _per_row_shape(a_zp, a, "a_zero_point")
    return matmul(cx, [_centered(cx, a, a_zp, a_zp_shape), _centered(cx, b, b_zp)])[0]


def _integer_conv(cx, x, x_zp, w, w_zp, bias=None):
    for v, what in ((x, "x"), (w, "w"), (x_zp, "x_zero_point"), (w_zp, "w_zero_point")):
        _check_quantized(v, what)
    if x_zp is not None and x_zp.size != 1:
        raise CompileError(f"x_zero_point must be a scalar, got shape {list(x_zp.shape)}")
    w_zp_shape = _channel_shape(w_zp, w.shape[0], len(w.shape) - 1)
    return conv(cx, [_centered(cx, x, x_zp), _centered(cx, w, w_zp, w_zp_shape), bias])[0]


def _requantize(cx, acc, multiplier, y_zp, to):
    """saturate(round_half_even(acc * multiplier) + y_zp) in type `to`."""
    scaled = _binary(cx, "Mul", _cast(cx, acc, F64), _cast(cx, multiplier, F64))
    rounded = cx.emit1("Round", [scaled], scaled.shape, F64)
    one = cx.const(np.array(1.0, F32), "unit_scale")
    return cx.emit1("QuantizeLinear", [rounded, one, y_zp], rounded.shape, to, {"to": to.name})


def _multiplier(cx, in_scale, w_scale, y_scale, in_scale_shape=None, w_scale_shape=None):
    """in_scale * w_scale / y_scale in the scales' own type, as ONNX's reference computes it."""
    if in_scale_shape:
        in_scale = _reshaped(cx, in_scale, in_scale_shape)
    if w_scale_shape:
        w_scale = _reshaped(cx, w_scale, w_scale_shape)
    if in_scale.is_const and w_scale.is_const and y_scale.is_const:
        return cx.const(in_scale.const * w_scale.const / y_scale.const, "requant_multiplier")
    return _binary(cx, "Div", _binary(cx, "Mul", in_scale, w_scale), y_scale)


@converter("MatMulInteger", 10)
def matmul_integer(cx, inputs):
    a, b = inputs[:2]
    return [_integer_matmul(cx, a, _optional(inputs, 2), b, _optional(inputs, 3))]


@converter("ConvInteger", 10)
def conv_integer(cx, inputs):
    x, w = inputs[:2]
    return [_integer_conv(cx, x, _optional(inputs, 2), w, _optional(inputs, 3))]


@converter("QLinearMatMul", 10)
def qlinear_matmul(cx, inputs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale = inputs[:7]
    y_zp = _optional(inputs, 7)
    _check_quantized(y_zp, "y_zero_point")
    acc = _integer_matmul(cx, a, a_zp, b, b_zp)
    to = a.dtype if y_zp is None else y_zp.dtype
    a_scale_shape = _per_row_shape(a_scale, a, "a_scale")
    multiplier = _multiplier(cx, a_scale, b_scale, y_scale, in_scale_shape=a_scale_shape)
    return [_requantize(cx, acc, multiplier, y_zp, to)]


@converter("QLinearConv", 10)
def qlinear_conv(cx, inputs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale = inputs[:7]
    y_zp, bias = _optional(inputs, 7), _optional(inputs, 8)
    _check_quantized(y_zp, "y_zero_point")
    if bias is not None and bias.dtype != I32:
        raise CompileError(f"QLinearConv's bias must be int32, got {bias.dtype}")
    acc = _integer_conv(cx, x, x_zp, w, w_zp, bias)
    scale_shape = _channel_shape(w_scale, w.shape[0], len(w.shape) - 2)
    to = x.dtype if y_zp is None else y_zp.dtype
    multiplier = _multiplier(cx, x_scale, w_scale, y_scale, w_scale_shape=scale_shape)
    return [_requantize(cx, acc, multiplier, y_zp, to)]
