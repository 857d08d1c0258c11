"""Einsum as one loop nest: output indices outside, contracted indices inside."""
from __future__ import annotations

from ..ir.loops import Const
from .registry import lowering


@lowering("Einsum")
def lower_einsum(node, kb, ins, outs):
    terms, out_letters, extents = node.attrs["terms"], node.attrs["out"], node.attrs["extents"]
    summed = sorted(set("".join(terms)) - set(out_letters))
    y = outs[0]
    with kb.loops(y.shape) as out_idx:
        index = dict(zip(out_letters, out_idx))
        acc = kb.local(y.dtype, 0)
        with kb.loops([extents[c] for c in summed]) as sum_idx:
            index.update(zip(summed, sum_idx))
            product = None
            for term, buf in zip(terms, ins):
                # size-1 operand dims broadcast against the index's full extent
                idx = tuple(Const(0) if d == 1 and extents[c] != 1 else index[c]
                            for c, d in zip(term, buf.shape))
                product = buf[idx] if product is None else product * buf[idx]
            kb.set(acc, kb.get(acc) + product)
        kb.store(y, out_idx, kb.get(acc))
