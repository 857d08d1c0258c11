"""Parallel loops on the model library's own thread pool (codegen/thread_pool.c).

A top-level `For(kind="parallel")` of a kernel is outlined into a range function
`name.rangeN(params..., lo, hi)` (noalias params, so it vectorises like any kernel). With
one thread the kernel calls it once over the whole range, so threads=1 pays nothing; with
more, tf_parallel_for runs a trampoline over chunks of the range on the pool's threads
(which keep denormals as zero, as the entry point does: codegen/denormals.py).
"""
from __future__ import annotations

from llvmlite import ir

from ..ir import loops as L
from .lower_kernel import I32, I64, PTR, KernelLowering, RawIndex, declare

THREADS = "tf_num_threads"


def threads_global(module: ir.Module) -> ir.GlobalVariable:
    g = module.globals.get(THREADS)
    if g is None:
        g = ir.GlobalVariable(module, I32, THREADS)
        g.linkage = "internal"
        g.initializer = ir.Constant(I32, 1)
    return g


POOL_ENTRY = "tf_parallel_for"


def uses_threads(module: ir.Module) -> bool:
    """Whether the module has parallel loops (and so needs thread_pool.c linked in)."""
    return POOL_ENTRY in module.globals


def _range_function(parent: KernelLowering, s: L.For) -> ir.Function:
    sub = KernelLowering(parent.module, parent.kernel,
                         name=f"{parent.kernel.name}.range{parent.outlined}", index_args=2)
    parent.outlined += 1
    lo, hi = sub.fn.args[-2:]
    sub.depth = 1  # the loop below is the outlined one: nested parallel loops stay serial
    # every chunk starts within the loop's range
    sub.stmts([L.For(s.var, RawIndex(lo, s.start.value >= 0), RawIndex(hi), s.body, "serial")])
    sub.b.ret_void()
    sub.alloca_builder.branch(sub.fn.blocks[1])
    return sub.fn


def _trampoline(module, range_fn, nparams: int) -> ir.Function:
    """void tramp(ptr ctx, i64 lo, i64 hi): ctx holds the kernel's param pointers."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                     name=f"{range_fn.name}.chunk")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx, lo, hi = fn.args
    params = [b.load(b.gep(ctx, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
              for k in range(nparams)]
    b.call(range_fn, [*params, lo, hi])
    b.ret_void()
    return fn


def lower_parallel_for(parent: KernelLowering, s: L.For) -> None:
    if not (isinstance(s.start, L.Const) and isinstance(s.stop, L.Const)):
        raise ValueError(f"kernel {parent.kernel.name}: parallel loops need constant bounds")
    module, b = parent.module, parent.b
    params = list(parent.fn.args[:len(parent.kernel.params)])
    range_fn = _range_function(parent, s)
    tramp = _trampoline(module, range_fn, len(params))
    nthreads = b.load(threads_global(module), typ=I32)
    with b.if_else(b.icmp_signed(">", nthreads, ir.Constant(I32, 1))) as (many, one):
        with many:
            ctx = parent.alloca_builder.alloca(PTR, size=ir.Constant(I32, max(len(params), 1)))
            for k, p in enumerate(params):
                b.store(p, b.gep(ctx, [ir.Constant(I32, k)], source_etype=PTR))
            pool = declare(module, POOL_ENTRY, ir.VoidType(), [PTR, PTR, I64, I64, I32],
                           "nounwind")
            b.call(pool, [tramp, ctx, ir.Constant(I64, s.start.value),
                          ir.Constant(I64, s.stop.value), nthreads])
        with one:
            b.call(range_fn, [*params, ir.Constant(I64, s.start.value),
                              ir.Constant(I64, s.stop.value)])
