"""QuantizeLinear / DequantizeLinear: elementwise with a scale (and zero point) per tensor,
per axis or per block; the scale is reshaped at compile time so it broadcasts."""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter
from .common import norm_axis

INTEGER_CODES = {"int8", "uint8", "int16", "uint16", "int32"}


def _along_axis(cx, v, x_shape, axis, block_size):
    """Reshape or repeat a per-axis / per-block parameter so it broadcasts against x."""
    if v is None or v.size == 1 and not block_size:
        return v
    rank = len(x_shape)
    axis = norm_axis(axis, rank)
    if block_size:
        return cx.emit1("RepeatAlongAxis", [v], x_shape, v.dtype,
                        {"axis": axis, "repeats": block_size})
    if len(v.shape) != 1 or v.shape[0] != x_shape[axis]:
        raise CompileError(f"per-axis scale/zero point must have shape [{x_shape[axis]}] "
                           f"(the size of axis {axis}), got {list(v.shape)}")
    shape = tuple(x_shape[axis] if d == axis else 1 for d in range(rank))
    if v.is_const:
        return cx.const(v.const.reshape(shape), "axis_param")
    return cx.emit1("Reshape", [v], shape, v.dtype, {"shape": shape})


def _params(cx, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    axis, block = cx.attr("axis", 1), cx.attr("block_size", 0)
    return (x, _along_axis(cx, scale, x.shape, axis, block),
            _along_axis(cx, zp, x.shape, axis, block))


@converter("QuantizeLinear", 10)
def quantize_linear(cx, inputs):
    x, scale, zp = _params(cx, inputs)
    code = zp.dtype if zp is not None else np.dtype(np.uint8)
    if cx.attr("output_dtype"):
        from ..onnx import np_dtype
        code = np_dtype(cx.attr("output_dtype"))
    if code.name not in INTEGER_CODES:
        raise CompileError(f"QuantizeLinear to {code.name} is not supported; use int8, uint8, "
                           "int16 or uint16")
    return [cx.emit1("QuantizeLinear", [x, scale, zp], x.shape, code, {"to": code.name})]


@converter("DequantizeLinear", 10)
def dequantize_linear(cx, inputs):
    x, scale, zp = _params(cx, inputs)
    if x.dtype.name not in INTEGER_CODES:
        raise CompileError(f"DequantizeLinear from {x.dtype.name} is not supported")
    out = np.dtype(np.float32) if cx.opset < 19 else scale.dtype
    return [cx.emit1("DequantizeLinear", [x, scale, zp], x.shape, out)]


@converter("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(cx, inputs):
    x = inputs[0]
    if x.dtype != np.float32:
        raise CompileError(f"DynamicQuantizeLinear takes float32, got {x.dtype}")
    return cx.emit("DynamicQuantizeLinear", [x], [(x.shape, np.uint8), ((), np.float32),
                                                  ((), np.uint8)])
