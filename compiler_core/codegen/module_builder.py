"""One LLVM module per model: kernel functions plus the exported entry points.

Exported C ABI (see model.h):
    int    tf_run(const void *const *inputs, void *const *outputs);      // static arena
    int    tf_run_with_arena(const void *const *inputs, void *const *outputs, void *arena);
    size_t tf_arena_size(void);
    int    tf_profile(inputs, outputs, arena, int64_t *ns);  // adds each kernel's time to ns[k]
    int    tf_num_kernels(void);
    int    tf_set_num_threads(int n);                            // parallel loops (thread_pool.c)
Both entry points run the graph with denormals as zero (codegen/denormals.py).
Weights live in a separate object (`tf_weights`, hidden) assembled from raw bytes, so
hundreds of megabytes of constants never pass through LLVM's textual IR.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..ir import Guard, Value
from ..ir.loops import Kernel
from ..passes.memory_plan import MemoryPlan
from .denormals import wrap_entry
from .lower_kernel import I8, I32, I64, PTR, declare, lower_kernel, mem_type
from .parallel import threads_global


@dataclass
class Step:
    kernel: Kernel | None
    values: list[Value]  # one per kernel param, in order
    guards: tuple[Guard, ...] = ()
    # nonzero: without a kernel, the entry point returns this code (when guards hold); with
    # one, it returns it when the kernel set its error flag (its last value)
    error: int = 0
    message: str = ""  # what that error code means, for meta.json


def build_module(name: str, triple: str, steps: list[Step], plan: MemoryPlan,
                 elsewhere: frozenset[int] = frozenset()) -> ir.Module:
    """`elsewhere`: ids of kernels another module defines (codegen/split_build.py): they
    are declared here, and the thread count is shared with it."""
    module = ir.Module(name=name)
    module.triple = triple
    weights = ir.GlobalVariable(module, ir.ArrayType(I8, max(plan.weights_size, 1)), "tf_weights")
    weights.linkage = "external"
    weights.visibility = "hidden"
    weights.global_constant = True
    lowered: dict[int, ir.Function] = {}  # steps may share one Kernel (driver.lower_graph)
    for s in steps:
        if s.kernel is not None and id(s.kernel) not in lowered:
            lowered[id(s.kernel)] = (declare_kernel(module, s.kernel) if id(s.kernel) in elsewhere
                                     else lower_kernel(module, s.kernel))
    fns = [lowered.get(id(s.kernel)) if s.kernel is not None else None for s in steps]
    entry = wrap_entry(module, _entry(module, "tf_graph", steps, fns, plan, weights),
                       "tf_run_with_arena")
    wrap_entry(module, _entry(module, "tf_graph_profiled", steps, fns, plan, weights,
                              profile=True), "tf_profile")
    _static_entry(module, entry, plan)
    _constant_fn(module, "tf_num_kernels", I32, sum(1 for s in steps if s.kernel))
    set_threads_function(module)
    if elsewhere:  # llvmlite writes the linkage where LLVM reads a visibility
        threads_global(module).linkage = "hidden"
    return module


def declare_kernel(module: ir.Module, kernel: Kernel) -> ir.Function:
    """A kernel of another module of the same library: a hidden function of its name."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * len(kernel.params)),
                     name=kernel.name)
    fn.linkage = "hidden"
    fn.attributes.add("nounwind")
    return fn


def set_threads_function(module) -> None:
    """int tf_set_num_threads(int n): threads for parallel loops from now on; returns n."""
    fn = ir.Function(module, ir.FunctionType(I32, [I32]), name="tf_set_num_threads")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    n = b.select(b.icmp_signed("<", fn.args[0], ir.Constant(I32, 1)), ir.Constant(I32, 1),
                 fn.args[0])
    b.store(n, threads_global(module))
    b.ret(n)


def _entry(module, name, steps, fns, plan, weights, profile=False) -> ir.Function:
    """The whole graph as straight-line calls; `profile` adds a clock read around each."""
    fnty = ir.FunctionType(I32, [PTR, PTR, PTR] + ([PTR] if profile else []))
    fn = ir.Function(module, fnty, name=name)
    fn.attributes.add("nounwind")
    inputs, outputs, arena = fn.args[:3]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    clock = _Clock(module, b) if profile else None
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

    kernel_steps = [(step, kfn) for step, kfn in zip(steps, fns) if kfn is not None]
    slot = {id(step): k for k, (step, _) in enumerate(kernel_steps)}
    for step, kfn in zip(steps, fns):
        if kfn is None:
            with b.if_then(_guard_condition(b, step.guards, pointer)):
                b.ret(ir.Constant(I32, step.error))
            continue
        args = [pointer(v) for v in step.values]
        started = clock.now() if clock else None
        if step.guards:
            cond = _guard_condition(b, step.guards, pointer)
            with b.if_then(cond):
                _call(b, kfn, args, step)
        else:
            _call(b, kfn, args, step)
        if clock:
            clock.accumulate(fn.args[3], slot[id(step)], started)
    b.ret(ir.Constant(I32, 0))
    return fn


def _call(b, kfn, args, step: Step) -> None:
    b.call(kfn, args)
    if step.error:  # the kernel's error flag (its last param) set: return its code
        byte = b.load(args[-1], typ=I8)
        with b.if_then(b.icmp_unsigned("!=", byte, ir.Constant(I8, 0)), likely=False):
            b.ret(ir.Constant(I32, step.error))


class _Clock:
    """clock_gettime(CLOCK_MONOTONIC) around kernel calls, for tf_profile."""
    TIMESPEC = ir.LiteralStructType([I64, I64])

    def __init__(self, module, builder):
        self.b = builder
        self.fn = declare(module, "clock_gettime", I32, [I32, PTR])
        self.slot = builder.alloca(self.TIMESPEC)

    def now(self) -> ir.Value:
        b = self.b
        b.call(self.fn, [ir.Constant(I32, 1), self.slot])
        sec = b.load(b.gep(self.slot, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                           source_etype=self.TIMESPEC), typ=I64)
        nsec = b.load(b.gep(self.slot, [ir.Constant(I32, 0), ir.Constant(I32, 1)],
                            source_etype=self.TIMESPEC), typ=I64)
        return b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)

    def accumulate(self, table, k, started) -> None:
        b = self.b
        slot = b.gep(table, [ir.Constant(I64, k)], source_etype=I64)
        b.store(b.add(b.load(slot, typ=I64), b.sub(self.now(), started)), slot)


def _constant_fn(module, name, ty, value) -> None:
    fn = ir.Function(module, ir.FunctionType(ty, []), name=name)
    ir.IRBuilder(fn.append_basic_block("entry")).ret(ir.Constant(ty, value))


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
    _constant_fn(module, "tf_arena_size", I64, plan.arena_size)
