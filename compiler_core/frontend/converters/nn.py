"""Converters for neural-network ops: convolutions, matrix products, pooling, normalisation.

Convolutions are prepared here so their kernels stay simple (see kernels/conv.py): the
input is padded and split into stride phases by a `ConvPad` node, and the constant table
of tap offsets into that buffer is computed once at compile time. Pools read their input
as it is (RowPool, kernels/pool.py).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import CompileError
from ...kernels.conv import conv_tap_offsets, wide_size
from ...kernels.matmul import tile_columns
from ..limits import check_tensor
from ..registry import converter
from .common import broadcast, norm_axis, per_axis_ints


# ---------------------------------------------------------------- window geometry

def window_pads(cx, in_spatial, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) from `pads` or `auto_pad`."""
    rank = len(in_spatial)
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = per_axis_ints(cx.attr("pads"), 2 * rank, 0, "pads")
        if any(p < 0 for p in pads):
            raise CompileError(f"negative pads {pads} are not supported")
        return pads[:rank], pads[rank:]
    if auto == "VALID":
        return [0] * rank, [0] * rank
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise CompileError(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begin, end = [], []
    for n, k, s, d in zip(in_spatial, kernel, strides, dilations):
        total = max(0, (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin, end


def window_output(n, k, s, d, pb, pe, ceil_mode=False) -> int:
    span = n + pb + pe - ((k - 1) * d + 1)
    if span < 0:
        raise CompileError(f"the window ({k} taps, dilation {d}) is larger than the padded "
                           f"input ({n + pb + pe})")
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + pb:
        out -= 1  # the last window would start in the end padding
    return out


# ---------------------------------------------------------------- Conv

@converter("Conv", 1)
def conv(cx, inputs):
    x, w, b = (list(inputs) + [None, None])[:3]
    rank = len(x.shape) - 2
    if rank < 1 or len(w.shape) != rank + 2:
        raise CompileError(f"Conv needs an input of rank >= 3 and weights of the same rank, got "
                           f"{list(x.shape)} and {list(w.shape)}")
    group = int(cx.attr("group", 1))
    kernel = list(w.shape[2:])
    if cx.attr("kernel_shape") is not None and list(cx.attr("kernel_shape")) != kernel:
        raise CompileError(f"kernel_shape {cx.attr('kernel_shape')} disagrees with the weights' "
                           f"shape {list(w.shape)}")
    N, C = x.shape[:2]
    OC = w.shape[0]
    if C != w.shape[1] * group or OC % group:
        raise CompileError(f"input channels {C} and weights {list(w.shape)} do not fit "
                           f"group={group}")
    strides = per_axis_ints(cx.attr("strides"), rank, 1, "strides")
    dilations = per_axis_ints(cx.attr("dilations"), rank, 1, "dilations")
    pb, pe = window_pads(cx, x.shape[2:], kernel, strides, dilations)
    out = [window_output(*a) for a in zip(x.shape[2:], kernel, strides, dilations, pb, pe)]
    if direct_depthwise(x, w, group, strides, dilations):
        attrs = {"group": group, "strides": strides, "dilations": dilations,
                 "kernel_shape": kernel, "pads_begin": pb, "activation": None}
        return [cx.emit1("DepthwiseConv", [x, w, b], (N, OC, *out), x.dtype, attrs)]
    q_shape = phase_grid(x.shape[2:], strides, pb, pe)
    P = wide_size(out, q_shape)
    slack = 0
    if P != int(np.prod(out)) and needs_conv_pad(strides, pb, pe):
        # round the wide columns up to whole register tiles: the extra columns are garbage
        # like the other wide ones, and ConvPad leaves zeros after the input for them to read
        nr = tile_columns(OC // group, P)
        slack = -P % nr
    xq = conv_input(cx, x, strides, pb, pe, slack)
    q_shape = xq.shape[-rank:]
    koff = cx.const(conv_tap_offsets(C // group, kernel, dilations, strides, q_shape), "conv_taps")
    outs = [((N, OC, *out), x.dtype)]
    if P != int(np.prod(out)):
        outs.append(((N * OC, P + slack), x.dtype))  # scratch for the wide output, per image
    attrs = {"group": group, "strides": strides, "dilations": dilations, "kernel_shape": kernel,
             "pads_begin": pb, "pads_end": pe, "activation": None}
    names = [cx.node.output[0], "conv_wide"][:len(outs)]
    return cx.emit("Conv", [xq, w, b, koff], outs, attrs, names)[:1]


# Depthwise 2-D convs read the unpadded input directly (kernels/depthwise.py) instead of
# a ConvPad copy and an implicit GEMM of one row per group. Xeon Emerald Rapids (LLVM
# `emeraldrapids`, AVX-512), 1 thread, ConvPad + Conv -> DepthwiseConv, with HardSwish:
# 3x3 s1: 16 ch at 112x112 158 -> 61 us, 72 at 56x56 204 -> 90, 480 at 14x14 77 -> 37;
# 3x3 s2: 64 at 112x112 553 -> 142, 240 at 28x28 117 -> 27; 5x5 s1: 120 at 28x28 126 ->
# 127, 960 at 7x7 141 -> 82; 5x5 s2: 72 at 56x56 152 -> 114, 672 at 14x14 122 -> 83.
# Strides above 2, dilations and channel multipliers keep the generic path (our models
# have none) as do dtypes other than float32.
def direct_depthwise(x, w, group, strides, dilations) -> bool:
    return (len(x.shape) == 4 and group == x.shape[1] == w.shape[0] and w.shape[1] == 1
            and x.dtype == w.dtype == np.float32 and all(s in (1, 2) for s in strides)
            and all(d == 1 for d in dilations))


def needs_conv_pad(strides, pads_begin, pads_end) -> bool:
    return any(pads_begin) or any(pads_end) or any(s != 1 for s in strides)


def phase_grid(in_spatial, strides, pads_begin, pads_end) -> list[int]:
    """The q grid of each stride phase of the padded input."""
    return [math.ceil((n + a + b) / s)
            for n, a, b, s in zip(in_spatial, pads_begin, pads_end, strides)]


def conv_input(cx, x, strides, pads_begin, pads_end, slack=0):
    """x itself, or x padded with zeros and split into stride phases (N, C, s..., q...).

    `slack` more zeros must be readable after the last phase plane; the first
    q dim grows for them, which leaves the strides of the q grid unchanged.
    """
    if not needs_conv_pad(strides, pads_begin, pads_end):
        return x
    q = phase_grid(x.shape[2:], strides, pads_begin, pads_end)
    q[0] += math.ceil(slack / int(np.prod(q[1:], dtype=np.int64)))
    shape = (*x.shape[:2], *strides, *q)
    attrs = {"strides": strides, "pads_begin": pads_begin}
    return cx.emit("ConvPad", [x], [(shape, x.dtype)], attrs, [f"{x.name}_padded"])[0]



@converter("ConvTranspose", 1)
def conv_transpose(cx, inputs):
    x, w, b = (list(inputs) + [None, None])[:3]
    rank = len(x.shape) - 2
    if rank < 1 or len(w.shape) != rank + 2:
        raise CompileError(f"ConvTranspose needs an input of rank >= 3 and weights of the same "
                           f"rank, got {list(x.shape)} and {list(w.shape)}")
    group = int(cx.attr("group", 1))
    N, C = x.shape[:2]
    if C != w.shape[0] or C % group:
        raise CompileError(f"ConvTranspose weights {list(w.shape)} do not fit {C} input channels "
                           f"with group={group}")
    kernel = list(w.shape[2:])
    strides = per_axis_ints(cx.attr("strides"), rank, 1, "strides")
    dilations = per_axis_ints(cx.attr("dilations"), rank, 1, "dilations")
    out_pad = per_axis_ints(cx.attr("output_padding"), rank, 0, "output_padding")
    pb, out = _transpose_geometry(cx, x.shape[2:], kernel, strides, dilations, out_pad)
    OC = w.shape[1] * group
    attrs = {"group": group, "strides": strides, "dilations": dilations, "pads_begin": pb}
    col = ((w.shape[1] * int(np.prod(kernel)), int(np.prod(x.shape[2:]))), x.dtype)
    names = [cx.node.output[0], "conv_transpose_col"]
    return cx.emit("ConvTranspose", [x, w, b], [((N, OC, *out), x.dtype), col], attrs, names)[:1]


def _transpose_geometry(cx, in_spatial, kernel, strides, dilations, out_pad):
    """(pads_begin, output spatial shape) from pads, output_shape or auto_pad."""
    rank = len(in_spatial)
    full = [s * (n - 1) + op + (k - 1) * d + 1
            for n, k, s, d, op in zip(in_spatial, kernel, strides, dilations, out_pad)]
    auto = cx.attr("auto_pad", "NOTSET")
    target = cx.attr("output_shape")
    if target is not None:
        target = [int(t) for t in target][-rank:]
    if cx.attr("pads") is not None or (auto in ("NOTSET", "VALID", "") and target is None):
        pads = [0] * 2 * rank if auto == "VALID" else per_axis_ints(cx.attr("pads"), 2 * rank, 0, "pads")
        out = target or [f - a - b for f, a, b in zip(full, pads[:rank], pads[rank:])]
        return pads[:rank], out
    target = target or [n * s for n, s in zip(in_spatial, strides)]
    total = [f - t for f, t in zip(full, target)]
    begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    return begin, target


# ---------------------------------------------------------------- pooling

def _pool(cx, inputs, kind: str, p: float = 2):
    x = inputs[0]
    rank = len(x.shape) - 2
    kernel = cx.attr("kernel_shape")
    if rank < 1 or kernel is None or len(kernel) != rank:
        raise CompileError(f"pooling needs kernel_shape with one entry per spatial axis of the "
                           f"input {list(x.shape)}, got {kernel}")
    kernel = [int(k) for k in kernel]
    strides = per_axis_ints(cx.attr("strides"), rank, 1, "strides")
    dilations = per_axis_ints(cx.attr("dilations"), rank, 1, "dilations")
    ceil_mode = bool(cx.attr("ceil_mode", 0))
    pb, pe = window_pads(cx, x.shape[2:], kernel, strides, dilations)
    out = [window_output(*a, ceil_mode)
           for a in zip(x.shape[2:], kernel, strides, dilations, pb, pe)]
    y_shape = (*x.shape[:2], *out)
    if kind == "max" and len(cx.node.output) > 1 and cx.node.output[1]:
        attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
                 "pads_begin": pb, "storage_order": int(cx.attr("storage_order", 0))}
        return cx.emit("MaxPoolWithIndices", [x], [(y_shape, x.dtype), (y_shape, np.int64)], attrs)
    attrs = {"kind": kind, "p": p, "kernel_shape": kernel, "strides": strides,
             "dilations": dilations, "pads_begin": pb}
    outs = [(y_shape, x.dtype), ((x.shape[0] * x.shape[1], _pool_row_width(
        x.shape[-1], out[-1], kernel[-1], strides[-1], dilations[-1], pb[-1])), x.dtype)]
    ins = [x]
    if kind == "avg":
        include = bool(cx.attr("count_include_pad", 0))
        ins.append(cx.const(_window_counts(x.shape[2:], out, kernel, strides, dilations, pb, pe,
                                           include).astype(x.dtype), "pool_counts"))
    return cx.emit("RowPool", ins, outs, attrs, [cx.node.output[0], "pool_row"])[:1]


def _pool_row_width(n, out, k, s, d, pad_begin) -> int:
    """RowPool's row buffer (kernels/pool.py): the begin padding, the input's columns, and
    as much end padding as the last window reaches (ceil_mode may reach past `pads`)."""
    return max(pad_begin + n, (out - 1) * s + (k - 1) * d + 1)


def _window_counts(in_spatial, out, kernel, strides, dilations, pb, pe, include_pad):
    """How many taps of each output window an average divides by (a separable product)."""
    check_tensor(out, np.float64, "the pooling window counts")
    counts = np.ones((), np.float64)
    for n, o, k, s, d, b, e in zip(in_spatial, out, kernel, strides, dilations, pb, pe):
        lo, hi = (-b, n + e) if include_pad else (0, n)
        pos = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d
        per_dim = ((pos >= lo) & (pos < hi)).sum(axis=1)
        counts = np.multiply.outer(counts, per_dim)
    return np.maximum(counts, 1)


@converter("MaxPool", 1)
def max_pool(cx, inputs):
    return _pool(cx, inputs, "max")


@converter("AveragePool", 1)
def average_pool(cx, inputs):
    return _pool(cx, inputs, "avg")


@converter("LpPool", 1)
def lp_pool(cx, inputs):
    return _pool(cx, inputs, "lp", float(cx.attr("p", 2)))


def _global_pool(cx, inputs, kind, p=2.0):
    x = inputs[0]
    if len(x.shape) < 3:
        raise CompileError(f"global pooling needs an input of rank >= 3, got {list(x.shape)}")
    shape = (*x.shape[:2], *[1] * (len(x.shape) - 2))
    return [cx.emit1("GlobalPool", [x], shape, x.dtype, {"kind": kind, "p": p})]


@converter("GlobalMaxPool", 1)
def global_max_pool(cx, inputs):
    return _global_pool(cx, inputs, "max")


@converter("GlobalAveragePool", 1)
def global_average_pool(cx, inputs):
    return _global_pool(cx, inputs, "avg")


@converter("GlobalLpPool", 1)
def global_lp_pool(cx, inputs):
    return _global_pool(cx, inputs, "lp", float(cx.attr("p", 2)))


# ---------------------------------------------------------------- matrix products

@converter("MatMul", 1)
def matmul(cx, inputs):
    a, b = inputs[:2]
    if not a.shape or not b.shape:
        raise CompileError("MatMul operands must have rank >= 1")
    if a.dtype != b.dtype:
        raise CompileError(f"MatMul operands have different dtypes {a.dtype} and {b.dtype}")
    k_a = a.shape[-1]
    k_b = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
    if k_a != k_b:
        raise CompileError(f"MatMul inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    rows = a.shape[-2:-1]  # absent when A is a vector
    cols = b.shape[-1:] if len(b.shape) > 1 else ()
    shape = (*batch, *rows, *cols)
    return [cx.emit1("MatMul", [a, b], shape, a.dtype)]


@converter("Gemm", 1)
def gemm(cx, inputs):
    a, b, c = (list(inputs) + [None])[:3]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise CompileError(f"Gemm needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    at, bt = int(cx.attr("transA", 0)), int(cx.attr("transB", 0))
    # constant operands are transposed once here so the kernel reads rows
    if at and a.is_const:
        a, at = cx.const(a.const.T, "gemm_a"), 0
    if bt and b.is_const:
        b, bt = cx.const(b.const.T, "gemm_b"), 0
    M, K = a.shape[::-1] if at else a.shape
    K2, N = b.shape[::-1] if bt else b.shape
    if K != K2:
        raise CompileError(f"Gemm inner dimensions differ: A' is {M}x{K}, B' is {K2}x{N}")
    if c is not None:
        broadcast(c.shape, (M, N))
        if len(c.shape) > 2:
            raise CompileError(f"Gemm C must have rank <= 2, got {list(c.shape)}")
    attrs = {"transA": at, "transB": bt, "alpha": float(cx.attr("alpha", 1.0)),
             "beta": float(cx.attr("beta", 1.0)), "activation": None}
    return [cx.emit1("Gemm", [a, b, c], (M, N), a.dtype, attrs)]


# ---------------------------------------------------------------- normalisation

@converter("BatchNormalization", 1)
def batch_norm(cx, inputs):
    x, scale, bias, mean, var = inputs[:5]
    _check_batch_norm_params(x, (scale, bias, mean, var))
    if int(cx.attr("training_mode", 0)):
        return _batch_norm_training(cx, inputs)
    if any(cx.node.output[1:]):
        raise CompileError("BatchNormalization with the training outputs of opset < 14 (mean, "
                           "var, saved_mean, saved_var) is not supported; export the model for "
                           "inference (model.eval() in PyTorch)")
    attrs = {"epsilon": float(cx.attr("epsilon", 1e-5))}
    return [cx.emit1("BatchNormalization", [x, scale, bias, mean, var], x.shape, x.dtype, attrs)]


def _check_batch_norm_params(x, params):
    if len(x.shape) < 2:
        raise CompileError(f"BatchNormalization needs an input of rank >= 2, got {list(x.shape)}")
    per_activation = tuple(x.shape[1:])  # opset < 9 with spatial=0
    for v, what in zip(params, ("scale", "B", "mean", "var")):
        if v.shape not in ((x.shape[1],), per_activation):
            raise CompileError(f"BatchNormalization {what} has shape {list(v.shape)}; expected "
                               f"[{x.shape[1]}] (one value per channel)")


def _batch_norm_training(cx, inputs):
    """opset 14+ training_mode=1: normalise with the batch's statistics and output the
    updated running mean and variance."""
    x, scale, bias, mean, var = inputs[:5]
    if scale.shape != (x.shape[1],):
        raise CompileError("BatchNormalization training mode needs per-channel parameters")
    stats = (mean.shape, mean.dtype)
    outs = [(x.shape, x.dtype), stats, stats][:len(cx.node.output)]
    attrs = {"epsilon": float(cx.attr("epsilon", 1e-5)),
             "momentum": float(cx.attr("momentum", 0.9))}
    return cx.emit("BatchNormalizationTraining", [x, scale, bias, mean, var], outs, attrs)


def _check_channel_params(x, params, what, count=None):
    count = x.shape[1] if count is None else count
    for v, name in zip(params, what):
        if v.shape != (count,):
            raise CompileError(f"{name} has shape {list(v.shape)}, expected [{count}]")


@converter("InstanceNormalization", 1)
def instance_norm(cx, inputs):
    x, scale, bias = inputs[:3]
    if len(x.shape) < 3:
        raise CompileError(f"InstanceNormalization needs rank >= 3, got {list(x.shape)}")
    _check_channel_params(x, (scale, bias), ("scale", "B"))
    attrs = {"epsilon": float(cx.attr("epsilon", 1e-5))}
    return [cx.emit1("InstanceNormalization", [x, scale, bias], x.shape, x.dtype, attrs)]


@converter("LayerNormalization", 17)
def layer_norm(cx, inputs):
    x, scale, bias = (list(inputs) + [None])[:3]
    rank = len(x.shape)
    axis = norm_axis(int(cx.attr("axis", -1)), rank)
    inner = x.shape[axis:]
    for v, name in ((scale, "Scale"), (bias, "B")):
        if v is not None and broadcast(v.shape, inner) != tuple(inner):
            raise CompileError(f"LayerNormalization {name} of shape {list(v.shape)} does not "
                               f"broadcast to the normalized shape {list(inner)}")
    stash = np.float32 if int(cx.attr("stash_type", 1)) == 1 else x.dtype
    stat_shape = (*x.shape[:axis], *[1] * (rank - axis))
    outs = [(x.shape, x.dtype), (stat_shape, stash), (stat_shape, stash)][:len(cx.node.output)]
    attrs = {"axis": axis, "epsilon": float(cx.attr("epsilon", 1e-5))}
    return cx.emit("LayerNormalization", [x, scale, bias], outs, attrs)


@converter("GroupNormalization", 18)
def group_norm(cx, inputs):
    x, scale, bias = inputs[:3]
    groups = int(cx.attr("num_groups"))
    if len(x.shape) < 3 or x.shape[1] % groups:
        raise CompileError(f"GroupNormalization: {x.shape[1] if len(x.shape) > 1 else '?'} "
                           f"channels cannot be split into num_groups={groups}")
    count = groups if cx.opset < 21 else x.shape[1]
    _check_channel_params(x, (scale, bias), ("scale", "bias"), count)
    attrs = {"num_groups": groups, "epsilon": float(cx.attr("epsilon", 1e-5))}
    return [cx.emit1("GroupNormalization", [x, scale, bias], x.shape, x.dtype, attrs)]


@converter("LRN", 1)
def lrn(cx, inputs):
    x = inputs[0]
    if len(x.shape) < 3:
        raise CompileError(f"LRN needs an input of rank >= 3, got {list(x.shape)}")
    attrs = {"size": int(cx.attr("size")), "alpha": float(cx.attr("alpha", 1e-4)),
             "beta": float(cx.attr("beta", 0.75)), "bias": float(cx.attr("bias", 1.0))}
    return [cx.emit1("LRN", [x], x.shape, x.dtype, attrs)]
