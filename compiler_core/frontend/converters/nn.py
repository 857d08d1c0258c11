"""Converters for neural-network ops: convolutions, matrix products, pooling, normalisation.

Convolutions are prepared here so their kernels stay simple (see kernels/conv.py): the
input is padded and split into stride phases by a `ConvPad` node, and the constant table
of tap offsets into that buffer is computed once at compile time.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import CompileError
from ...kernels.conv import conv_tap_offsets, wide_size
from ..registry import converter
from .common import broadcast, norm_axis


# ---------------------------------------------------------------- window geometry

def _ints(value, n: int, default: int, what: str) -> list[int]:
    if value is None:
        return [default] * n
    value = [int(v) for v in value]
    if len(value) != n:
        raise CompileError(f"{what} has {len(value)} values, expected {n} (one per spatial axis)")
    return value


def window_pads(cx, in_spatial, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) from `pads` or `auto_pad`."""
    rank = len(in_spatial)
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = _ints(cx.attr("pads"), 2 * rank, 0, "pads")
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
        raise CompileError(f"input channels {C} and weights {list(w.shape)} do not fit group={group}")
    strides = _ints(cx.attr("strides"), rank, 1, "strides")
    dilations = _ints(cx.attr("dilations"), rank, 1, "dilations")
    pb, pe = window_pads(cx, x.shape[2:], kernel, strides, dilations)
    out = [window_output(*a) for a in zip(x.shape[2:], kernel, strides, dilations, pb, pe)]
    xq = conv_input(cx, x, strides, pb, pe)
    q_shape = xq.shape[-rank:]
    koff = cx.const(conv_tap_offsets(C // group, kernel, dilations, strides, q_shape), "conv_taps")
    outs = [((N, OC, *out), x.dtype)]
    P = wide_size(out, q_shape)
    if P != int(np.prod(out)):
        outs.append(((OC, P), x.dtype))  # scratch for the wide output
    attrs = {"group": group, "strides": strides, "dilations": dilations, "kernel_shape": kernel,
             "pads_begin": pb, "pads_end": pe, "activation": None}
    names = [cx.node.output[0], "conv_wide"][:len(outs)]
    return cx.emit("Conv", [xq, w, b, koff], outs, attrs, names)[:1]


def conv_input(cx, x, strides, pads_begin, pads_end):
    """x itself, or x padded and split into stride phases (N, C, s..., q...) by ConvPad."""
    if not any(pads_begin) and not any(pads_end) and all(s == 1 for s in strides):
        return x
    q = [math.ceil((n + a + b) / s) for n, a, b, s in zip(x.shape[2:], pads_begin, pads_end, strides)]
    shape = (*x.shape[:2], *strides, *q)
    attrs = {"strides": strides, "pads_begin": pads_begin}
    return cx.emit("ConvPad", [x], [(shape, x.dtype)], attrs, [f"{x.name}_padded"])[0]
