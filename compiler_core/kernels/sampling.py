"""Kernels for GridSample and RoiAlign: interpolated reads at data-dependent positions."""
from __future__ import annotations

import itertools

from ..ir.loops import BOOL, INDEX, as_expr, call, cast, maximum, minimum, select
from .bounds import IndexCheck
from .registry import lowering

CUBIC_ALPHA = -0.75  # Keys' cubic convolution, as PyTorch and ONNX use


def _clamp(i, lo, hi):
    return minimum(maximum(i, lo), hi)


def _tame(v, lo: float, hi: float):
    """A coordinate from run-time data, kept where converting it to an index is defined:
    NaN and anything below `lo` become `lo`, anything above `hi` becomes `hi`."""
    return select(v > hi, hi, select(v >= lo, v, lo))


def _reflect(kb, v, lo: float, hi: float):
    """Fold v back into [lo, hi] by mirroring at the borders as often as it takes."""
    span = hi - lo
    if span == 0:
        return as_expr(lo, v.dtype)
    below, above = v < lo, v > hi
    dist = kb.local(v.dtype, select(below, lo - v, v - hi), "dist")
    flips = kb.local(v.dtype, call("floor", kb.get(dist) / span), "flips")
    rest = kb.get(dist) - kb.get(flips) * span
    even = (kb.get(flips) - 2 * call("floor", kb.get(flips) / 2)).eq(0)
    toward_hi, toward_lo = lo + rest, hi - rest
    return select(below, select(even, toward_hi, toward_lo),
                  select(above, select(even, toward_lo, toward_hi), v))


# ---------------------------------------------------------------- GridSample

class _GridAxis:
    """One spatial axis of a GridSample input: coordinate mapping and tap fetching."""

    def __init__(self, kb, size: int, attrs: dict, dtype):
        self.kb, self.size, self.dtype = kb, size, dtype
        self.mode, self.padding = attrs["mode"], attrs["padding_mode"]
        self.align = attrs["align_corners"]
        # the valid coordinate range: pixel centres, or pixel edges without align_corners
        self.lo, self.hi = (0.0, size - 1.0) if self.align else (-0.5, size - 0.5)

    def source(self, g):
        """Normalised grid value in [-1, 1] -> pixel coordinate, borders applied."""
        if self.align:
            v = (g + 1.0) / 2.0 * float(self.size - 1)
        else:
            v = ((g + 1.0) * float(self.size) - 1.0) / 2.0
        if self.mode == "nearest":
            v = call("round", v)  # half to even, as PyTorch
        v = self.kb.local(self.dtype, v, "src")
        outside = (self.kb.get(v) < self.lo) | (self.kb.get(v) > self.hi)
        if self.padding == "border":
            self.kb.set(v, select(outside, _clamp(self.kb.get(v), 0.0, self.size - 1.0),
                                  self.kb.get(v)))
        elif self.padding == "reflection":
            self.kb.set(v, _reflect(self.kb, self.kb.get(v), self.lo, self.hi))
        return _tame(self.kb.get(v), self.lo - 4.0, self.hi + 4.0)

    def taps(self, v) -> list[tuple]:
        """[(pixel index, weight or None)] of the interpolation along this axis."""
        if self.mode == "nearest":
            return [(cast(v, INDEX), None)]
        base = self.kb.local(self.dtype, call("floor", v), "base")
        t = self.kb.local(self.dtype, v - self.kb.get(base), "frac")
        first = cast(self.kb.get(base), INDEX)
        if self.mode == "linear":
            return [(first, 1.0 - self.kb.get(t)), (first + 1, self.kb.get(t))]
        weights = _cubic_weights(self.kb.get(t))
        return [(first + (k - 1), w) for k, w in enumerate(weights)]

    def pixel(self, i) -> tuple:
        """(in-bounds index, validity or None) of integer tap position i."""
        kb, last = self.kb, self.size - 1
        if self.padding == "zeros":
            valid = kb.local(BOOL, (i >= 0) & (i < self.size), "valid")
            return kb.local(INDEX, _clamp(i, 0, last), "tap"), valid
        if self.padding == "reflection":
            i = cast(_reflect(kb, cast(i, self.dtype), self.lo, self.hi), INDEX)
        return kb.local(INDEX, _clamp(i, 0, last), "tap"), None


def _cubic_weights(t):
    a = CUBIC_ALPHA

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1.0

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


@lowering("GridSample")
def lower_grid_sample(node, kb, ins, outs):
    (x, grid), y = ins, outs[0]
    rank = len(x.shape) - 2
    axes = [_GridAxis(kb, n, node.attrs, x.dtype) for n in x.shape[2:]]
    with kb.loop(x.shape[0]) as n, kb.loops(grid.shape[1:-1]) as at:
        per_axis = []
        for d, axis in enumerate(axes):
            # grid components run x, y, z: the reverse of the spatial axes' order
            coord = axis.source(cast(grid[(n, *at, rank - 1 - d)], x.dtype))
            per_axis.append([(*axis.pixel(i), w) for i, w in axis.taps(coord)])
        with kb.loop(x.shape[1]) as c:
            total = None
            for combo in itertools.product(*per_axis):
                total = _add(total, _tap_value(kb, x, n, c, combo))
            kb.store(y, (n, c, *at), total)


def _tap_value(kb, x, n, c, combo):
    value = x[(n, c, *[kb.get(i) for i, _, _ in combo])]
    valid = [kb.get(v) for _, v, _ in combo if v is not None]
    if valid:
        value = select(_all(valid), value, 0.0)
    for _, _, w in combo:
        if w is not None:
            value = value * w
    return value


def _all(conds):
    out = conds[0]
    for cond in conds[1:]:
        out = out & cond
    return out


def _add(total, value):
    return value if total is None else total + value


# ---------------------------------------------------------------- RoiAlign

class _RoiBox:
    """One region in input pixels: start, bin size and samples per bin along y and x."""

    def __init__(self, kb, rois, r, attrs, out_hw, dtype):
        offset = 0.5 if attrs["half_pixel"] else 0.0
        scale = attrs["spatial_scale"]
        corner = [kb.local(dtype, cast(rois[r, k], dtype) * scale - offset, "roi")
                  for k in range(4)]
        self.start = [kb.get(corner[1]), kb.get(corner[0])]  # rois hold (x1, y1, x2, y2)
        self.bin, self.samples = [], []
        for d, (lo, hi) in enumerate([(corner[1], corner[3]), (corner[0], corner[2])]):
            extent = kb.get(hi) - kb.get(lo)
            if not attrs["half_pixel"]:  # the legacy mode never shrinks a region below a pixel
                extent = maximum(extent, 1.0)
            extent = kb.get(kb.local(dtype, extent, "extent"))
            self.bin.append(kb.get(kb.local(dtype, extent / float(out_hw[d]), "bin")))
            count = _samples_per_bin(attrs["sampling_ratio"], extent, out_hw[d])
            self.samples.append(kb.get(kb.local(INDEX, count, "samples")))

    def sample_at(self, d, bin_index, sample):
        """Coordinate of sample `sample` of bin `bin_index` along axis d (0: y, 1: x)."""
        dtype = self.bin[d].dtype
        return (self.start[d] + cast(bin_index, dtype) * self.bin[d]
                + (cast(sample, dtype) + 0.5) * self.bin[d] / cast(self.samples[d], dtype))


def _samples_per_bin(ratio: int, extent, bins: int):
    if ratio > 0:
        return as_expr(ratio)
    # sampling_ratio 0: as many samples as the bin is pixels wide, rounded up
    return cast(call("ceil", _tame(extent / float(bins), 0.0, float(2**31))), INDEX)


def _bilinear_corners(kb, pos, size, dtype):
    """[(index, weight), (index, weight)] of a bilinear read along one axis, clamped as
    Caffe2/ONNX do: negative positions read pixel 0, positions past the end the last pixel."""
    pos = kb.local(dtype, _tame(pos, 0.0, float(size)), "pos")
    low = kb.local(INDEX, cast(kb.get(pos), INDEX), "low")
    at_end = kb.get(low) >= size - 1
    kb.set(low, select(at_end, as_expr(size - 1), kb.get(low)))
    high = select(at_end, kb.get(low), kb.get(low) + 1)
    frac = kb.local(dtype, select(at_end, 0.0, kb.get(pos) - cast(kb.get(low), dtype)), "frac")
    return [(kb.get(low), 1.0 - kb.get(frac)), (high, kb.get(frac))]


def _roi_sample(kb, x, b, c, yy, xx):
    """Products weight * pixel of the four corners around (yy, xx); zeros outside the map."""
    height, width = x.shape[2:]
    dtype = x.dtype
    inside = (yy >= -1.0) & (yy <= float(height)) & (xx >= -1.0) & (xx <= float(width))
    outside = ~inside  # NaN positions too
    rows = _bilinear_corners(kb, yy, height, dtype)
    cols = _bilinear_corners(kb, xx, width, dtype)
    return [select(outside, 0.0, wy * wx * x[b, c, iy, ix])
            for (iy, wy), (ix, wx) in itertools.product(rows, cols)]


@lowering("RoiAlign", checks="a batch index is outside the input's batch")
def lower_roi_align(node, kb, ins, outs):
    (x, rois, batch_indices), (y, flag) = ins, outs
    mode, dtype = node.attrs["mode"], x.dtype
    out_hw = y.shape[2:]
    check = IndexCheck(kb, flag)
    with kb.loop(y.shape[0]) as r:
        b = kb.local(INDEX, check.index(batch_indices[(r,)], x.shape[0], wrap=False), "batch")
        box = _RoiBox(kb, rois, r, node.attrs, out_hw, dtype)
        count = maximum(box.samples[0] * box.samples[1], 1)
        with kb.loops(y.shape[1:]) as (c, ph, pw):
            acc = kb.local(dtype, 0.0, "acc")
            seen = kb.local(BOOL, False, "seen")
            with kb.loop(box.samples[0]) as iy, kb.loop(box.samples[1]) as ix:
                yy = kb.local(dtype, box.sample_at(0, ph, iy), "yy")
                xx = kb.local(dtype, box.sample_at(1, pw, ix), "xx")
                corners = _roi_sample(kb, x, kb.get(b), c, kb.get(yy), kb.get(xx))
                if mode == "avg":
                    kb.set(acc, kb.get(acc) + _sum(corners))
                else:
                    best = _max(corners)
                    kb.set(acc, select(kb.get(seen), maximum(kb.get(acc), best), best))
                    kb.set(seen, True)
            result = kb.get(acc) / cast(count, dtype) if mode == "avg" else kb.get(acc)
            kb.store(y, (r, c, ph, pw), result)
    check.finish()


def _sum(values):
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def _max(values):
    best = values[0]
    for v in values[1:]:
        best = maximum(best, v)
    return best
