"""Normalisation: BatchNormalization (inference), Instance-, Layer- and GroupNormalization, LRN.

Instance/Layer/Group normalisation all standardise contiguous "rows" of the input (one per
(n, c), per leading index, per (n, group)) and differ only in which scale/bias element
multiplies each position; `_standardize_rows` does the shared part in two passes (mean,
then variance of the differences, which is more accurate than E[x^2] - E[x]^2).
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import (Get, as_expr, binop, broadcast_index, call, cast, row_major_strides,
                        select)
from .elementwise import loop_kind
from .registry import lowering


def _work_dtype(dtype) -> np.dtype:
    """float16 statistics are accumulated in float32 (ONNX's stash_type default)."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def _flat(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _standardize_rows(kb, x, y, rows, inner, eps, affine, stats=None):
    """y[row, i] = affine(row, i, (x - mean) * inv_std) for rows of shape `inner`.

    affine(row_idx, inner_idx, value) -> Expr in the work dtype; stats(row_idx, mean, inv)
    stores the optional Mean / InvStdDev outputs.
    """
    work = _work_dtype(x.dtype)
    length = _flat(inner)
    with kb.loops(rows, kind=loop_kind(x.size)) as r:
        base = sum((ri * s for ri, s in zip(r, _row_strides(rows, length))), as_expr(0))
        total = kb.local(work, 0.0, "sum")
        with kb.loop(length, name="l") as i:
            kb.set(total, Get(total) + cast(x.flat(base + i), work))
        mean = kb.local(work, Get(total) / as_expr(float(length), work), "mean")
        sq = kb.local(work, 0.0, "sq")
        with kb.loop(length, name="l") as i:
            d = cast(x.flat(base + i), work) - Get(mean)
            kb.set(sq, Get(sq) + d * d)
        var = Get(sq) / as_expr(float(length), work)
        inv = kb.local(work, as_expr(1.0, work) / call("sqrt", var + as_expr(eps, work)), "inv")
        with kb.loops(inner) as idx:
            pos = base + sum((j * s for j, s in zip(idx, _row_strides(inner, 1))), as_expr(0))
            value = (cast(x.flat(pos), work) - Get(mean)) * Get(inv)
            kb.store_flat(y, pos, cast(affine(r, idx, value), y.dtype))
        if stats is not None:
            stats(r, Get(mean), Get(inv))


def _row_strides(shape, unit) -> list[int]:
    return [s * unit for s in row_major_strides(shape)]


def _param(buf, index, work):
    return cast(buf[index], work)


@lowering("InstanceNormalization")
def lower_instance_norm(node, kb, ins, outs):
    x, scale, bias = ins
    work = _work_dtype(x.dtype)

    def affine(r, idx, v):
        c = r[1]
        return v * _param(scale, (c,), work) + _param(bias, (c,), work)

    _standardize_rows(kb, x, outs[0], x.shape[:2], x.shape[2:], node.attrs["epsilon"], affine)


@lowering("GroupNormalization")
def lower_group_norm(node, kb, ins, outs):
    """scale/bias are per channel (opset 21) or per group (opset 18)."""
    x, scale, bias = ins
    groups = node.attrs["num_groups"]
    per_group = x.shape[1] // groups
    work = _work_dtype(x.dtype)

    def affine(r, idx, v):
        c = r[1] if scale.shape[0] == groups != x.shape[1] else r[1] * per_group + idx[0]
        return v * _param(scale, (c,), work) + _param(bias, (c,), work)

    inner = (per_group, *x.shape[2:])
    _standardize_rows(kb, x, outs[0], (x.shape[0], groups), inner, node.attrs["epsilon"], affine)


@lowering("LayerNormalization")
def lower_layer_norm(node, kb, ins, outs):
    x, scale, bias = (ins + [None])[:3]
    axis = node.attrs["axis"]
    rows, inner = x.shape[:axis], x.shape[axis:]
    work = _work_dtype(x.dtype)

    def affine(r, idx, v):
        v = v * _param(scale, broadcast_index(idx, scale.shape, inner), work)
        if bias is not None:
            v = v + _param(bias, broadcast_index(idx, bias.shape, inner), work)
        return v

    def stats(r, mean, inv):
        flat = sum((ri * s for ri, s in zip(r, _row_strides(rows, 1))), as_expr(0))
        for out, value in zip(outs[1:], (mean, inv)):
            if out is not None:
                kb.store_flat(out, flat, cast(value, out.dtype))

    _standardize_rows(kb, x, outs[0], rows, inner, node.attrs["epsilon"], affine,
                      stats if len(outs) > 1 else None)


@lowering("BatchNormalization")
def lower_batch_norm(node, kb, ins, outs):
    """Inference form: y = (x - mean) / sqrt(var + eps) * scale + bias, per channel.

    Parameters are (C,) or, for opset < 9 with spatial=0, shaped like x without its batch dim.
    """
    x, scale, bias, mean, var = ins
    y = outs[0]
    work = _work_dtype(x.dtype)
    eps = as_expr(node.attrs["epsilon"], work)
    per_channel = len(scale.shape) == 1
    inner = _flat(x.shape[2:])
    with kb.loops(x.shape[:2], kind=loop_kind(x.size)) as (n, c):
        if per_channel:
            std = call("sqrt", _param(var, (c,), work) + eps)
            a = kb.local(work, _param(scale, (c,), work) / std)
            b = kb.local(work, _param(bias, (c,), work) - _param(mean, (c,), work) * Get(a))
        with kb.loop(inner, name="s") as s:
            pos = (n * x.shape[1] + c) * inner + s
            if per_channel:
                value = cast(x.flat(pos), work) * Get(a) + Get(b)
            else:
                p = c * inner + s
                value = ((cast(x.flat(pos), work) - cast(mean.flat(p), work))
                         / call("sqrt", cast(var.flat(p), work) + eps)
                         * cast(scale.flat(p), work) + cast(bias.flat(p), work))
            kb.store_flat(y, pos, cast(value, y.dtype))


@lowering("BatchNormalizationTraining")
def lower_batch_norm_training(node, kb, ins, outs):
    """Per channel: batch mean and (population) variance over N and the spatial dims, y from
    them, and running stats = momentum * running + (1 - momentum) * batch."""
    x, scale, bias, mean, var = ins
    y, running = outs[0], outs[1:]
    work = _work_dtype(x.dtype)
    N, C = x.shape[:2]
    inner = _flat(x.shape[2:])
    count = as_expr(float(N * inner), work)
    eps, momentum = as_expr(node.attrs["epsilon"], work), node.attrs["momentum"]
    with kb.loop(C, name="c") as c:
        total = kb.local(work, 0.0, "sum")
        with kb.loops((N, inner)) as (n, s):
            kb.set(total, Get(total) + cast(x.flat((n * C + c) * inner + s), work))
        batch_mean = kb.local(work, Get(total) / count, "mean")
        sq = kb.local(work, 0.0, "sq")
        with kb.loops((N, inner)) as (n, s):
            d = cast(x.flat((n * C + c) * inner + s), work) - Get(batch_mean)
            kb.set(sq, Get(sq) + d * d)
        batch_var = kb.local(work, Get(sq) / count, "var")
        a = kb.local(work, _param(scale, (c,), work) / call("sqrt", Get(batch_var) + eps))
        b = kb.local(work, _param(bias, (c,), work) - Get(batch_mean) * Get(a))
        with kb.loops((N, inner)) as (n, s):
            pos = (n * C + c) * inner + s
            kb.store_flat(y, pos, cast(cast(x.flat(pos), work) * Get(a) + Get(b), y.dtype))
        for out, old, new in zip(running, (mean, var), (batch_mean, batch_var)):
            blended = (_param(old, (c,), work) * as_expr(momentum, work)
                       + Get(new) * as_expr(1.0 - momentum, work))
            kb.store(out, (c,), cast(blended, out.dtype))


@lowering("LRN")
def lower_lrn(node, kb, ins, outs):
    """y = x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta.

    One pass per (image, channel) row, the items of a parallel loop: each position sums
    its window's squares straight from the window's rows (channels outside the tensor add
    0), then divides. Summing into y row by row first, five passes over it for a window of
    5, took twice as long: AMD EPYC (LLVM: znver4), 1 thread, alone, 192 channels at 56x56
    523 -> 272 us (ONNX Runtime 15.7 ms); in their models, Inception v1's two LRNs 746 ->
    353 us, AlexNet's 408 -> 205.
    """
    x, y = ins[0], outs[0]
    size, alpha, beta, bias = (node.attrs[k] for k in ("size", "alpha", "beta", "bias"))
    N, C = x.shape[:2]
    inner = _flat(x.shape[2:])
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    dt = y.dtype
    zero = as_expr(0.0, dt)
    with kb.loops((N, C), kind=loop_kind(x.size)) as (n, c):
        window = [(ch, binop("max", binop("min", ch, as_expr(C - 1)), as_expr(0)))
                  for ch in (c + k for k in range(-before, after + 1))]
        with kb.loop(inner, name="s") as s:
            squares = None
            for ch, clamped in window:
                v = x.flat((n * C + clamped) * inner + s)
                term = select((ch >= 0) & (ch < C), v * v, zero)
                squares = term if squares is None else squares + term
            z = as_expr(bias, dt) + as_expr(alpha / size, dt) * squares
            at = (n * C + c) * inner + s
            kb.store_flat(y, at, x.flat(at) / _power(z, beta))


def _power(z, beta):
    """z ** beta; the common beta = 0.75 as sqrt(z) * sqrt(sqrt(z)), which vectorizes."""
    if beta == 0.75:
        r = call("sqrt", z)
        return r * call("sqrt", r)
    if beta == 0.5:
        return call("sqrt", z)
    if beta == 1.0:
        return z
    return binop("pow", z, as_expr(beta, z.dtype))
