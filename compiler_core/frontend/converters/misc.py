"""Converters for assorted ops: LpNormalization, CumProd, BitCast, Det, MaxUnpool, Col2Im.

Each op becomes one IR node of the same name (kernels in kernels/misc.py) with its
attributes normalised here, so the kernels never look at opset versions.
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter
from .common import const_value, norm_axis, per_axis_ints


def _const_ints(v, what: str) -> list[int] | None:
    value = const_value(v, what)
    return None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]


# ---------------------------------------------------------------- LpNormalization

@converter("LpNormalization", 1)
def lp_normalization(cx, inputs):
    x = inputs[0]
    p = int(cx.attr("p", 2))
    if p not in (1, 2):
        raise CompileError(f"LpNormalization supports p=1 and p=2, got p={p}")
    if x.dtype.kind != "f":
        raise CompileError(f"LpNormalization takes a float tensor, got {x.dtype}")
    axis = norm_axis(cx.attr("axis", -1), len(x.shape))
    return [cx.emit1("LpNormalization", [x], x.shape, x.dtype, {"axis": axis, "p": p})]


# ---------------------------------------------------------------- CumProd

@converter("CumProd", 26)
def cum_prod(cx, inputs):
    x, axis = inputs
    if not x.shape:
        raise CompileError("CumProd needs an input of rank >= 1")
    if axis.size != 1:
        raise CompileError(f"CumProd's axis must be a scalar, got shape {list(axis.shape)}")
    attrs = {"exclusive": bool(cx.attr("exclusive", 0)), "reverse": bool(cx.attr("reverse", 0))}
    if axis.is_const:
        attrs["axis"] = norm_axis(int(axis.const.reshape(-1)[0]), len(x.shape))
        return [cx.emit1("CumProd", [x], x.shape, x.dtype, attrs)]
    # a run-time axis does not change the output shape: the kernel picks the axis itself
    return [cx.emit1("CumProd", [x, axis], x.shape, x.dtype, attrs)]


# ---------------------------------------------------------------- BitCast

@converter("BitCast", 26)
def bit_cast(cx, inputs):
    from ..onnx import np_dtype
    x = inputs[0]
    to = np_dtype(cx.attr("to"))
    if to.itemsize != x.dtype.itemsize:
        raise CompileError(f"BitCast from {x.dtype} ({8 * x.dtype.itemsize} bits) to {to} "
                           f"({8 * to.itemsize} bits): both types must have the same width")
    if to == x.dtype:
        return [x]
    return [cx.emit1("BitCast", [x], x.shape, to, {"to": to.name})]


# ---------------------------------------------------------------- Det

@converter("Det", 11)
def det(cx, inputs):
    x = inputs[0]
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise CompileError(f"Det needs square matrices in the last two axes, got {list(x.shape)}")
    if x.dtype.kind != "f":
        raise CompileError(f"Det takes a float tensor, got {x.dtype}")
    n = x.shape[-1]
    # the second output is the kernel's scratch matrix for the LU factorisation
    outs = [(x.shape[:-2], x.dtype), ((n, n), np.dtype(np.float64))]
    return cx.emit("Det", [x], outs, names=[cx.node.output[0], "det_lu"])[:1]


# ---------------------------------------------------------------- MaxUnpool

@converter("MaxUnpool", 9)
def max_unpool(cx, inputs):
    x, indices = inputs[:2]
    rank = len(x.shape) - 2
    kernel = per_axis_ints(cx.attr("kernel_shape"), rank, 1, "kernel_shape")
    strides = per_axis_ints(cx.attr("strides"), rank, 1, "strides")
    pads = per_axis_ints(cx.attr("pads"), 2 * rank, 0, "pads")
    pooled = [(n - 1) * s - (pads[d] + pads[rank + d]) + k
              for d, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
    pooled_shape = (*x.shape[:2], *pooled)
    given = inputs[2] if len(inputs) > 2 else None
    out_shape = tuple(_const_ints(given, "MaxUnpool's output_shape") or pooled_shape)
    if len(out_shape) != len(x.shape) or any(o < p for o, p in zip(out_shape, pooled_shape)):
        raise CompileError(f"MaxUnpool's output_shape {list(out_shape)} must have rank "
                           f"{len(x.shape)} and be at least the unpooled shape "
                           f"{list(pooled_shape)}")
    if indices.shape != x.shape:
        raise CompileError(f"MaxUnpool's indices {list(indices.shape)} must have the input's "
                           f"shape {list(x.shape)}")
    return [cx.emit1("MaxUnpool", [x, indices], out_shape, x.dtype,
                     {"pooled_shape": pooled_shape})]


# ---------------------------------------------------------------- Col2Im

@converter("Col2Im", 18)
def col2im(cx, inputs):
    x, image, block = inputs
    image = _const_ints(image, "Col2Im's image_shape")
    block = _const_ints(block, "Col2Im's block_shape")
    rank = len(image)
    if len(block) != rank or len(x.shape) != 3:
        raise CompileError(f"Col2Im needs an input (N, C*prod(block_shape), L) and image_shape, "
                           f"block_shape of equal length; got {list(x.shape)}, {image}, {block}")
    dilations = per_axis_ints(cx.attr("dilations"), rank, 1, "dilations")
    strides = per_axis_ints(cx.attr("strides"), rank, 1, "strides")
    pads = per_axis_ints(cx.attr("pads"), 2 * rank, 0, "pads")
    blocks = [(n + pads[d] + pads[rank + d] - dil * (k - 1) - 1) // s + 1
              for d, (n, k, dil, s) in enumerate(zip(image, block, dilations, strides))]
    taps = int(np.prod(block))
    if x.shape[1] % taps or x.shape[2] != int(np.prod(blocks)):
        raise CompileError(f"Col2Im input {list(x.shape)} does not fit: dim 1 must be a multiple "
                           f"of prod(block_shape)={taps} and dim 2 must be the number of "
                           f"blocks {int(np.prod(blocks))} ({blocks})")
    attrs = {"block": block, "blocks": blocks, "dilations": dilations, "strides": strides,
             "pads_begin": pads[:rank]}
    shape = (x.shape[0], x.shape[1] // taps, *image)
    return [cx.emit1("Col2Im", [x], shape, x.dtype, attrs)]
