"""Size caps a model must respect before the compiler allocates anything for it.

A hostile model can declare a 2^62-element input, pad or resize a tensor into terabytes, or
ship an initializer whose raw bytes do not match its shape. Every tensor the importer creates
(inputs, initializers, node outputs, constants it folds) is checked against a per-tensor cap,
and the planned arena against an arena cap, from shapes alone, so the refusal comes before
any buffer of that size exists. Both caps are set from the environment.
"""
from __future__ import annotations

import math
import os

import numpy as np
import onnx

from ..errors import CompileError

DEFAULT_MAX_TENSOR_BYTES = 2 * 2**30
DEFAULT_MAX_ARENA_BYTES = 4 * 2**30


def _cap(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise CompileError(f"{name}={raw!r} is not a number of bytes") from None


def max_tensor_bytes() -> int:
    return _cap("TENSORFORGE_MAX_TENSOR_BYTES", DEFAULT_MAX_TENSOR_BYTES)


def max_arena_bytes() -> int:
    return _cap("TENSORFORGE_MAX_ARENA_BYTES", DEFAULT_MAX_ARENA_BYTES)


def human(nbytes: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


def check_tensor(shape, dtype, what: str) -> None:
    """Refuse negative dims and tensors over TENSORFORGE_MAX_TENSOR_BYTES (Python ints: no
    overflow however large the dims)."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise CompileError(f"{what} has a negative dimension in shape {dims}")
    nbytes = math.prod(dims) * np.dtype(dtype).itemsize
    if nbytes > max_tensor_bytes():
        raise CompileError(f"{what} would have shape {dims} ({human(nbytes)}), over the "
                           f"per-tensor limit of {human(max_tensor_bytes())} "
                           "(TENSORFORGE_MAX_TENSOR_BYTES); check the model's sizes, pads, "
                           "scales and repeats")


def check_arena(nbytes: int) -> None:
    if nbytes > max_arena_bytes():
        raise CompileError(f"the model needs {human(nbytes)} of working memory for its "
                           f"intermediate tensors, over the limit of {human(max_arena_bytes())}"
                           " (TENSORFORGE_MAX_ARENA_BYTES); use smaller input shapes")


def _stored_count(t: onnx.TensorProto) -> tuple[int, int] | None:
    """(values stored, values the dims need) for a tensor whose data is inside the proto."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        field = onnx.helper.tensor_dtype_to_field(t.data_type)
    except (KeyError, TypeError, ValueError):
        return None  # element types the importer refuses with its own message
    if dtype.kind not in "biufc":
        return None  # packed or exotic types (int4, bfloat16, strings): refused later
    needed = math.prod(t.dims)
    if t.HasField("raw_data"):
        return len(t.raw_data), needed * dtype.itemsize
    per_value = 2 if dtype.kind == "c" else 1
    return len(getattr(t, field)), needed * per_value


def check_tensor_proto(t: onnx.TensorProto, what: str) -> None:
    """Dims within the caps and data that fills exactly those dims."""
    check_tensor(t.dims, np.uint8, what)  # the byte count is checked per dtype below
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return  # checked when the external data is read (model_file)
    counts = _stored_count(t)
    if counts is None:
        return
    stored, needed = counts
    if stored != needed:
        unit = "bytes of raw data" if t.HasField("raw_data") else "values"
        raise CompileError(f"{what} has shape {list(t.dims)}, which needs {needed} {unit}, "
                           f"but the file holds {stored}: the tensor is corrupt or truncated")
    check_tensor(t.dims, onnx.helper.tensor_dtype_to_np_dtype(t.data_type), what)
