"""Converters for reductions and ops that normalise or rank along axes.

IR forms (attributes are canonical whatever the opset):
  Reduce*           {"axes": sorted non-negative ints (may be empty), "keepdims": bool}
  ArgMax / ArgMin   {"axis", "keepdims", "select_last_index"}
  TopK              {"axis", "k", "largest", "sorted"}          -> values, int64 indices
  Softmax / LogSoftmax / Hardmax  {"axis", "coerce_2d"}
      coerce_2d=True is the opset < 13 meaning: the tensor is seen as 2-D
      [prod(shape[:axis]), prod(shape[axis:])] and normalised along the second dim.
      When Softmax / LogSoftmax normalise along a non-innermost axis the node gets two
      scratch outputs of shape [inner] (running max and sum per column), which let the
      kernel sweep contiguous columns; without them it works one strided row at a time.
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..registry import converter
from .common import const_value, norm_axes, norm_axis

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
# opset in which `axes` moved from an attribute to an optional input
AXES_AS_INPUT_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in REDUCE_OPS}


# ---------------------------------------------------------------- reductions

def reduced_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _emit_reduce(cx, x, axes, noop_with_empty_axes: bool):
    rank = len(x.shape)
    if len(axes) == 0:
        # "no axes" means every axis, unless the model asks for a no-op (which still applies
        # the op's elementwise part, e.g. ReduceSumSquare squares: axes=() in numpy terms)
        axes = [] if noop_with_empty_axes else list(range(rank))
    axes = norm_axes(axes, rank)
    keepdims = bool(cx.attr("keepdims", 1))
    shape = reduced_shape(x.shape, axes, keepdims)
    return [cx.emit1(cx.node.op_type, [x], shape, x.dtype, {"axes": axes, "keepdims": keepdims})]


def _reduce_axes_attribute(cx, inputs):
    return _emit_reduce(cx, inputs[0], list(cx.attr("axes", [])), False)


def _reduce_axes_input(cx, inputs):
    axes_input = inputs[1] if len(inputs) > 1 else None
    axes = const_value(axes_input, "axes")
    axes = [] if axes is None else [int(a) for a in np.ravel(axes)]
    return _emit_reduce(cx, inputs[0], axes, bool(cx.attr("noop_with_empty_axes", 0)))


for _op in REDUCE_OPS:
    converter(_op, 1)(_reduce_axes_attribute)
    converter(_op, AXES_AS_INPUT_SINCE[_op])(_reduce_axes_input)


# ---------------------------------------------------------------- ArgMax / ArgMin

def _arg_reduce(cx, inputs):
    x = inputs[0]
    axis = norm_axis(cx.attr("axis", 0), len(x.shape))
    if x.shape[axis] == 0:
        raise CompileError(f"{cx.node.op_type} over an empty axis {axis} has no answer")
    keepdims = bool(cx.attr("keepdims", 1))
    attrs = {"axis": axis, "keepdims": keepdims,
             "select_last_index": bool(cx.attr("select_last_index", 0))}
    return [cx.emit1(cx.node.op_type, [x], reduced_shape(x.shape, [axis], keepdims), np.int64,
                     attrs)]


converter("ArgMax", 1)(_arg_reduce)
converter("ArgMin", 1)(_arg_reduce)


# ---------------------------------------------------------------- TopK

def _emit_topk(cx, x, k: int, axis: int, largest: bool, is_sorted: bool):
    axis = norm_axis(axis, len(x.shape))
    if not 0 <= k <= x.shape[axis]:
        raise CompileError(f"k={k} is outside [0, {x.shape[axis]}] for axis {axis} of shape "
                           f"{list(x.shape)}")
    shape = tuple(k if d == axis else n for d, n in enumerate(x.shape))
    attrs = {"axis": axis, "k": k, "largest": largest, "sorted": is_sorted}
    return cx.emit("TopK", [x], [(shape, x.dtype), (shape, np.dtype(np.int64))], attrs)


@converter("TopK", 1)
def topk_v1(cx, inputs):
    return _emit_topk(cx, inputs[0], int(cx.attr("k")), cx.attr("axis", -1), True, True)


@converter("TopK", 10)
def topk_v10(cx, inputs):
    k = const_value(inputs[1], "TopK's k")
    if k.size != 1:
        raise CompileError(f"TopK's k must hold one value, got shape {list(k.shape)}")
    return _emit_topk(cx, inputs[0], int(k.ravel()[0]), cx.attr("axis", -1),
                      bool(cx.attr("largest", 1)), bool(cx.attr("sorted", 1)))


# ---------------------------------------------------------------- Softmax family

def _emit_normalise(cx, x, axis: int, coerce_2d: bool):
    rank = len(x.shape)
    if rank == 0:
        raise CompileError(f"{cx.node.op_type} needs an input of rank >= 1, got a scalar")
    # opset < 13 allows axis == rank: every element is its own row of length 1
    axis = rank if coerce_2d and axis == rank else norm_axis(axis, rank)
    # flattening at the last axis is the same as normalising along it
    coerce_2d = coerce_2d and axis != rank - 1
    # elements between neighbours along the normalised axis (1 when it is innermost)
    inner = 1 if coerce_2d else int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    outputs = [(x.shape, x.dtype)]
    if inner > 1 and cx.node.op_type != "Hardmax":
        scratch = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
        outputs += [((inner,), scratch), ((inner,), scratch)]
    return cx.emit(cx.node.op_type, [x], outputs, {"axis": axis, "coerce_2d": coerce_2d})[:1]


def _normalise_v1(cx, inputs):
    return _emit_normalise(cx, inputs[0], cx.attr("axis", 1), True)


def _normalise_v13(cx, inputs):
    return _emit_normalise(cx, inputs[0], cx.attr("axis", -1), False)


for _op in ["Softmax", "LogSoftmax", "Hardmax"]:
    converter(_op, 1)(_normalise_v1)
    converter(_op, 13)(_normalise_v13)
