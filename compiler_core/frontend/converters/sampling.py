"""Converters for GridSample and RoiAlign (kernels in kernels/sampling.py)."""
from __future__ import annotations

from ...errors import CompileError
from ..registry import converter

# opset 16 spelled the modes after their 2-D forms; opset 20 generalised them to N-D
GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
              "bicubic": "cubic", "cubic": "cubic"}
PADDING_MODES = ("zeros", "border", "reflection")


@converter("GridSample", 16)
def grid_sample(cx, inputs):
    x, grid = inputs
    rank = len(x.shape) - 2
    if rank < 1 or len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
        raise CompileError(f"GridSample needs X (N, C, D1..Dr) and grid (N, H1..Hr, r); got "
                           f"{list(x.shape)} and {list(grid.shape)}")
    if cx.opset < 20 and rank != 2:
        raise CompileError(f"GridSample before opset 20 is 2-D only; got a {rank}-D input")
    if grid.shape[0] != x.shape[0]:
        raise CompileError(f"GridSample's grid batch {grid.shape[0]} differs from X's {x.shape[0]}")
    if x.dtype.kind != "f" or grid.dtype.kind != "f":
        raise CompileError(f"GridSample takes float X and grid, got {x.dtype} and {grid.dtype}")
    mode = cx.attr("mode", "bilinear" if cx.opset < 20 else "linear")
    padding = cx.attr("padding_mode", "zeros")
    if mode not in GRID_MODES:
        raise CompileError(f"GridSample mode {mode!r} is not one of {sorted(GRID_MODES)}")
    if padding not in PADDING_MODES:
        raise CompileError(f"GridSample padding_mode {padding!r} is not one of {PADDING_MODES}")
    attrs = {"mode": GRID_MODES[mode], "padding_mode": padding,
             "align_corners": bool(cx.attr("align_corners", 0))}
    shape = (*x.shape[:2], *grid.shape[1:-1])
    return [cx.emit1("GridSample", [x, grid], shape, x.dtype, attrs)]


@converter("RoiAlign", 10)
def roi_align(cx, inputs):
    x, rois, batch_indices = inputs
    if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4:
        raise CompileError(f"RoiAlign needs X (N, C, H, W) and rois (R, 4); got {list(x.shape)} "
                           f"and {list(rois.shape)}")
    if batch_indices.shape != rois.shape[:1]:
        raise CompileError(f"RoiAlign's batch_indices {list(batch_indices.shape)} must have one "
                           f"entry per roi ({rois.shape[0]})")
    mode = cx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise CompileError(f"RoiAlign mode {mode!r} is not 'avg' or 'max'")
    # opset 10 had no attribute and behaved as 'output_half_pixel'
    transform = cx.attr("coordinate_transformation_mode",
                        "half_pixel" if cx.opset >= 16 else "output_half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        raise CompileError(f"RoiAlign coordinate_transformation_mode {transform!r} is not "
                           "'half_pixel' or 'output_half_pixel'")
    out_h, out_w = int(cx.attr("output_height", 1)), int(cx.attr("output_width", 1))
    attrs = {"mode": mode, "half_pixel": transform == "half_pixel",
             "sampling_ratio": int(cx.attr("sampling_ratio", 0)),
             "spatial_scale": float(cx.attr("spatial_scale", 1.0))}
    shape = (rois.shape[0], x.shape[1], out_h, out_w)
    return [cx.emit1("RoiAlign", [x, rois, batch_indices], shape, x.dtype, attrs)]
