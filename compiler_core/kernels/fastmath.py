"""Vectorisable float32 transcendentals: polynomials, selects and bit tricks only, so LLVM
turns them into SIMD code (libm calls stay scalar). Errors measured against float64
numpy by tests/compiler_core/test_fastmath.py over the ranges stated:

    exp      max rel err 7.3e-8 on [-87, 88]      (inf above 88.72; ~1e-38 below -87.3)
    log      max rel err 2.0e-7 on [1e-30, 1e30]  (NaN below 0, -inf at 0, inf at inf)
    tanh     max abs err 1.0e-7 on [-20, 20]
    sigmoid  max abs err 1.0e-7 on [-30, 30]  (1 / (1 + exp(-x)) with the exp above)
    erf      max abs err 3.5e-7 on [-6, 6]
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.loops import Expr, as_expr, bitcast, call, cast, chain_add, maximum, minimum, select

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


def _c(v) -> Expr:
    return as_expr(float(v), F32)


def _horner(x: Expr, coeffs) -> Expr:
    """coeffs from the highest power down to the constant."""
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + _c(c)
    return acc


ROUNDING_SHIFT = 1.5 * 2.0**23
# e^r on [-ln2/2, ln2/2]: 1 + r + our minimax fit (relative error 3e-9) of the rest, one
# degree below the Taylor series that it replaced at the same error
EXP_P = [0.0013809949159622192, 0.00836880225688219, 0.04166846722364426, 0.1666651964187622,
         0.4999999403953552, 1.0, 1.0]


def exp(x: Expr, at_most_zero: bool = False) -> Expr:
    """`at_most_zero`: x is never above 0 (a softmax's value less its row's max), so
    neither the clamp from above nor the overflow to inf is needed."""
    xc = maximum(x if at_most_zero else minimum(x, _c(88.7)), _c(-87.3))
    # n = x / ln2 rounded, by adding and taking away 1.5 * 2^23, where the float's last bit
    # is worth 1; the sum's low bits are n's, ready for 2^n's exponent field. One FMA in
    # place of a multiply, a round and a conversion; chain_add keeps LLVM from folding
    # the add and the subtraction away.
    shifted = chain_add(xc * _c(1 / math.log(2)), _c(ROUNDING_SHIFT))
    n = chain_add(shifted, _c(-ROUNDING_SHIFT))
    # ln2 split hi + lo, in additions LLVM may not reassociate: with reassoc it summed the
    # two into one float32 ln2, whose error times n reached 2.4e-7 of e^x at |x| = 87
    r = chain_add(chain_add(xc, n * _c(-0.693145751953125)), n * _c(-1.4286068202862268e-06))
    p = _horner(r, EXP_P)
    # 2^n: n + 127 in the exponent field, where shifting the sum's bits puts n's
    pow2 = bitcast(bitcast(shifted, I32) * as_expr(1 << 23, I32) + as_expr(127 << 23, I32), F32)
    return p * pow2 if at_most_zero else select(x > _c(88.72), _c(math.inf), p * pow2)


def log(x: Expr) -> Expr:
    tiny = x < _c(1.1754944e-38)  # denormals: scale up first so the exponent field is right
    xs = select(tiny, x * _c(2.0**23), x)
    bits = bitcast(xs, I32)
    e = bits.__floordiv__(as_expr(1 << 23, I32)) - as_expr(127, I32)
    m = bitcast((bits & as_expr((1 << 23) - 1, I32)) | as_expr(127 << 23, I32), F32)  # [1, 2)
    big = m > _c(math.sqrt(2))
    m = select(big, m * _c(0.5), m)
    ef = cast(e, F32) + select(big, _c(1), _c(0)) - select(tiny, _c(23), _c(0))
    s = (m - _c(1)) / (m + _c(1))
    s2 = s * s
    log_m = _c(2) * s * _horner(s2, [1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3, 1])
    y = ef * _c(math.log(2)) + log_m
    y = select(x.eq(_c(math.inf)), _c(math.inf), y)
    y = select(x.eq(_c(0)), _c(-math.inf), y)
    return select(x < _c(0), _c(math.nan), select(call("isnan", x), x, y))


def tanh(x: Expr) -> Expr:
    ax = call("abs", x)
    e = exp(minimum(_c(2) * ax, _c(80)))
    big = _c(1) - _c(2) / (e + _c(1))
    x2 = x * x
    small = x * _horner(x2, [-17 / 315, 2 / 15, -1 / 3, 1])  # avoids 1 - (1 - tiny)
    return select(ax < _c(0.125), small, select(x < _c(0), -big, big))


# erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (and +-1 beyond, where erf is within 2e-8 of it):
# our weighted least-squares fit of degrees 5 over 5 in x^2. One division and ten FMAs
# where the Abramowitz-Stegun form took a division and an exp: the Erf GELU epilogue of a
# BERT FFN GEMM (128 x 384 -> 1536) went 1.54 -> 1.40 ms (znver4, 1 thread)
ERF_P = [1.981535206141416e-06, 0.00028715163352899253, 0.003964685834944248,
         0.05334700271487236, 0.19534146785736084, 1.128378987312317]
ERF_Q = [3.750403629965149e-05, 0.0012068927753716707, 0.01536636147648096,
         0.11610080301761627, 0.5064483284950256, 1.0]


def erf(x: Expr) -> Expr:
    xc = select(x > _c(4), _c(4), select(x < _c(-4), _c(-4), x))  # NaN stays NaN
    z = xc * xc
    y = xc * _horner(z, ERF_P) / _horner(z, ERF_Q)
    return select(y > _c(1), _c(1), select(y < _c(-1), _c(-1), y))  # the fit ends 1e-7 above


FAST = {"exp": exp, "log": log, "tanh": tanh, "erf": erf}


def math_call(op: str, x: Expr) -> Expr:
    """call(op, x), through a vectorisable approximation when one exists for x's dtype."""
    if x.dtype == F32 and op in FAST:
        return FAST[op](x)
    return call(op, x)
