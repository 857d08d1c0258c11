"""Einsum: the equation is parsed at compile time into one generic contraction node."""
from __future__ import annotations

import re

from ...errors import CompileError
from ..registry import converter


def parse_equation(equation: str, shapes: list[tuple]) -> tuple[list[str], str, dict]:
    """-> (input subscripts, output subscripts, letter -> extent), with '...' expanded."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise CompileError(f"Einsum equation {equation!r} has {len(terms)} operands, got {len(shapes)}")
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq)
    ellipsis_dims = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                         if "..." in t), default=0)
    ell = "".join(next(spare) for _ in range(ellipsis_dims))
    terms = [_expand(t, s, ell) for t, s in zip(terms, shapes)]
    extents: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape):
            raise CompileError(f"Einsum term {term!r} does not match operand rank {len(shape)}")
        for letter, dim in zip(term, shape):
            if extents.get(letter, dim) != dim and 1 not in (dim, extents[letter]):
                raise CompileError(f"Einsum index {letter!r} has extents {extents[letter]} and {dim}")
            extents[letter] = max(extents.get(letter, dim), dim)
    if "->" in eq:
        out = rhs.replace("...", ell)
    else:  # implicit form: letters seen once, alphabetical, after the broadcast dims
        counts = "".join(terms)
        out = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in ell))
    if not re.fullmatch(r"[A-Za-z]*", out):
        raise CompileError(f"Einsum output {rhs!r} is not a list of subscripts")
    return terms, out, extents


def _expand(term: str, shape: tuple, ell: str) -> str:
    if "..." not in term:
        return term
    n = len(shape) - len(term.replace("...", ""))
    return term.replace("...", ell[len(ell) - n:] if n else "")


@converter("Einsum", 12)
def einsum(cx, inputs):
    terms, out, extents = parse_equation(cx.attr("equation"), [v.shape for v in inputs])
    dtype = inputs[0].dtype
    shape = tuple(extents[c] for c in out)
    return [cx.emit1("Einsum", inputs, shape, dtype, {"terms": terms, "out": out,
                                                      "extents": extents})]
