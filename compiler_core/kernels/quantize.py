"""Kernels for quantization helpers (QuantizeLinear itself is elementwise)."""
from __future__ import annotations

import numpy as np

from ..ir.loops import call, cast, maximum, minimum
from .registry import lowering


@lowering("RepeatAlongAxis")
def lower_repeat_along_axis(node, kb, ins, outs):
    """out[..., i, ...] = in[..., i // repeats, ...]: one scale per block of elements."""
    x, y = ins[0], outs[0]
    axis, repeats = node.attrs["axis"], node.attrs["repeats"]
    with kb.loops(y.shape) as idx:
        src = tuple(i // repeats if d == axis else i for d, i in enumerate(idx))
        kb.store(y, idx, x[src])


@lowering("DynamicQuantizeLinear")
def lower_dynamic_quantize(node, kb, ins, outs):
    """uint8 affine quantisation whose range is the data's own [min, max] widened to hold 0."""
    x = ins[0]
    y, scale_out, zp_out = outs
    f32 = np.dtype(np.float32)
    lo, hi = kb.local(f32, 0.0), kb.local(f32, 0.0)
    with kb.loop(x.size) as i:
        kb.set(lo, minimum(kb.get(lo), x.flat(i)))
        kb.set(hi, maximum(kb.get(hi), x.flat(i)))
    scale = kb.local(f32, (kb.get(hi) - kb.get(lo)) / 255.0)
    zp = kb.local(f32, maximum(0.0, minimum(255.0, call("round", (0.0 - kb.get(lo)) / kb.get(scale)))))
    kb.store(scale_out, (), kb.get(scale))
    kb.store(zp_out, (), cast(kb.get(zp), np.uint8))
    with kb.loop(x.size) as i:
        q = call("round", x.flat(i) / kb.get(scale)) + kb.get(zp)
        kb.store_flat(y, i, cast(maximum(0.0, minimum(255.0, q)), np.uint8))
