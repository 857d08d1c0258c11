"""Converters for shape and data-movement ops (Reshape, Slice, Gather, Pad, Scatter*, ...).

Shapes, axes, pads and repeats must be compile-time constants; index tensors may be runtime
data. Flatten, Squeeze and Unsqueeze become `Reshape`, which the memory planner turns into a
view. Results that depend only on shapes (Shape, Size, EyeLike) become constants.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ...errors import CompileError
from ..limits import check_tensor
from ..registry import converter
from .common import broadcast, const_value, norm_axes, norm_axis

def ints(v, what: str) -> list[int]:
    """A constant integer input as a list (None when the optional input is absent)."""
    value = const_value(v, what)
    return None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]


def reshape(cx, x, shape):
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    return cx.emit1("Reshape", [x], shape, x.dtype, {"shape": shape})


def optional_input(inputs, k):
    return inputs[k] if len(inputs) > k else None


# ---------------------------------------------------------------- reshapes

def _reshape_target(in_shape, requested, allowzero: bool) -> tuple[int, ...]:
    """ONNX Reshape rules: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    dims = [in_shape[k] if d == 0 and not allowzero else d for k, d in enumerate(requested)]
    if dims.count(-1) > 1:
        raise CompileError(f"Reshape target {requested} has more than one -1")
    if any(d < -1 for d in dims):
        raise CompileError(f"Reshape target {requested} has a negative dimension")
    total = int(np.prod(in_shape, dtype=np.int64))
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise CompileError(f"cannot reshape {list(in_shape)} to {requested}")
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims, dtype=np.int64)) != total:
        raise CompileError(f"cannot reshape {list(in_shape)} ({total} elements) to {requested}")
    return tuple(dims)


@converter("Reshape", 5)
def reshape_op(cx, inputs):
    x, shape = inputs
    target = _reshape_target(x.shape, ints(shape, "Reshape's shape"), bool(cx.attr("allowzero", 0)))
    return [reshape(cx, x, target)]


@converter("Flatten", 1)
def flatten(cx, inputs):
    x = inputs[0]
    axis = cx.attr("axis", 1)
    axis = axis + len(x.shape) if axis < 0 else axis  # axis may equal the rank
    if not 0 <= axis <= len(x.shape):
        raise CompileError(f"Flatten axis {cx.attr('axis')} is out of range for rank "
                           f"{len(x.shape)}")
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [reshape(cx, x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64))))]


def _squeeze(cx, x, axes):
    rank = len(x.shape)
    if axes is None:
        axes = [d for d in range(rank) if x.shape[d] == 1]
    axes = norm_axes(axes, rank)
    wrong = [a for a in axes if x.shape[a] != 1]
    if wrong:
        raise CompileError(f"cannot squeeze axes {wrong} of shape {list(x.shape)}: size is not 1")
    return [reshape(cx, x, [n for d, n in enumerate(x.shape) if d not in axes])]


def _unsqueeze(cx, x, axes):
    if axes is None:
        raise CompileError("Unsqueeze needs axes")
    rank = len(x.shape) + len(axes)
    axes = [norm_axis(int(a), rank) for a in axes]
    if len(axes) != len(set(axes)):
        raise CompileError(f"Unsqueeze axes {axes} repeat an axis")
    dims = iter(x.shape)
    return [reshape(cx, x, [1 if d in axes else next(dims) for d in range(rank)])]


@converter("Squeeze", 1)
def squeeze_v1(cx, inputs):
    return _squeeze(cx, inputs[0], cx.attr("axes"))


@converter("Squeeze", 13)
def squeeze_v13(cx, inputs):
    return _squeeze(cx, inputs[0], ints(optional_input(inputs, 1), "Squeeze's axes"))


@converter("Unsqueeze", 1)
def unsqueeze_v1(cx, inputs):
    return _unsqueeze(cx, inputs[0], cx.attr("axes"))


@converter("Unsqueeze", 13)
def unsqueeze_v13(cx, inputs):
    return _unsqueeze(cx, inputs[0], ints(inputs[1], "Unsqueeze's axes"))


# ---------------------------------------------------------------- layout

def transpose(cx, x, perm):
    perm = tuple(int(p) for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    shape = tuple(x.shape[p] for p in perm)
    moved = [p for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):  # only extent-1 axes move: the elements keep their order
        return reshape(cx, x, shape)
    return cx.emit1("Transpose", [x], shape, x.dtype, {"perm": perm})


@converter("Transpose", 1)
def transpose_op(cx, inputs):
    x = inputs[0]
    rank = len(x.shape)
    perm = cx.attr("perm", list(range(rank))[::-1])
    if sorted(norm_axis(p, rank, "perm entry") for p in perm) != list(range(rank)):
        raise CompileError(f"perm {list(perm)} is not a permutation of the {rank} axes")
    return [transpose(cx, x, [norm_axis(p, rank) for p in perm])]


@converter("DepthToSpace", 1)
def depth_to_space(cx, inputs):
    x, bs = inputs[0], cx.attr("blocksize")
    n, c, h, w = x.shape
    if c % (bs * bs):
        raise CompileError(f"channels {c} are not divisible by blocksize² = {bs * bs}")
    if cx.attr("mode", "DCR") == "DCR":
        split, perm = (n, bs, bs, c // (bs * bs), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    return [_blocks_moved(cx, x, split, perm, (n, c // (bs * bs), h * bs, w * bs))]


def _blocks_moved(cx, x, split_shape, perm, out_shape):
    """Depth/space rearrangements: split into blocks, move the block axes, merge."""
    return reshape(cx, transpose(cx, reshape(cx, x, split_shape), perm), out_shape)


@converter("SpaceToDepth", 1)
def space_to_depth(cx, inputs):
    x, bs = inputs[0], cx.attr("blocksize")
    n, c, h, w = x.shape
    if h % bs or w % bs:
        raise CompileError(f"spatial size {h}x{w} is not divisible by blocksize {bs}")
    # DCR puts the block offset before the channel in the output depth, CRD after it
    perm = (0, 3, 5, 1, 2, 4) if cx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    return [_blocks_moved(cx, x, (n, c, h // bs, bs, w // bs, bs), perm,
                          (n, c * bs * bs, h // bs, w // bs))]


@converter("Concat", 4)
def concat(cx, inputs):
    present = [v for v in inputs if v is not None]
    rank = len(present[0].shape)
    axis = norm_axis(cx.attr("axis"), rank)
    others = {tuple(n for d, n in enumerate(v.shape) if d != axis) for v in present}
    if len(others) > 1 or any(len(v.shape) != rank for v in present):
        raise CompileError(f"Concat on axis {axis} of shapes {[list(p.shape) for p in present]}: "
                           "all other dimensions must match")
    shape = list(present[0].shape)
    shape[axis] = sum(v.shape[axis] for v in present)
    nonempty = [v for v in present if v.size]
    if len(nonempty) == 1 and nonempty[0].shape == tuple(shape):
        return nonempty
    return [cx.emit1("Concat", nonempty, shape, present[0].dtype, {"axis": axis})]


# ---------------------------------------------------------------- slicing

def slice_(cx, x, starts, steps, shape):
    """Output element idx reads input element starts + idx * steps (all full rank)."""
    if tuple(shape) == x.shape and all(s == 1 for s in steps):
        return x
    return cx.emit1("Slice", [x], shape, x.dtype, {"starts": tuple(starts), "steps": tuple(steps)})


def _slice(cx, x, starts, ends, axes, steps):
    rank = len(x.shape)
    axes = range(rank) if axes is None else [norm_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if len(set(axes)) != len(list(axes)):
        raise CompileError(f"Slice axes {list(axes)} repeat an axis")
    first, stride, shape = [0] * rank, [1] * rank, list(x.shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise CompileError("Slice steps must not be 0")
        # python slices clamp exactly as ONNX specifies, including for negative steps
        picked = range(*slice(start, end, step).indices(x.shape[axis]))
        first[axis], stride[axis], shape[axis] = picked.start, step, len(picked)
        if not picked:
            first[axis] = 0
    return [slice_(cx, x, first, stride, shape)]


@converter("Slice", 1)
def slice_v1(cx, inputs):
    return _slice(cx, inputs[0], cx.attr("starts"), cx.attr("ends"), cx.attr("axes"), None)


@converter("Slice", 10)
def slice_v10(cx, inputs):
    x, starts, ends = inputs[:3]
    return _slice(cx, x, ints(starts, "Slice's starts"), ints(ends, "Slice's ends"),
                  ints(optional_input(inputs, 3), "Slice's axes"),
                  ints(optional_input(inputs, 4), "Slice's steps"))


def _split(cx, x, axis, sizes):
    axis = norm_axis(axis, len(x.shape))
    if sizes is None:
        sizes = _equal_parts(x.shape[axis], len(cx.node.output), ceil=False)
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise CompileError(f"split sizes {list(sizes)} do not add up to dimension {axis} "
                           f"of shape {list(x.shape)}")
    outs, offset = [], 0
    for size in sizes:
        starts = [offset if d == axis else 0 for d in range(len(x.shape))]
        shape = [size if d == axis else n for d, n in enumerate(x.shape)]
        outs.append(slice_(cx, x, starts, [1] * len(x.shape), shape))
        offset += size
    return outs


def _equal_parts(n: int, parts: int, ceil: bool) -> list[int]:
    if ceil:  # opset 18 num_outputs: all chunks ceil(n / parts) but the last
        chunk = -(-n // parts)
        return [min(chunk, max(n - k * chunk, 0)) for k in range(parts)]
    if n % parts:
        raise CompileError(f"dimension of size {n} cannot be split into {parts} equal parts; "
                           "give the split sizes")
    return [n // parts] * parts


@converter("Split", 2)
def split_v2(cx, inputs):
    return _split(cx, inputs[0], cx.attr("axis", 0), cx.attr("split"))


@converter("Split", 13)
def split_v13(cx, inputs):
    sizes = ints(optional_input(inputs, 1), "Split's split")
    return _split(cx, inputs[0], cx.attr("axis", 0), sizes)


@converter("Split", 18)
def split_v18(cx, inputs):
    x, sizes = inputs[0], ints(optional_input(inputs, 1), "Split's split")
    axis = norm_axis(cx.attr("axis", 0), len(x.shape))
    parts = cx.attr("num_outputs")
    if sizes is None and parts is not None:
        sizes = _equal_parts(x.shape[axis], parts, ceil=True)
    return _split(cx, x, axis, sizes)


# ---------------------------------------------------------------- gathers

def _check_index_dtype(v, what: str):
    if v.dtype not in (np.int32, np.int64):
        raise CompileError(f"{what} must be int32 or int64, got {v.dtype}")


@converter("Gather", 1)
def gather(cx, inputs):
    x, indices = inputs
    _check_index_dtype(indices, "Gather indices")
    axis = norm_axis(cx.attr("axis", 0), len(x.shape))
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    return [cx.emit1("Gather", [x, indices], shape, x.dtype, {"axis": axis})]


@converter("GatherElements", 11)
def gather_elements(cx, inputs):
    x, indices = inputs
    _check_index_dtype(indices, "GatherElements indices")
    if len(indices.shape) != len(x.shape):
        raise CompileError(f"GatherElements indices rank {len(indices.shape)} differs from data "
                           f"rank {len(x.shape)}")
    axis = norm_axis(cx.attr("axis", 0), len(x.shape))
    return [cx.emit1("GatherElements", [x, indices], indices.shape, x.dtype, {"axis": axis})]


@converter("GatherND", 11)
def gather_nd(cx, inputs):
    x, indices = inputs
    _check_index_dtype(indices, "GatherND indices")
    batch, depth = cx.attr("batch_dims", 0), indices.shape[-1]
    if x.shape[:batch] != indices.shape[:batch] or batch + depth > len(x.shape):
        raise CompileError(f"GatherND indices of shape {list(indices.shape)} do not fit data of "
                           f"shape {list(x.shape)} with batch_dims={batch}")
    shape = indices.shape[:-1] + x.shape[batch + depth:]
    return [cx.emit1("GatherND", [x, indices], shape, x.dtype, {"batch_dims": batch})]


# ---------------------------------------------------------------- scatters

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _reduction(cx):
    reduction = cx.attr("reduction", "none")
    if reduction not in REDUCTIONS:
        raise CompileError(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    return reduction


@converter("ScatterND", 11)
def scatter_nd(cx, inputs):
    data, indices, updates = inputs
    _check_index_dtype(indices, "ScatterND indices")
    expected = indices.shape[:-1] + data.shape[indices.shape[-1]:]
    if updates.shape != expected:
        raise CompileError(f"ScatterND updates have shape {list(updates.shape)}, expected "
                           f"{list(expected)} from data {list(data.shape)} and indices "
                           f"{list(indices.shape)}")
    return [cx.emit1("ScatterND", inputs, data.shape, data.dtype, {"reduction": _reduction(cx)})]


@converter("ScatterElements", 11)
def scatter_elements(cx, inputs):
    data, indices, updates = inputs
    _check_index_dtype(indices, "ScatterElements indices")
    if indices.shape != updates.shape:
        raise CompileError(f"ScatterElements indices {list(indices.shape)} and updates "
                           f"{list(updates.shape)} must have the same shape")
    attrs = {"axis": norm_axis(cx.attr("axis", 0), len(data.shape)), "reduction": _reduction(cx)}
    return [cx.emit1("ScatterElements", inputs, data.shape, data.dtype, attrs)]


converter("Scatter", 9)(scatter_elements)


# ---------------------------------------------------------------- broadcasting copies

@converter("Expand", 8)
def expand(cx, inputs):
    x, shape = inputs
    out = broadcast(x.shape, ints(shape, "Expand's shape"))
    if out == x.shape:
        return [x]
    return [cx.emit1("Expand", [x], out, x.dtype)]


@converter("Tile", 6)
def tile(cx, inputs):
    x, repeats = inputs[0], ints(inputs[1], "Tile's repeats")
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        raise CompileError(f"Tile repeats {repeats} must be {len(x.shape)} non-negative numbers")
    shape = tuple(n * r for n, r in zip(x.shape, repeats))
    if shape == x.shape:
        return [x]
    return [cx.emit1("Tile", [x], shape, x.dtype)]


# ---------------------------------------------------------------- padding

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad(cx, x, pads, mode, fill, axes=None):
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [norm_axis(a, rank) for a in axes]
    if mode not in PAD_MODES:
        raise CompileError(f"Pad mode {mode!r} is not one of {', '.join(PAD_MODES)}")
    if len(pads) != 2 * len(axes):
        raise CompileError(f"Pad has {len(pads)} pads for {len(axes)} axes; it needs two per axis")
    full = [0] * (2 * rank)
    for k, a in enumerate(axes):
        full[a], full[a + rank] = pads[k], pads[k + len(axes)]
    shape = [n + full[d] + full[d + rank] for d, n in enumerate(x.shape)]
    if any(s < 0 for s in shape):
        raise CompileError(f"pads {pads} crop more than the whole of shape {list(x.shape)}")
    emptied = [d for d, n in enumerate(x.shape)
               if n - max(-full[d], 0) - max(-full[d + rank], 0) <= 0 and shape[d] > 0]
    if emptied:
        raise CompileError(f"pads {pads} leave nothing of axes {emptied} of shape "
                           f"{list(x.shape)} to pad from")
    if not any(full):
        return [x]
    inputs = [x] if fill is None or mode != "constant" else [x, fill]
    return [cx.emit1("Pad", inputs, shape, x.dtype, {"pads": tuple(full), "mode": mode})]


@converter("Pad", 2)
def pad_v2(cx, inputs):
    x = inputs[0]
    fill = cx.const(np.array(cx.attr("value", 0.0), x.dtype))
    return _pad(cx, x, cx.attr("pads"), cx.attr("mode", "constant"), fill)


@converter("Pad", 11)
def pad_v11(cx, inputs):
    x, pads = inputs[:2]
    return _pad(cx, x, ints(pads, "Pad's pads"), cx.attr("mode", "constant"),
                optional_input(inputs, 2), ints(optional_input(inputs, 3), "Pad's axes"))


# ---------------------------------------------------------------- compile-time values

@converter("Shape", 1)
def shape_op(cx, inputs):
    dims = np.array(inputs[0].shape, np.int64)
    start, end = cx.attr("start", 0), cx.attr("end", None)
    return [cx.const(dims[start:end], "shape")]


@converter("Size", 1)
def size_op(cx, inputs):
    return [cx.const(np.array(inputs[0].size, np.int64), "size")]


@converter("Constant", 1)
def constant(cx, inputs):
    if len(cx.attrs) != 1:
        raise CompileError(f"Constant needs exactly one value attribute, got {sorted(cx.attrs)}")
    (name, value), = cx.attrs.items()
    if name == "sparse_value":
        return [cx.const(_dense(value), "constant")]
    if name in ("value_string", "value_strings"):
        raise CompileError("string constants are not supported")
    dtypes = {"value_float": np.float32, "value_floats": np.float32,
              "value_int": np.int64, "value_ints": np.int64}
    return [cx.const(np.array(value, dtypes.get(name)), "constant")]


def _dense(sparse) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dense = np.zeros(tuple(sparse.dims), values.dtype)
    if indices.ndim == 1:  # linearised positions
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


@converter("ConstantOfShape", 9)
def constant_of_shape(cx, inputs):
    shape = ints(inputs[0], "ConstantOfShape's shape")
    value = cx.attr("value", np.zeros(1, np.float32))
    check_tensor(shape, value.dtype, "ConstantOfShape's output")
    return [cx.const(np.full(shape, value.reshape(-1)[0], value.dtype), "filled")]


@converter("Range", 11)
def range_op(cx, inputs):
    start, limit, delta = (const_value(v, f"Range's {what}")
                           for v, what in zip(inputs, ("start", "limit", "delta")))
    span = (float(limit) - float(start)) / float(delta) if float(delta) else float("inf")
    if not np.isfinite(span):
        raise CompileError(f"Range({start}, {limit}, {delta}) never ends")
    count = max(int(np.ceil(span)), 0)
    check_tensor((count,), inputs[0].dtype, "Range's output")
    return [cx.const(np.arange(start, limit, delta, dtype=inputs[0].dtype), "range")]


@converter("EyeLike", 9)
def eye_like(cx, inputs):
    from ..onnx import np_dtype
    x = inputs[0]
    if len(x.shape) != 2:
        raise CompileError(f"EyeLike needs a 2-D input, got shape {list(x.shape)}")
    dtype = np_dtype(cx.attr("dtype")) if cx.attr("dtype") is not None else x.dtype
    return [cx.const(np.eye(*x.shape, k=cx.attr("k", 0), dtype=dtype), "eye")]


def _data_dependent_shape(cx, inputs):
    raise CompileError(f"the output shape of {cx.node.op_type} depends on the input data, which "
                       "Tensorforge needs at compile time; it works only when its inputs are "
                       "constants")


converter("NonZero", 9)(_data_dependent_shape)
converter("Compress", 9)(_data_dependent_shape)


# ---------------------------------------------------------------- misc

@converter("OneHot", 9)
def one_hot(cx, inputs):
    indices, depth, values = inputs
    depth = int(np.asarray(const_value(depth, "OneHot's depth")).reshape(-1)[0])
    rank = len(indices.shape) + 1
    axis = norm_axis(cx.attr("axis", -1), rank)
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    return [cx.emit1("OneHot", [indices, values], shape, values.dtype,
                     {"axis": axis, "depth": depth})]


@converter("Trilu", 14)
def trilu(cx, inputs):
    x = inputs[0]
    if len(x.shape) < 2:
        raise CompileError(f"Trilu needs a matrix (rank >= 2), got shape {list(x.shape)}")
    present = [v for v in inputs[:2] if v is not None]
    return [cx.emit1("Trilu", present, x.shape, x.dtype, {"upper": bool(cx.attr("upper", 1))})]


@converter("CumSum", 11)
def cumsum(cx, inputs):
    x, axis = inputs
    attrs = {"axis": None, "exclusive": bool(cx.attr("exclusive", 0)),
             "reverse": bool(cx.attr("reverse", 0))}
    if not axis.is_const:  # the result's shape does not depend on it: choose at run time
        return [cx.emit1("CumSum", [x, axis], x.shape, x.dtype, attrs)]
    attrs["axis"] = norm_axis(int(axis.const.reshape(-1)[0]), len(x.shape))
    return [cx.emit1("CumSum", [x], x.shape, x.dtype, attrs)]


@converter("ReverseSequence", 10)
def reverse_sequence(cx, inputs):
    x, lengths = inputs
    attrs = {"batch_axis": cx.attr("batch_axis", 1), "time_axis": cx.attr("time_axis", 0)}
    return [cx.emit1("ReverseSequence", [x, lengths], x.shape, x.dtype, attrs)]
