"""Elementwise ops: one scalar function per op, one broadcasting loop nest for all of them.

`SCALAR[op](attrs, *args) -> Expr` is also what operator fusion composes.
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np

from ..ir import loops as L
from ..ir.loops import as_expr, broadcast_index, call, cast, maximum, minimum, select
from .fastmath import math_call
from .registry import lowering

SCALAR: dict = {}


def scalar(*ops):
    def register(fn):
        for op in ops:
            SCALAR[op] = fn
        return fn
    return register


def _c(x, like):
    return as_expr(x, like.dtype)


# -- arithmetic
for _op, _fn in {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}.items():
    SCALAR[_op] = (lambda f: lambda attrs, a, b: L.binop(f, a, b))(_fn)


SCALAR["Sum"] = lambda attrs, *xs: functools.reduce(operator.add, xs)
SCALAR["Mean"] = lambda attrs, *xs: SCALAR["Sum"](attrs, *xs) / _c(len(xs), xs[0])
SCALAR["Max"] = lambda attrs, *xs: functools.reduce(maximum, xs)
SCALAR["Min"] = lambda attrs, *xs: functools.reduce(minimum, xs)


@scalar("Pow")
def _pow(attrs, a, b):
    work = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
    r = L.binop("pow", cast(a, work), cast(b, work))
    if a.dtype.kind != "f":
        r = call("round", r)
    return cast(r, a.dtype)


@scalar("Mod")
def _mod(attrs, a, b):
    return L.binop("fmod" if attrs.get("fmod", 0) else "mod", a, b)


@scalar("BitShift")
def _bitshift(attrs, a, b):
    # Shifting by the width or more, or by a negative amount, is undefined in LLVM. ONNX
    # shifts every bit out: 0, except that an arithmetic right shift leaves the sign.
    bits = a.dtype.itemsize * 8
    in_range = L.logical_and(b >= _c(0, b), b < _c(bits, b))
    if attrs["direction"] == "LEFT":
        return select(in_range, L.binop("shl", a, select(in_range, b, _c(0, b))), _c(0, a))
    if a.dtype.kind == "u":
        return select(in_range, L.binop("shr", a, select(in_range, b, _c(0, b))), _c(0, a))
    return L.binop("shr", a, select(in_range, b, _c(bits - 1, b)))


SCALAR["BitwiseAnd"] = SCALAR["And"] = lambda attrs, a, b: a & b
SCALAR["BitwiseOr"] = SCALAR["Or"] = lambda attrs, a, b: a | b
SCALAR["BitwiseXor"] = SCALAR["Xor"] = lambda attrs, a, b: a ^ b
SCALAR["BitwiseNot"] = SCALAR["Not"] = lambda attrs, a: ~a

# -- comparisons
SCALAR["Equal"] = lambda attrs, a, b: a.eq(b)
SCALAR["Greater"] = lambda attrs, a, b: a > b
SCALAR["GreaterOrEqual"] = lambda attrs, a, b: a >= b
SCALAR["Less"] = lambda attrs, a, b: a < b
SCALAR["LessOrEqual"] = lambda attrs, a, b: a <= b
SCALAR["Where"] = lambda attrs, c, a, b: select(c, a, b)

# -- unary math
for _op, _fn in {"Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Sin": "sin", "Cos": "cos",
                 "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
                 "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
                 "Tanh": "tanh", "Floor": "floor", "Ceil": "ceil", "Round": "round",
                 "Erf": "erf", "Abs": "abs", "Sign": "sign", "Neg": "neg", "IsNaN": "isnan"}.items():
    SCALAR[_op] = (lambda f: lambda attrs, a: math_call(f, a))(_fn)


@scalar("IsInf")
def _isinf(attrs, a):
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if pos and neg:
        return call("isinf", a)
    if pos:
        return call("isposinf", a)
    if neg:
        return call("isneginf", a)
    return as_expr(False, np.bool_)


SCALAR["Reciprocal"] = lambda attrs, a: _c(1, a) / a
SCALAR["Identity"] = lambda attrs, a: a
SCALAR["Copy"] = lambda attrs, a: a
SCALAR["Cast"] = lambda attrs, a: _cast(a, np.dtype(attrs["to"]))


def _cast(a, to):
    # float -> int goes through truncation; NaN/overflow are undefined in ONNX as in C
    return cast(a, to)


# -- activations
SCALAR["Relu"] = lambda attrs, a: maximum(a, _c(0, a))
SCALAR["LeakyRelu"] = lambda attrs, a: select(a < _c(0, a), a * _c(attrs["alpha"], a), a)
SCALAR["PRelu"] = lambda attrs, a, slope: select(a < _c(0, a), a * slope, a)
SCALAR["ThresholdedRelu"] = lambda attrs, a: select(a > _c(attrs["alpha"], a), a, _c(0, a))


@scalar("Elu")
def _elu(attrs, a):
    return select(a < _c(0, a), _c(attrs["alpha"], a) * (math_call("exp", a) - _c(1, a)), a)


@scalar("Celu")
def _celu(attrs, a):
    alpha = _c(attrs["alpha"], a)
    neg = alpha * (math_call("exp", a / alpha) - _c(1, a))
    return maximum(a, _c(0, a)) + minimum(_c(0, a), neg)


@scalar("Selu")
def _selu(attrs, a):
    alpha, gamma = _c(attrs["alpha"], a), _c(attrs["gamma"], a)
    return gamma * select(a > _c(0, a), a, alpha * (math_call("exp", a) - _c(1, a)))


@scalar("Sigmoid")
def _sigmoid(attrs, a):
    return _c(1, a) / (_c(1, a) + math_call("exp", -a))


@scalar("HardSigmoid")
def _hard_sigmoid(attrs, a):
    y = _c(attrs["alpha"], a) * a + _c(attrs["beta"], a)
    return maximum(_c(0, a), minimum(_c(1, a), y))


@scalar("HardSwish")
def _hard_swish(attrs, a):
    return a * _hard_sigmoid({"alpha": 1 / 6, "beta": 0.5}, a)


@scalar("Softplus")
def _softplus(attrs, a):
    # log1p(exp(x)) overflows for large x, where the answer is x itself
    safe = math_call("log", _c(1, a) + math_call("exp", minimum(a, _c(20, a))))
    return select(a > _c(20, a), a, safe)


SCALAR["Softsign"] = lambda attrs, a: a / (_c(1, a) + call("abs", a))
SCALAR["Mish"] = lambda attrs, a: a * math_call("tanh", _softplus(attrs, a))


@scalar("Gelu")
def _gelu(attrs, a):
    half = _c(0.5, a)
    if attrs.get("approximate", "none") == "tanh":
        inner = _c(math.sqrt(2 / math.pi), a) * (a + _c(0.044715, a) * a * a * a)
        return half * a * (_c(1, a) + math_call("tanh", inner))
    return half * a * (_c(1, a) + math_call("erf", a * _c(1 / math.sqrt(2), a)))


@scalar("Clip")
def _clip(attrs, a, lo=None, hi=None):
    if lo is not None:
        a = maximum(a, lo)
    if hi is not None:
        a = minimum(a, hi)
    return a


@scalar("Shrink")
def _shrink(attrs, a):
    lambd, bias = _c(attrs["lambd"], a), _c(attrs["bias"], a)
    return select(a < -lambd, a + bias, select(a > lambd, a - bias, _c(0, a)))


@scalar("QuantizeLinear")
def _quantize(attrs, x, scale, zp=None):
    to = np.dtype(attrs["to"])
    f32 = np.dtype(np.float32)
    q = call("round", cast(x, f32) / cast(scale, f32))
    if zp is not None:
        q = q + cast(zp, f32)
    info = np.iinfo(to)  # saturate: quantized values never wrap around
    return cast(maximum(_c(info.min, q), minimum(q, _c(info.max, q))), to)


@scalar("DequantizeLinear")
def _dequantize(attrs, x, scale, zp=None):
    f32 = np.dtype(np.float32)
    v = cast(x, f32) if zp is None else cast(x, f32) - cast(zp, f32)
    return cast(v * cast(scale, f32), scale.dtype)


PARALLEL_MIN_ELEMENTS = 1 << 15  # below this, waking threads costs more than it saves


def loop_kind(size: int, extent: int = 2) -> str:
    """The kind of a kernel's outermost loop (of `extent` iterations) over `size` elements."""
    return "parallel" if size >= PARALLEL_MIN_ELEMENTS and extent > 1 else "serial"


def scalar_expr(op: str, attrs: dict, args: list) -> L.Expr:
    return SCALAR[op](attrs, *args)


def run_program(program: list, inputs) -> L.Expr:
    """The value of a Fused node's program (passes/fuse_elementwise.py) given its inputs'
    values (`inputs[k]` for ("input", k))."""
    values: list = []
    for op, attrs, args in program:
        vals = [None if a is None else inputs[a[1]] if a[0] == "input" else values[a[1]]
                for a in args]
        while vals and vals[-1] is None:
            vals.pop()
        values.append(scalar_expr(op, attrs, vals))
    return values[-1]


@lowering("Fused")
def lower_fused(node, kb, ins, outs):
    _each_element(kb, ins, outs[0], lambda values: run_program(node.attrs["program"], values))


@lowering(*SCALAR)
def lower_elementwise(node, kb, ins, outs):
    def value(args):
        args = list(args)
        while args and args[-1] is None:
            args.pop()
        return scalar_expr(node.op, node.attrs, args)
    _each_element(kb, ins, outs[0], value)


# The last axis a vector of its own, where it is a vector's worth of floats or less (the
# blocked layout's channel blocks): left to LLVM, its loop of 16 was unrolled first and the
# next one vectorized across positions, every operand gathered lane by lane. AMD EPYC (LLVM:
# znver4), 1 thread, alone: DenseNet-121's batch norm and Relu over 96 channels at 56x56 in
# NCHW16c 176 -> 30 us; whole models new/old, interleaved, both orders, 1 | 2 threads:
# DenseNet-121 0.930-0.937 | 0.948-0.970, YOLOv8n-320 0.985-0.994 at 1 (Inception v2,
# MobileNetV3 unchanged).
VECTOR_ROW_LANES = (4, 8, 16)


def _each_element(kb, ins: list, out, value) -> None:
    """out[idx] = value([each input at idx, broadcast]) (None for absent inputs)."""
    lanes = _vector_rows(kb, ins, out)
    if not lanes:
        with kb.loops(out.shape, kind=loop_kind(out.size)) as idx:
            kb.store(out, idx, value([None if b is None else
                                      b[broadcast_index(idx, b.shape, out.shape)] for b in ins]))
        return
    with kb.loops(out.shape[:-1], kind=loop_kind(out.size)) as idx:
        at = (*idx, L.Const(0))
        vectors = [None if b is None else _row_of(b, broadcast_index(at, b.shape, out.shape),
                                                  lanes) for b in ins]
        kb.store_flat(out, out.offset(at), value(vectors))


def _vector_rows(kb, ins: list, out) -> int:
    """The last axis's length where each row of it is one vector (float32 throughout, every
    input's last axis that long or broadcast along it), else 0."""
    lanes = out.shape[-1] if len(out.shape) >= 2 else 0
    f32 = np.dtype(np.float32)
    if lanes not in VECTOR_ROW_LANES or lanes > kb.lanes(f32) or out.dtype != f32:
        return 0
    if any(b is not None and (b.dtype != f32 or (b.shape and b.shape[-1] not in (1, lanes)))
           for b in ins):
        return 0
    return lanes


def _row_of(b, idx: tuple, lanes: int):
    if b.shape and b.shape[-1] == lanes:
        return b.vec(b.offset(idx), lanes)
    return L.broadcast(b[idx], lanes)
