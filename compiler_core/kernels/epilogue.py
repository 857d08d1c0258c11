"""Epilogues: what a producer (Conv, Gemm, PackedGemm) applies to each result on its way to
memory, so fused activations cost no extra pass (passes/fuse_activation.py decides).

Every function here works on scalars and on vectors alike (the loop IR splats constants).
"""
from __future__ import annotations

from ..ir.loops import Expr, as_expr, select


def apply_activation(name: str | None, value: Expr) -> Expr:
    """Activations fused into a producer's store (see passes/fuse_activation.py)."""
    if not name:
        return value
    if name == "Relu":
        # a select, not llvm.maximum: AVX2 has no cheap NaN-propagating max, and an epilogue
        # the SLP vectorizer finds expensive leaves the whole register tile scalar.
        # NaN < 0 is false, so NaN still propagates as ONNX's Relu requires.
        zero = as_expr(0.0, value.dtype)
        return select(value < zero, zero, value)
    raise ValueError(f"unknown fused activation {name!r}")
