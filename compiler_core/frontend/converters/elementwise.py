"""Converters for elementwise math, logic and activation ops."""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter
from .common import broadcast

BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr",
          "BitwiseXor"]
COMPARE = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]
UNARY = ["Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
         "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
         "Atanh", "Tanh", "Relu", "Sigmoid", "Softsign", "Softplus", "Not", "BitwiseNot",
         "Identity", "Mish"]
VARIADIC = ["Sum", "Mean", "Max", "Min"]
# op -> attribute defaults
ACTIVATIONS = {
    "LeakyRelu": {"alpha": 0.01},
    "Elu": {"alpha": 1.0},
    "Celu": {"alpha": 1.0},
    "Selu": {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
    "HardSwish": {},
    "ThresholdedRelu": {"alpha": 1.0},
    "Shrink": {"bias": 0.0, "lambd": 0.5},
    "Gelu": {"approximate": "none"},
}


def _emit_map(cx, inputs, dtype=None, attrs=None):
    present = [v for v in inputs if v is not None]
    shape = broadcast(*[v.shape for v in present])
    return [cx.emit1(cx.node.op_type, inputs, shape, dtype or present[0].dtype, attrs)]


def _check_same_dtype(cx, inputs):
    dts = {v.dtype for v in inputs if v is not None}
    if len(dts) > 1:
        raise CompileError(f"inputs have different dtypes {sorted(map(str, dts))}")


def _binary(cx, inputs):
    if cx.node.op_type != "Pow":
        _check_same_dtype(cx, inputs)
    elif _squares(inputs):
        # x ** 2 (a magnitude, a variance) is x * x, exactly as a correctly rounded pow
        # gives it, and a vector multiply instead of a call per element
        return [cx.emit1("Mul", [inputs[0], inputs[0]], inputs[0].shape, inputs[0].dtype, {})]
    return _emit_map(cx, inputs)


def _squares(inputs) -> bool:
    """Whether a Pow's exponent is the constant 2 and leaves the base's shape as it is."""
    base, exponent = inputs
    return (base.dtype.kind == "f" and exponent.is_const and exponent.const.size == 1
            and float(exponent.const.reshape(-1)[0]) == 2.0
            and tuple(broadcast(base.shape, exponent.shape)) == tuple(base.shape))


def _compare(cx, inputs):
    _check_same_dtype(cx, inputs)
    return _emit_map(cx, inputs, np.bool_)


def _unary(cx, inputs):
    return _emit_map(cx, inputs[:1])


def _activation(cx, inputs):
    attrs = {k: cx.attr(k, v) for k, v in ACTIVATIONS[cx.node.op_type].items()}
    return _emit_map(cx, inputs[:1], attrs=attrs)


for _op in BINARY:
    converter(_op, 1)(_binary)
for _op in COMPARE:
    converter(_op, 1)(_compare)
for _op in UNARY + VARIADIC:
    converter(_op, 1)(_unary if _op in UNARY else _binary)
for _op in ACTIVATIONS:
    converter(_op, 1)(_activation)


@converter("Mod", 10)
def mod(cx, inputs):
    _check_same_dtype(cx, inputs)
    fmod = cx.attr("fmod", 0)  # 0: the result takes the divisor's sign, as Python's %
    return _emit_map(cx, inputs, attrs={"fmod": fmod})


@converter("BitShift", 11)
def bitshift(cx, inputs):
    return _emit_map(cx, inputs, attrs={"direction": cx.attr("direction")})


@converter("PRelu", 1)
def prelu(cx, inputs):
    x, slope = inputs
    if len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1] != 1:
        # opset < 7 used channel-wise slopes without unidirectional broadcasting
        slope = cx.emit1("Reshape", [slope], (slope.shape[0],) + (1,) * (len(x.shape) - 2),
                         slope.dtype) if not slope.is_const else cx.const(
            slope.const.reshape((-1,) + (1,) * (len(x.shape) - 2)))
    return _emit_map(cx, [x, slope])


@converter("Where", 9)
def where(cx, inputs):
    c, a, b = inputs
    shape = broadcast(c.shape, a.shape, b.shape)
    return [cx.emit1("Where", inputs, shape, a.dtype)]


@converter("IsNaN", 9)
def isnan(cx, inputs):
    return _emit_map(cx, inputs, np.bool_)


@converter("IsInf", 10)
def isinf(cx, inputs):
    attrs = {"detect_positive": cx.attr("detect_positive", 1),
             "detect_negative": cx.attr("detect_negative", 1)}
    return _emit_map(cx, inputs, np.bool_, attrs)


@converter("Cast", 1)
def cast_op(cx, inputs):
    from ..onnx import np_dtype
    to = np_dtype(cx.attr("to"))
    if inputs[0].dtype == to:
        return [inputs[0]]
    return [cx.emit1("Cast", inputs[:1], inputs[0].shape, to, {"to": to.name})]


@converter("CastLike", 15)
def cast_like(cx, inputs):
    x, like = inputs
    if x.dtype == like.dtype:
        return [x]
    return [cx.emit1("Cast", [x], x.shape, like.dtype, {"to": like.dtype.name})]


@converter("Clip", 1)
def clip_v1(cx, inputs):
    x = inputs[0]
    lo = cx.const(np.array(cx.attr("min", -np.inf), x.dtype))
    hi = cx.const(np.array(cx.attr("max", np.inf), x.dtype))
    return [cx.emit1("Clip", [x, lo, hi], x.shape, x.dtype)]


@converter("Clip", 11)
def clip_v11(cx, inputs):
    x = inputs[0]
    bounds = [v for v in inputs[1:3]] + [None] * (3 - len(inputs))
    return [cx.emit1("Clip", [x, *bounds[:2]], x.shape, x.dtype)]


@converter("Dropout", 1)
def dropout(cx, inputs):
    x = inputs[0]
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and (
            not training.is_const or bool(training.const.ravel()[0])):
        raise CompileError("Dropout in training mode drops random elements; Tensorforge compiles "
                           "inference graphs: export the model in eval mode (training_mode=False)")
    outs = [x]
    if len(cx.node.output) > 1 and cx.node.output[1]:
        outs.append(cx.const(np.ones(x.shape, np.bool_), "dropout_mask"))
    return outs
