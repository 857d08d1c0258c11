"""Checked run-time indices for kernels that address memory with data (see registry.CHECKS).

An index out of range is clamped to 0 for the access, so no load or store ever leaves its
buffer, and remembered in a local; the kernel stores the local into its error flag once at
the end. The check is an or-reduction with no branch in the loop body.
"""
from __future__ import annotations

from ..ir.loops import BOOL, INDEX, Buf, as_expr, cast, select


class IndexCheck:
    def __init__(self, kb, flag: Buf):
        self.kb, self.flag = kb, flag
        self.bad = kb.local(BOOL, False, "out_of_range")

    def index(self, e, dim: int, wrap: bool = True):
        """Index `e` (any integer dtype) as int64, negatives counted from the end when `wrap`;
        out of [0, dim) it counts as an error and reads position 0."""
        e = cast(e, INDEX)
        if wrap:
            e = select(e < 0, e + dim, e)
        return self.within(e, 0, dim - 1)

    def within(self, e, low, high):
        """`e` if low <= e <= high, else `low` and the error flag set."""
        bad = (e < low) | (e > high)
        self.kb.set(self.bad, self.kb.get(self.bad) | bad)
        return select(bad, as_expr(low), e)

    def finish(self) -> None:
        self.kb.store(self.flag, (0,), self.kb.get(self.bad))
