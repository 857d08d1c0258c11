"""Denormal floats flushed to zero while the model runs (x86: MXCSR's FTZ and DAZ bits).

Intel cores take a microcode assist, about a hundred cycles, for every arithmetic
instruction that reads or makes a denormal. Attention's softmax makes them by the
thousand (exp of a large negative score), and the product with V then ran at 4 GFLOP/s:
BERT-384 took 245 ms instead of 75 on a Sapphire Rapids-class Xeon. Values below 1.2e-38
are far below anything a model's outputs resolve, so every entry point and every thread
of a parallel region computes with them as zero, and puts the caller's setting back when
it returns (MXCSR is per thread, and the caller's numpy must see IEEE behaviour). Arm
cores handle denormals at full speed, so their code is left alone.
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from .lower_kernel import I32, PTR, declare

FTZ_DAZ = 0x8040  # MXCSR bit 15 flushes results, bit 6 reads denormal inputs as zero


def _mxcsr(module: ir.Module, op: str) -> ir.Function:
    """llvm.x86.sse.stmxcsr (store MXCSR to a slot) or ldmxcsr (load it from one)."""
    return declare(module, f"llvm.x86.sse.{op}mxcsr", ir.VoidType(), [PTR])


@contextmanager
def denormals_as_zero(module: ir.Module, b: ir.IRBuilder, slot_builder: ir.IRBuilder):
    """Code emitted inside the block runs with FTZ and DAZ set; the block must not return.
    `slot_builder` places the stack slot (a function's entry block)."""
    if not module.triple.startswith("x86_64"):
        yield
        return
    slot = slot_builder.alloca(I32, name="mxcsr")
    b.call(_mxcsr(module, "st"), [slot])
    saved = b.load(slot, typ=I32)
    b.store(b.or_(saved, ir.Constant(I32, FTZ_DAZ)), slot)
    b.call(_mxcsr(module, "ld"), [slot])
    yield
    b.store(saved, slot)
    b.call(_mxcsr(module, "ld"), [slot])


def wrap_entry(module: ir.Module, inner: ir.Function, name: str) -> ir.Function:
    """`name`: calls `inner` (made internal) with denormals as zero, returns its result."""
    inner.linkage = "internal"
    fn = ir.Function(module, inner.function_type, name=name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with denormals_as_zero(module, b, b):
        result = b.call(inner, list(fn.args))
    b.ret(result)
    return fn
