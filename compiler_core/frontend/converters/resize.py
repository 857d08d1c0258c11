"""Resize and Upsample.

Interpolation is separable and every shape and scale is known at compile time, so for each
resized axis the converter computes, in numpy, which input positions ("taps") each output
position reads and with what weights. The IR node `Resize` carries those tables as
constants; the kernel only gathers and weighs. Every mode, coordinate transformation and
antialiasing is therefore decided here, once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import CompileError
from ..limits import check_tensor
from ..registry import converter
from .common import const_value, norm_axis

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MODES = ("nearest", "linear", "cubic")


@dataclass(frozen=True)
class Interpolation:
    mode: str  # nearest | linear | cubic
    coordinates: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False


@dataclass(frozen=True)
class AxisResize:
    in_len: int
    out_len: int
    scale: float
    roi: tuple[float, float] = (0.0, 1.0)


# ---------------------------------------------------------------- coordinates

def source_coordinates(ax: AxisResize, coordinates: str) -> np.ndarray:
    """Input coordinate of each output position (may fall outside [0, in_len - 1])."""
    y = np.arange(ax.out_len, dtype=np.float64)
    n, scale = ax.in_len, ax.scale
    exact_out = scale * n  # ONNX uses the unrounded output length here
    if coordinates == "asymmetric":
        return y / scale
    if coordinates == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if coordinates == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if exact_out != 1 else np.full_like(y, -0.5)
    if coordinates == "half_pixel_symmetric":
        offset = n / 2 * (1 - ax.out_len / exact_out)
        return offset + (y + 0.5) / scale - 0.5
    if coordinates == "align_corners":
        return y * (n - 1) / (exact_out - 1) if exact_out != 1 else np.zeros_like(y)
    start, end = ax.roi  # tf_crop_and_resize
    if exact_out == 1:
        return np.full_like(y, (end - start) * (n - 1) / 2 + start * (n - 1))
    return y * (end - start) * (n - 1) / (exact_out - 1) + start * (n - 1)


def nearest_index(x: np.ndarray, mode: str, scale: float) -> np.ndarray:
    if mode == "simple":  # Upsample and Resize-10: floor when up-sampling, ceil when down-sampling
        mode = "ceil" if scale < 1 else "floor"
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
                "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}[mode]
    return rounding(x).astype(np.int64)


def cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def linear_kernel(d: np.ndarray) -> np.ndarray:
    return np.clip(1 - np.abs(d), 0, 1)


# ---------------------------------------------------------------- per-axis tables

@dataclass
class AxisTable:
    index: np.ndarray  # (out_len, taps) int64, clamped into the input
    weight: np.ndarray | None  # (out_len, taps) float64; None for nearest (one tap)
    outside: np.ndarray | None  # (out_len,) bool: tf_crop_and_resize extrapolates there


def axis_table(ax: AxisResize, how: Interpolation) -> AxisTable:
    x = source_coordinates(ax, how.coordinates)
    outside = None
    if how.coordinates == "tf_crop_and_resize":
        outside = (x < 0) | (x > ax.in_len - 1)
    if how.mode == "nearest":
        index = nearest_index(x, how.nearest, ax.scale)[:, None]
        return AxisTable(np.clip(index, 0, ax.in_len - 1), None, outside)
    index, weight = _filter_taps(x, ax.scale, how)
    if how.exclude_outside:
        weight = np.where((index < 0) | (index >= ax.in_len), 0.0, weight)
        total = weight.sum(1, keepdims=True)
        weight = weight / np.where(total == 0, 1, total)
    return AxisTable(np.clip(index, 0, ax.in_len - 1), weight, outside)


def _filter_taps(x: np.ndarray, scale: float, how: Interpolation):
    """Taps around floor(x) and their filter weights; antialiasing stretches the filter by
    1/scale when down-sampling, so it covers every input pixel under an output pixel."""
    stretch = min(scale, 1.0) if how.antialias else 1.0
    radius = 1 if how.mode == "linear" else 2
    first = math.floor(-radius / stretch) + 1  # leftmost tap offset with nonzero weight
    offsets = np.arange(first, 1 - first + 1)
    base = np.floor(x).astype(np.int64)
    index = base[:, None] + offsets[None, :]
    distance = (index - x[:, None]) * stretch
    if how.mode == "linear":
        weight = linear_kernel(distance)
    else:
        weight = cubic_kernel(distance, how.cubic_a)
    if how.antialias:
        weight = weight / weight.sum(1, keepdims=True)
    return index, weight


# ---------------------------------------------------------------- emitting

def emit_resize(cx, x, out_shape, scales, how: Interpolation, rois=None, extrapolation=0.0):
    """One IR `Resize` node with the tap tables of every axis whose size or mapping changes."""
    _check_choice("mode", how.mode, MODES)
    check_tensor(out_shape, x.dtype, "Resize's output")  # before its tap tables are built
    rois = rois or [(0.0, 1.0)] * len(x.shape)
    axes = [AxisResize(n, m, s, r) for n, m, s, r in zip(x.shape, out_shape, scales, rois)]
    moved = [d for d, ax in enumerate(axes) if not _is_identity(ax, how)]
    if not moved:
        return x
    inputs = [x]
    for d in moved:
        table = axis_table(axes[d], how)
        inputs.append(cx.const(table.index, "resize_index"))
        if table.weight is not None:
            inputs.append(cx.const(table.weight.astype(_weight_dtype(x.dtype)), "resize_weight"))
        if table.outside is not None:
            inputs.append(cx.const(table.outside, "resize_outside"))
    crop = how.coordinates == "tf_crop_and_resize"
    attrs = {"axes": tuple(moved), "weighted": how.mode != "nearest",
             "extrapolation": float(extrapolation) if crop else None}
    return cx.emit1("Resize", inputs, out_shape, x.dtype, attrs)


def _check_choice(attribute: str, value: str, choices) -> None:
    if value not in choices:
        raise CompileError(f"{attribute} {value!r} is not one of {', '.join(choices)}")


def _weight_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulation type: half sums in float; integer outputs are rounded at the end, so
    they are weighed in double to round where the reference does."""
    if dtype.kind != "f":
        return np.dtype(np.float64)
    return dtype if dtype.itemsize >= 4 else np.dtype(np.float32)


def _is_identity(ax: AxisResize, how: Interpolation) -> bool:
    return (ax.in_len == ax.out_len and math.isclose(ax.scale, 1.0)
            and (how.coordinates != "tf_crop_and_resize"
                 or (math.isclose(ax.roi[0], 0.0) and math.isclose(ax.roi[1], 1.0))))


# ---------------------------------------------------------------- ONNX ops

def _scaled_shape(shape, scales) -> tuple[int, ...]:
    if len(scales) != len(shape):
        raise CompileError(f"{len(scales)} scales for an input of rank {len(shape)}")
    if any(s <= 0 for s in scales):
        raise CompileError(f"scales {list(scales)} must be positive")
    return tuple(int(math.floor(n * s)) for n, s in zip(shape, scales))


def _upsample(cx, x, scales):
    scales = [float(s) for s in scales]
    mode = cx.attr("mode", "nearest")
    how = Interpolation("linear" if mode in ("linear", "bilinear") else mode,
                        coordinates="asymmetric", nearest="simple")
    return [emit_resize(cx, x, _scaled_shape(x.shape, scales), scales, how)]


@converter("Upsample", 7)
def upsample_v7(cx, inputs):
    return _upsample(cx, inputs[0], cx.attr("scales"))


@converter("Upsample", 9)
def upsample_v9(cx, inputs):
    return _upsample(cx, inputs[0], const_value(inputs[1], "Upsample's scales").reshape(-1))


@converter("Resize", 10)
def resize_v10(cx, inputs):
    return _upsample(cx, inputs[0], const_value(inputs[1], "Resize's scales").reshape(-1))


@converter("Resize", 11)
def resize_v11(cx, inputs):
    x, roi, scales, sizes = (list(inputs) + [None] * 4)[:4]
    how = _interpolation(cx)
    rank = len(x.shape)
    axes = [norm_axis(a, rank) for a in cx.attr("axes", range(rank))]
    out_shape, full_scales = _target(cx, x.shape, axes, _present(scales, "scales"),
                                     _present(sizes, "sizes"))
    rois = None
    if how.coordinates == "tf_crop_and_resize":  # roi may be anything in the other modes
        rois = _rois(_present(roi, "roi"), axes, rank)
    fill = cx.attr("extrapolation_value", 0.0)
    return [emit_resize(cx, x, out_shape, full_scales, how, rois, fill)]


def _interpolation(cx) -> Interpolation:
    how = Interpolation(cx.attr("mode", "nearest"),
                        cx.attr("coordinate_transformation_mode", "half_pixel"),
                        cx.attr("nearest_mode", "round_prefer_floor"),
                        cx.attr("cubic_coeff_a", -0.75),
                        bool(cx.attr("exclude_outside", 0)), bool(cx.attr("antialias", 0)))
    _check_choice("coordinate_transformation_mode", how.coordinates, COORDINATE_MODES)
    if how.mode == "nearest":
        _check_choice("nearest_mode", how.nearest, NEAREST_MODES)
        if how.antialias:
            raise CompileError("antialias applies only to linear and cubic resize; remove it")
    return how


def _present(v, what):
    """An optional constant input; an empty tensor counts as absent (as opset 11 requires)."""
    value = const_value(v, f"Resize's {what}")
    return None if value is None or value.size == 0 else value.reshape(-1)


def _target(cx, shape, axes, scales, sizes):
    """Output shape and the per-axis scale used for coordinates, for all axes."""
    if (scales is None) == (sizes is None):
        raise CompileError("Resize needs exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise CompileError(f"Resize got {len(given)} {'scales' if sizes is None else 'sizes'} "
                           f"for {len(axes)} axes")
    full_scales = [1.0] * len(shape)
    out = list(shape)
    if scales is not None:
        for a, s in zip(axes, scales):
            full_scales[a] = float(s)
        return _scaled_shape(shape, full_scales), full_scales
    for a, n in zip(axes, sizes):
        full_scales[a] = int(n) / shape[a]
    policy = cx.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = {"not_larger": min, "not_smaller": max}.get(policy)
        if pick is None:
            raise CompileError(f"keep_aspect_ratio_policy {policy!r} is not stretch, not_larger "
                               "or not_smaller")
        common = pick(full_scales[a] for a in axes)
        for a in axes:
            full_scales[a] = common
            out[a] = int(common * shape[a] + 0.5)
        return tuple(out), full_scales
    for a, n in zip(axes, sizes):
        out[a] = int(n)
    return tuple(out), full_scales


def _rois(roi, axes, rank):
    if roi is None:
        raise CompileError("tf_crop_and_resize needs the roi input")
    if len(roi) != 2 * len(axes):
        raise CompileError(f"roi has {len(roi)} values; it needs starts and ends for "
                           f"{len(axes)} axes")
    rois = [(0.0, 1.0)] * rank
    for k, a in enumerate(axes):
        rois[a] = (float(roi[k]), float(roi[k + len(axes)]))
    return rois
