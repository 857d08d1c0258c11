"""Parallel loops on libgomp's thread pool.

A top-level `For(kind="parallel")` of a kernel is outlined into a range function
`name.rangeN(params..., lo, hi)` (noalias params, so it vectorises like any kernel). With
one thread the kernel calls it once over the whole range, so threads=1 pays nothing; with
more, GOMP_parallel runs a trampoline on every thread that takes an even chunk (with
denormals as zero, as the entry point runs: codegen/denormals.py).
"""
from __future__ import annotations

from llvmlite import ir

from ..ir import loops as L
from .denormals import denormals_as_zero
from .lower_kernel import I32, I64, PTR, KernelLowering, RawIndex, declare

THREADS = "tf_num_threads"


def threads_global(module: ir.Module) -> ir.GlobalVariable:
    g = module.globals.get(THREADS)
    if g is None:
        g = ir.GlobalVariable(module, I32, THREADS)
        g.linkage = "internal"
        g.initializer = ir.Constant(I32, 1)
    return g


def uses_openmp(module: ir.Module) -> bool:
    return "GOMP_parallel" in module.globals


def _range_function(parent: KernelLowering, s: L.For) -> ir.Function:
    sub = KernelLowering(parent.module, parent.kernel,
                         name=f"{parent.kernel.name}.range{parent.outlined}", index_args=2)
    parent.outlined += 1
    lo, hi = sub.fn.args[-2:]
    sub.depth = 1  # the loop below is the outlined one: nested parallel loops stay serial
    sub.stmts([L.For(s.var, RawIndex(lo), RawIndex(hi), s.body, "serial")])
    sub.b.ret_void()
    sub.alloca_builder.branch(sub.fn.blocks[1])
    return sub.fn


def _trampoline(module, range_fn, nparams: int, start: int, stop: int) -> ir.Function:
    """void tramp(ptr ctx): ctx holds the kernel's param pointers; runs this thread's chunk."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=f"{range_fn.name}.omp")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = fn.args[0]
    params = [b.load(b.gep(ctx, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
              for k in range(nparams)]
    tid = b.sext(b.call(declare(module, "omp_get_thread_num", I32, [], "nounwind"), []), I64)
    nth = b.sext(b.call(declare(module, "omp_get_num_threads", I32, [], "nounwind"), []), I64)
    total = ir.Constant(I64, stop - start)
    chunk = b.sdiv(b.add(total, b.sub(nth, ir.Constant(I64, 1))), nth)
    lo = b.add(ir.Constant(I64, start), b.mul(tid, chunk))
    hi = b.add(lo, chunk)
    hi = b.select(b.icmp_signed("<", hi, ir.Constant(I64, stop)), hi, ir.Constant(I64, stop))
    entry = ir.IRBuilder()
    entry.position_at_start(fn.entry_basic_block)
    with b.if_then(b.icmp_signed("<", lo, hi)), denormals_as_zero(module, b, entry):
        b.call(range_fn, [*params, lo, hi])
    b.ret_void()
    return fn


def lower_parallel_for(parent: KernelLowering, s: L.For) -> None:
    if not (isinstance(s.start, L.Const) and isinstance(s.stop, L.Const)):
        raise ValueError(f"kernel {parent.kernel.name}: parallel loops need constant bounds")
    module, b = parent.module, parent.b
    params = list(parent.fn.args[:len(parent.kernel.params)])
    range_fn = _range_function(parent, s)
    tramp = _trampoline(module, range_fn, len(params), s.start.value, s.stop.value)
    nthreads = b.load(threads_global(module), typ=I32)
    with b.if_else(b.icmp_signed(">", nthreads, ir.Constant(I32, 1))) as (many, one):
        with many:
            ctx = parent.alloca_builder.alloca(PTR, size=ir.Constant(I32, max(len(params), 1)))
            for k, p in enumerate(params):
                b.store(p, b.gep(ctx, [ir.Constant(I32, k)], source_etype=PTR))
            gomp = declare(module, "GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32],
                           "nounwind")
            b.call(gomp, [tramp, ctx, nthreads, ir.Constant(I32, 0)])
        with one:
            b.call(range_fn, [*params, ir.Constant(I64, s.start.value),
                              ir.Constant(I64, s.stop.value)])
