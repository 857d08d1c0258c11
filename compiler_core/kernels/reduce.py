"""Reductions, ArgMax/ArgMin, TopK and the Softmax family.

Reduce* loop order: when some kept axes come after the last reduced axis, the partial
results of those trailing ("inner") axes are accumulated in the output itself, so the
innermost loop runs over contiguous memory in both tensors and LLVM vectorizes it.
Otherwise each output element gets a register accumulator and the innermost loop is a
contiguous horizontal reduction (vectorized thanks to the `reassoc` float flag).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir.loops import Const, Expr, as_expr, call, cast, maximum, minimum, reduce_lanes, select
from .fastmath import exp, math_call
from .elementwise import loop_kind
from .registry import lowering

# ---------------------------------------------------------------- Reduce*

@dataclass(frozen=True)
class Reducer:
    init: Callable[[np.dtype], object]     # identity of `combine`
    pre: Callable[[Expr], Expr]            # applied to every element
    combine: Callable[[Expr, Expr], Expr]
    post: Callable[[Expr, int], Expr]      # (accumulator, element count) -> result


def _lowest(dt):
    if dt.kind == "f":
        return -math.inf
    return False if dt == np.bool_ else np.iinfo(dt).min


def _highest(dt):
    if dt.kind == "f":
        return math.inf
    return True if dt == np.bool_ else np.iinfo(dt).max


def _add(a, b):
    return a + b


def _same(e, *_):
    return e


def _square(e):
    return e * e


REDUCERS = {
    "ReduceSum": Reducer(lambda dt: 0, _same, _add, _same),
    "ReduceMean": Reducer(lambda dt: 0, _same, _add, lambda acc, n: acc / as_expr(n, acc.dtype)),
    "ReduceMax": Reducer(_lowest, _same, maximum, _same),
    "ReduceMin": Reducer(_highest, _same, minimum, _same),
    "ReduceProd": Reducer(lambda dt: 1, _same, lambda a, b: a * b, _same),
    "ReduceL1": Reducer(lambda dt: 0, lambda e: call("abs", e), _add, _same),
    "ReduceL2": Reducer(lambda dt: 0, _square, _add, lambda acc, n: call("sqrt", acc)),
    "ReduceLogSum": Reducer(lambda dt: 0, _same, _add, lambda acc, n: math_call("log", acc)),
    "ReduceSumSquare": Reducer(lambda dt: 0, _square, _add, _same),
}


def accumulator_dtype(dt: np.dtype) -> np.dtype:
    """float16 sums lose too much precision; accumulate them in float32."""
    return np.dtype(np.float32) if dt == np.float16 else dt


def _output_index(full_idx, axes, keepdims):
    if keepdims:
        return tuple(Const(0) if d in axes else i for d, i in enumerate(full_idx))
    return tuple(i for d, i in enumerate(full_idx) if d not in axes)


def _merge(shape_rank, axes_idx: dict, rest: list) -> tuple:
    """Full index from the reduced axes' indices (by axis) and the others' in order."""
    rest = iter(rest)
    return tuple(axes_idx[d] if d in axes_idx else next(rest) for d in range(shape_rank))


@lowering("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def lower_reduce(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    axes, keepdims = node.attrs["axes"], node.attrs["keepdims"]
    inner = _trailing_kept_axes(len(x.shape), axes)
    inner_size = int(np.prod([x.shape[d] for d in inner], dtype=np.int64))
    if node.op == "ReduceLogSumExp":
        _reduce_log_sum_exp(kb, x, y, axes, keepdims)
    elif inner_size > 1 and accumulator_dtype(x.dtype) == x.dtype:
        _reduce_into_output(kb, REDUCERS[node.op], x, y, axes, keepdims, inner)
    else:
        _reduce_with_accumulator(kb, REDUCERS[node.op], x, y, axes, keepdims)


def _trailing_kept_axes(rank, axes) -> list[int]:
    last_reduced = max(axes, default=rank - 1)
    return list(range(last_reduced + 1, rank))


def _reduce_with_accumulator(kb, red: Reducer, x, y, axes, keepdims):
    acc_dt = accumulator_dtype(x.dtype)
    kept = [d for d in range(len(x.shape)) if d not in axes]
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    with kb.loops([x.shape[d] for d in kept], kind=loop_kind(x.size)) as kidx:
        acc = kb.local(acc_dt, red.init(acc_dt))
        with kb.loops([x.shape[d] for d in axes]) as ridx:
            full = _merge(len(x.shape), dict(zip(axes, ridx)), list(kidx))
            kb.set(acc, red.combine(kb.get(acc), red.pre(cast(x[full], acc_dt))))
        full = _merge(len(x.shape), {d: Const(0) for d in axes}, list(kidx))
        result = cast(red.post(kb.get(acc), count), y.dtype)
        kb.store(y, _output_index(full, axes, keepdims), result)


def _reduce_into_output(kb, red: Reducer, x, y, axes, keepdims, inner):
    outer = [d for d in range(len(x.shape)) if d not in axes and d not in inner]
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    first = {d: Const(0) for d in axes}
    with kb.loops([x.shape[d] for d in outer], kind=loop_kind(x.size)) as oidx:
        fixed = dict(zip(outer, oidx))
        with _inner_loops(kb, x, axes, keepdims, fixed | first) as (_, yi):
            kb.store(y, yi, as_expr(red.init(y.dtype), y.dtype))
        with kb.loops([x.shape[d] for d in axes]) as ridx, \
                _inner_loops(kb, x, axes, keepdims, fixed | dict(zip(axes, ridx))) as (xi, yi):
            kb.store(y, yi, red.combine(y[yi], red.pre(x[xi])))
        with _inner_loops(kb, x, axes, keepdims, fixed | first) as (_, yi):
            kb.store(y, yi, red.post(y[yi], count))


@contextlib.contextmanager
def _inner_loops(kb, x, axes, keepdims, fixed: dict):
    """Loops over the axes not in `fixed` (the trailing kept ones); yields the x and y index."""
    free = [d for d in range(len(x.shape)) if d not in fixed]
    with kb.loops([x.shape[d] for d in free]) as iidx:
        by_axis = fixed | dict(zip(free, iidx))
        full = tuple(by_axis[d] for d in range(len(x.shape)))
        yield full, _output_index(full, axes, keepdims)


def _reduce_log_sum_exp(kb, x, y, axes, keepdims):
    """log(sum(exp(x - m))) + m with m the largest finite element: exp never overflows."""
    acc_dt = accumulator_dtype(x.dtype)
    kept = [d for d in range(len(x.shape)) if d not in axes]
    with kb.loops([x.shape[d] for d in kept]) as kidx:
        m = kb.local(acc_dt, -math.inf)
        with kb.loops([x.shape[d] for d in axes]) as ridx:
            v = cast(x[_merge(len(x.shape), dict(zip(axes, ridx)), list(kidx))], acc_dt)
            kb.set(m, select(call("isinf", v), kb.get(m), maximum(kb.get(m), v)))
        shift = kb.local(acc_dt, select(call("isinf", kb.get(m)), as_expr(0, acc_dt), kb.get(m)))
        s = kb.local(acc_dt, 0)
        with kb.loops([x.shape[d] for d in axes]) as ridx:
            v = cast(x[_merge(len(x.shape), dict(zip(axes, ridx)), list(kidx))], acc_dt)
            kb.set(s, kb.get(s) + math_call("exp", v - kb.get(shift)))
        full = _merge(len(x.shape), {d: Const(0) for d in axes}, list(kidx))
        result = math_call("log", kb.get(s)) + kb.get(shift)
        kb.store(y, _output_index(full, axes, keepdims), cast(result, y.dtype))


# ---------------------------------------------------------------- ArgMax / ArgMin

def _insert_axis(idx, axis, i) -> tuple:
    return (*idx[:axis], i, *idx[axis:])


@lowering("ArgMax", "ArgMin")
def lower_arg_reduce(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    axis, keepdims = node.attrs["axis"], node.attrs["keepdims"]
    last = node.attrs["select_last_index"]
    rest = [n for d, n in enumerate(x.shape) if d != axis]
    with kb.loops(rest) as idx:
        best = kb.local(x.dtype, x[_insert_axis(idx, axis, Const(0))], "best")
        where = kb.local(np.int64, 0, "where")
        with kb.loop(x.shape[axis], start=1) as j:
            v = x[_insert_axis(idx, axis, j)]
            b = kb.get(best)
            if node.op == "ArgMax":
                wins = (v >= b) if last else (v > b)
            else:
                wins = (v <= b) if last else (v < b)
            with kb.if_(wins):
                kb.set(best, v)
                kb.set(where, j)
        out_idx = _insert_axis(idx, axis, Const(0)) if keepdims else idx
        kb.store(y, out_idx, kb.get(where))


# ---------------------------------------------------------------- TopK

@lowering("TopK")
def lower_topk(node, kb, ins, outs):
    """Insertion into a sorted list of k in each output row (stable: ties keep input order).

    An element is inserted only if it beats the current k-th best, so the common cost is one
    comparison per element; each insertion shifts at most k entries.
    """
    x, values, indices = ins[0], outs[0], outs[1]
    axis, k = node.attrs["axis"], node.attrs["k"]
    if k == 0:
        return

    def beats(a, b):
        return a > b if node.attrs["largest"] else a < b

    rest = [n for d, n in enumerate(x.shape) if d != axis]
    with kb.loops(rest) as idx:
        at = lambda p: _insert_axis(idx, axis, p)  # position p of this output row
        count = kb.local(np.int64, 0, "count")
        kth_best = kb.local(x.dtype, x[at(Const(0))], "kth_best")  # meaningful once count == k
        with kb.loop(x.shape[axis]) as j:
            v = kb.local(x.dtype, x[at(j)], "v")
            v = kb.get(v)
            with kb.if_((kb.get(count) < k) | beats(v, kb.get(kth_best))):
                pos = kb.local(np.int64, 0, "pos")
                with kb.loop(k) as p:
                    stays_ahead = (p < kb.get(count)) & ~beats(v, values[at(p)])
                    kb.set(pos, kb.get(pos) + select(stays_ahead, 1, 0))
                with kb.loop(k - 1) as r:
                    p = Const(k - 1) - r
                    with kb.if_(p > kb.get(pos)):
                        kb.store(values, at(p), values[at(p - 1)])
                        kb.store(indices, at(p), indices[at(p - 1)])
                kb.store(values, at(kb.get(pos)), v)
                kb.store(indices, at(kb.get(pos)), j)
                kb.set(count, minimum(kb.get(count) + 1, Const(k)))
                kb.set(kth_best, values[at(Const(k - 1))])


# ---------------------------------------------------------------- Softmax family

def _extent(shape, axis, coerce_2d):
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    if coerce_2d:
        return outer, int(np.prod(shape[axis:], dtype=np.int64)), 1
    return outer, shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))


@lowering("Softmax", "LogSoftmax")
def lower_softmax(node, kb, ins, outs):
    """Scratch outputs (per-column max and sum) are optional: other converters may emit a
    plain {"axis"} Softmax; without them a strided axis is handled one column at a time."""
    x, y = ins[0], outs[0]
    outer, n, inner = _extent(x.shape, node.attrs["axis"], node.attrs.get("coerce_2d", False))
    log = node.op == "LogSoftmax"
    with kb.loop(outer, kind=loop_kind(x.size, outer)) as o:
        if inner > 1 and len(outs) == 3:
            _softmax_columns(kb, x, y, outs[1], outs[2], o * n * inner, n, inner, log)
        elif inner == 1:
            normalise_row(kb, x, y, o * n, n, log)
        else:
            with kb.loop(inner) as i:
                _softmax_row(kb, x, y, o * n * inner + i, n, inner, log)


# Running maxima in a softmax row's max, so that each vmaxps need not wait for the one before
MAX_CHAINS = 4


def normalise_row(kb, x, y, base, n, log, inverse_sum_at=None):
    """Softmax (or LogSoftmax, `log`) of the contiguous row of n elements at `base` of x into
    the same place of y. A softmax's y may be x itself: each element is read before it is
    written (a LogSoftmax's vector row is not: it keeps its tail's exps in y). With
    `inverse_sum_at` (a buffer and a flat index), a softmax's row keeps its exps and 1 / their
    sum goes there: whoever reads the row divides (passes/defer_softmax_division.py)."""
    if x.dtype == y.dtype == np.float32 and kb.lanes(x.dtype) > 1:
        _softmax_vector_row(kb, x, y, base, n, log, inverse_sum_at)
    else:
        _softmax_row(kb, x, y, base, n, 1, log, inverse_sum_at)


def _softmax_vector_row(kb, x, y, base, n, log, inverse_sum_at=None):
    """One contiguous float32 row in whole vectors, the last one masked. Left to LLVM, a
    short row (a classifier's 29 classes) ran its exps in the scalar remainder of a vector
    loop that is 4 vectors wide, and every row's max went through maximum()'s NaN and
    signed-zero handling."""
    lanes = kb.lanes(x.dtype)
    whole, tail = divmod(n, lanes)
    tail_at = base + whole * lanes
    chunk = lambda c: x.vec(base + c * lanes, lanes)

    # The row's max only keeps exp() in range: it may pass over NaNs (the sum of exps
    # does not, so a NaN still fills its row), so it is one compare and select per vector,
    # and its lanes are never NaN. MAX_CHAINS running maxima, since one waits for the
    # previous vector's.
    larger = lambda a, b: select(a > b, a, b)
    chains = max(1, min(MAX_CHAINS, whole))
    tops = [kb.local(x.dtype, -math.inf, "max", lanes) for _ in range(chains)]
    with kb.loop(whole // chains, kind="scalar") as c:
        for j, top in enumerate(tops):
            kb.set(top, larger(chunk(c * chains + j), kb.get(top)))
    for c in range(whole - whole % chains, whole):
        kb.set(tops[0], larger(chunk(as_expr(c)), kb.get(tops[0])))
    if tail and whole:  # max does not mind the overlap of the row's last whole vector
        kb.set(tops[-1], larger(x.vec(base + n - lanes, lanes), kb.get(tops[-1])))
    top = kb.get(tops[0])
    for other in tops[1:]:
        top = larger(top, kb.get(other))
    m = kb.local(x.dtype, reduce_lanes("maxnum", top), "max")
    if not whole:
        with kb.loop(tail) as a:
            kb.set(m, larger(x.flat(tail_at + a), kb.get(m)))

    total = kb.local(x.dtype, 0, "sum", lanes)
    with kb.loop(whole, kind="scalar") as c:
        e = kb.local(x.dtype, exp(chunk(c) - kb.get(m), at_most_zero=True), "e", lanes)
        if not log:
            kb.store(y, base + c * lanes, kb.get(e))
        kb.set(total, kb.get(total) + kb.get(e))
    if tail:  # y holds the tail's exps, read back masked: lanes past the row add 0
        e = exp(x.vec(tail_at, lanes, valid=tail) - kb.get(m), at_most_zero=True)
        kb.store(y, tail_at, e, valid=tail)
        kb.set(total, kb.get(total) + y.vec(tail_at, lanes, valid=tail))
    s = reduce_lanes("add", kb.get(total))

    if log:
        shift = kb.local(x.dtype, kb.get(m) + math_call("log", s), "shift")
        row = lambda at, valid=None: x.vec(at, lanes, valid) - kb.get(shift)
    else:
        scale = kb.local(x.dtype, as_expr(1, x.dtype) / s, "scale")
        if inverse_sum_at is not None:
            kb.store_flat(*inverse_sum_at, kb.get(scale))
            return
        row = lambda at, valid=None: y.vec(at, lanes, valid) * kb.get(scale)
    with kb.loop(whole, kind="scalar") as c:
        kb.store(y, base + c * lanes, row(base + c * lanes))
    if tail:
        kb.store(y, tail_at, row(tail_at, tail), valid=tail)


def _softmax_row(kb, x, y, base, n, stride, log, inverse_sum_at=None):
    """One row of n elements at base, base + stride, ..."""
    dt = accumulator_dtype(x.dtype)
    at = lambda a: base + a * stride
    load = lambda a: cast(x.flat(at(a)), dt)
    m = kb.local(dt, -math.inf, "max")
    with kb.loop(n) as a:
        kb.set(m, maximum(kb.get(m), load(a)))
    s = kb.local(dt, 0, "sum")
    with kb.loop(n) as a:
        e = math_call("exp", load(a) - kb.get(m))
        if not log:
            kb.store(y, at(a), cast(e, y.dtype))
        kb.set(s, kb.get(s) + e)
    if log:
        shift = kb.local(dt, kb.get(m) + math_call("log", kb.get(s)), "shift")
        with kb.loop(n) as a:
            kb.store(y, at(a), cast(load(a) - kb.get(shift), y.dtype))
    else:
        scale = kb.local(dt, as_expr(1, dt) / kb.get(s), "scale")
        if inverse_sum_at is not None:
            kb.store_flat(*inverse_sum_at, cast(kb.get(scale), y.dtype))
            return
        with kb.loop(n) as a:
            kb.store(y, at(a), cast(cast(y.flat(at(a)), dt) * kb.get(scale), y.dtype))


def _softmax_columns(kb, x, y, m, s, base, n, inner, log):
    """Normalise along a strided axis: per-column max and sum live in the scratch rows m, s,
    and every loop runs over contiguous columns."""
    dt = m.dtype
    at = lambda a, i: base + a * inner + i
    with kb.loop(inner) as i:
        kb.store(m, i, as_expr(-math.inf, dt))
        kb.store(s, i, as_expr(0, dt))
    with kb.loop(n) as a, kb.loop(inner) as i:
        kb.store(m, i, maximum(m[i], cast(x.flat(at(a, i)), dt)))
    with kb.loop(n) as a, kb.loop(inner) as i:
        e = math_call("exp", cast(x.flat(at(a, i)), dt) - m[i])
        if not log:
            kb.store(y, at(a, i), cast(e, y.dtype))
        kb.store(s, i, s[i] + e)
    if log:
        with kb.loop(inner) as i:
            kb.store(m, i, m[i] + math_call("log", s[i]))
        with kb.loop(n) as a, kb.loop(inner) as i:
            kb.store(y, at(a, i), cast(cast(x.flat(at(a, i)), dt) - m[i], y.dtype))
    else:
        with kb.loop(inner) as i:
            kb.store(s, i, as_expr(1, dt) / s[i])
        with kb.loop(n) as a, kb.loop(inner) as i:
            kb.store(y, at(a, i), cast(cast(y.flat(at(a, i)), dt) * s[i], y.dtype))


@lowering("Hardmax")
def lower_hardmax(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    outer, n, inner = _extent(x.shape, node.attrs["axis"], node.attrs.get("coerce_2d", False))
    with kb.loop(outer) as o, kb.loop(inner) as i:
        at = lambda a: (o * n + a) * inner + i
        best = kb.local(x.dtype, x.flat(at(Const(0))), "best")
        where = kb.local(np.int64, 0, "where")
        with kb.loop(n, start=1) as a, kb.if_(x.flat(at(a)) > kb.get(best)):
            kb.set(best, x.flat(at(a)))
            kb.set(where, a)
        with kb.loop(n) as a:
            one = select(a.eq(kb.get(where)), as_expr(1, y.dtype), as_expr(0, y.dtype))
            kb.store(y, at(a), one)
