"""Epilogues: what a producer (Conv, Gemm, PackedGemm, SparseGemm) applies to each result on
its way to memory, so fused activations cost no extra pass (passes/fuse_activation.py
decides what to fuse).

An activation is either an op name ("Relu") or an elementwise program, a dict with the
`program` of a "Fused" node (passes/fuse_elementwise.py) and its `inputs`: None for the
producer's result, a number for each scalar constant, ["operand", j] for the j-th tensor
the producer reads for its epilogue (its value at the element: `operands[j]`).
x * Sigmoid(x) (SiLU), HardSwish and the Erf form of GELU are such programs. Every
function here works on scalars and on vectors alike (the loop IR splats constants).
"""
from __future__ import annotations

from ..ir.loops import Expr, as_expr, select
from .elementwise import run_program


def apply_activation(activation: str | dict | None, value: Expr, operands=()) -> Expr:
    if not activation:
        return value
    if activation == "Relu":
        # a select, not llvm.maximum: AVX2 has no cheap NaN-propagating max, and an epilogue
        # the SLP vectorizer finds expensive leaves the whole register tile scalar.
        # NaN < 0 is false, so NaN still propagates as ONNX's Relu requires.
        zero = as_expr(0.0, value.dtype)
        return select(value < zero, zero, value)
    if isinstance(activation, dict):
        return _run_program(activation, value, operands)
    raise ValueError(f"unknown fused activation {activation!r}")


def is_heavy(activation: str | dict | None) -> bool:
    """Whether the activation is more than a compare and select (see matmul.Output)."""
    return bool(activation) and activation != "Relu"


# what an epilogue program may do and still count as arithmetic (see is_arithmetic)
ARITHMETIC_OPS = {"Add", "Sub", "Mul", "Div", "Neg"}


def is_arithmetic(activation: str | dict | None) -> bool:
    """Whether the activation is a program of plain arithmetic (a scale, a mask added),
    cheap enough for the register tiles whatever their shape."""
    return isinstance(activation, dict) and all(
        op in ARITHMETIC_OPS for op, _, _ in activation["program"])


def _run_program(activation: dict, value: Expr, operands) -> Expr:
    inputs = [value if c is None else operands[c[1]] if isinstance(c, list)
              else as_expr(c, value.dtype) for c in activation["inputs"]]
    return run_program(activation["program"], inputs)
