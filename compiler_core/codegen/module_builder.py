"""One LLVM module per model: kernel functions plus the exported entry points.

Exported C ABI (see model.h):
    int    tf_run(const void *const *inputs, void *const *outputs);      // static arena
    int    tf_run_with_arena(const void *const *inputs, void *const *outputs, void *arena);
    size_t tf_arena_size(void);
Weights live in a separate object (`tf_weights`, hidden) assembled from raw bytes, so
hundreds of megabytes of constants never pass through LLVM's textual IR.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..ir import Guard, Value
from ..ir.loops import Kernel
from ..passes.memory_plan import MemoryPlan
from .lower_kernel import I8, I32, I64, PTR, lower_kernel, mem_type


@dataclass
class Step:
    kernel: Kernel
    values: list[Value]  # one per kernel param, in order
    guards: tuple[Guard, ...] = ()


def build_module(name: str, triple: str, steps: list[Step], plan: MemoryPlan) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = triple
    weights = ir.GlobalVariable(module, ir.ArrayType(I8, max(plan.weights_size, 1)), "tf_weights")
    weights.linkage = "external"
    weights.visibility = "hidden"
    weights.global_constant = True
    fns = [lower_kernel(module, s.kernel) for s in steps]
    entry = _entry(module, steps, fns, plan, weights)
    _static_entry(module, entry, plan)
    return module


def _entry(module, steps, fns, plan, weights) -> ir.Function:
    fnty = ir.FunctionType(I32, [PTR, PTR, PTR])
    fn = ir.Function(module, fnty, name="tf_run_with_arena")
    fn.attributes.add("nounwind")
    inputs, outputs, arena = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    cache: dict[Value, ir.Value] = {}

    def pointer(v: Value) -> ir.Value:
        if v not in cache:
            loc = plan.locations[v]
            if loc.kind in ("input", "output"):
                table = inputs if loc.kind == "input" else outputs
                slot = b.gep(table, [ir.Constant(I64, loc.index)], source_etype=PTR)
                cache[v] = b.load(slot, typ=PTR)
            else:
                base = weights if loc.kind == "const" else arena
                cache[v] = b.gep(base, [ir.Constant(I64, loc.index)], source_etype=I8)
        return cache[v]

    for step, kfn in zip(steps, fns):
        args = [pointer(v) for v in step.values]
        if step.guards:
            cond = _guard_condition(b, step.guards, pointer)
            with b.if_then(cond):
                b.call(kfn, args)
        else:
            b.call(kfn, args)
    b.ret(ir.Constant(I32, 0))
    return fn


def _guard_condition(b, guards, pointer):
    cond = ir.Constant(ir.IntType(1), 1)
    for g in guards:
        byte = b.load(pointer(g.cond), typ=mem_type(g.cond.dtype))
        truth = b.icmp_unsigned("!=", byte, ir.Constant(byte.type, 0))
        cond = b.and_(cond, truth if g.when else b.not_(truth))
    return cond


def _static_entry(module, entry, plan) -> None:
    arena_type = ir.ArrayType(I8, max(plan.arena_size, 1))
    arena = ir.GlobalVariable(module, arena_type, "tf_arena")
    arena.linkage = "internal"
    arena.initializer = ir.Constant(arena_type, None)
    arena.align = 64
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, PTR]), name="tf_run")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.call(entry, [*fn.args, arena]))
    size_fn = ir.Function(module, ir.FunctionType(I64, []), name="tf_arena_size")
    ir.IRBuilder(size_fn.append_basic_block("entry")).ret(ir.Constant(I64, plan.arena_size))
