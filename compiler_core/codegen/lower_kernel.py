"""Loop-nest IR (ir/loops.py) -> one LLVM function per kernel, through llvmlite.ir."""
from __future__ import annotations

import dataclasses

import numpy as np
from llvmlite import ir

from ..ir import loops as L

PTR = ir.PointerType()
I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
# No nnan/ninf/arcp: IsNaN, Max with NaN and exact division must keep IEEE meaning;
# reassoc lets LLVM vectorize reductions, contract lets it form FMAs.
FLAGS = ("reassoc", "contract", "nsz")

_LLVM_TYPES = {
    "float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
    "int8": I8, "uint8": I8, "int16": ir.IntType(16), "uint16": ir.IntType(16),
    "int32": I32, "uint32": I32, "int64": I64, "uint64": I64, "bool": I1,
}
_SUFFIX = {"float16": "f16", "float32": "f32", "float64": "f64"}
# libm has no llvm intrinsic for these (or the intrinsic would expand to the same call).
_LIBM = {"tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf"}
_INTRINSIC = {"sqrt", "exp", "log", "sin", "cos", "floor", "ceil", "fabs", "roundeven", "pow",
              "minimum", "maximum", "trunc", "copysign"}


def llvm_type(dtype, lanes: int = 1) -> ir.Type:
    name = np.dtype(dtype).name
    if name not in _LLVM_TYPES:
        raise TypeError(f"dtype {name} is not supported by code generation")
    return _LLVM_TYPES[name] if lanes == 1 else ir.VectorType(_LLVM_TYPES[name], lanes)


def mem_type(dtype, lanes: int = 1) -> ir.Type:
    """Booleans are one byte in memory, i1 in registers."""
    if np.dtype(dtype) == np.bool_:
        return I8 if lanes == 1 else ir.VectorType(I8, lanes)
    return llvm_type(dtype, lanes)


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_unsigned(dtype) -> bool:
    return np.dtype(dtype).kind in "ub"


def declare(module: ir.Module, name: str, ret: ir.Type, args: list, *attributes: str) -> ir.Function:
    """The module's function `name` (an intrinsic, libm, the thread pool...), declared on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
        for attribute in attributes:
            fn.attributes.add(attribute)
    return fn


class RawIndex(L.Expr):
    """An int64 LLVM value standing in the loop IR (loop bounds of outlined parallel loops),
    and whether it is known not to be negative."""
    dtype = L.INDEX

    def __init__(self, value: ir.Value, nonneg: bool = False):
        self.value, self.nonneg = value, nonneg


class KernelLowering:
    def __init__(self, module: ir.Module, kernel: L.Kernel, name: str | None = None,
                 index_args: int = 0):
        """One function per kernel: a pointer per param, then `index_args` int64 args."""
        self.module = module
        self.kernel = kernel
        nparams = len(kernel.params)
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * nparams + [I64] * index_args)
        self.fn = ir.Function(module, fnty, name=name or kernel.name)
        self.fn.linkage = "internal"
        self.fn.attributes.add("nounwind")
        for arg in self.fn.args[:nparams]:
            arg.add_attribute("noalias")
        self.ptrs = dict(zip((id(b) for b in kernel.params), self.fn.args))
        self.depth = 0
        self.outlined = 0
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.vars: dict[int, ir.Value] = {}
        self.locals: dict[int, ir.Value] = {}
        self.memo: dict[int, tuple] = {}
        self.counters: set[int] = set()   # loop variables that start at 0 or above
        self.signs: dict[int, tuple] = {}  # this statement's nonneg() answers

    def lower(self) -> ir.Function:
        self.stmts(self.kernel.body)
        self.b.ret_void()
        self.alloca_builder.branch(self.fn.blocks[1])
        return self.fn

    # ------------------------------------------------------------ statements
    def stmts(self, body):
        for s in body:
            self.memo, self.signs = {}, {}
            getattr(self, "s_" + type(s).__name__)(s)

    def s_For(self, s: L.For):
        if s.kind == "parallel" and self.depth == 0:
            from .parallel import lower_parallel_for
            return lower_parallel_for(self, s)
        self.depth += 1
        try:
            self._serial_for(s)
        finally:
            self.depth -= 1

    def _serial_for(self, s: L.For):
        b = self.b
        start, stop = self.expr(s.start), self.expr(s.stop)
        pre = b.block
        header = self.fn.append_basic_block("loop")
        body = self.fn.append_basic_block("loop.body")
        exit_ = self.fn.append_basic_block("loop.exit")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=s.var.name)
        i.add_incoming(start, pre)
        if self.nonneg(s.start):  # it only counts up (nsw): at or above its start
            self.counters.add(id(s.var))
        else:
            self.counters.discard(id(s.var))
        b.cbranch(b.icmp_signed("<", i, stop), body, exit_)
        b.position_at_end(body)
        self.vars[id(s.var)] = i
        self.stmts(s.body)
        nxt = b.add(i, ir.Constant(I64, 1), flags=("nsw",))
        i.add_incoming(nxt, b.block)
        latch = b.branch(header)
        if s.kind == "scalar":
            latch.set_metadata("llvm.loop", self.no_vectorize_loop_id())
        b.position_at_end(exit_)

    def no_vectorize_loop_id(self) -> ir.MDValue:
        """A distinct, self-referencing loop ID (as LLVM requires) that disables vectorizing."""
        m = self.module
        hints = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"),
                                 ir.Constant(I32, 1)]),
                 m.add_metadata([ir.MetaDataString(m, "llvm.loop.interleave.count"),
                                 ir.Constant(I32, 1)])]
        loop_id = ir.values.MDValue(m, [], name=str(len(m.metadata)))
        loop_id.operands = (loop_id, *hints)
        return loop_id

    def s_Store(self, s: L.Store):
        ptr = self.address(s.buf, s.index)
        val = self.expr(s.value)
        if s.buf.dtype == np.bool_:
            val = self.b.zext(val, mem_type(np.bool_, s.value.lanes))
        if s.valid is not None:
            self._call(f"llvm.masked.store.{_mem_suffix(s.buf.dtype, s.value.lanes)}.p0",
                       ir.VoidType(), [val, ptr, ir.Constant(I32, s.buf.dtype.itemsize),
                                       _lane_mask(s.value.lanes, s.valid)])
            return
        self.b.store(val, ptr, align=s.buf.dtype.itemsize)

    def s_Prefetch(self, s: L.Prefetch):
        # llvm.prefetch's locality 3 is the closest cache (x86 prefetcht0), 2 the next
        ptr = self.address(s.buf, s.index, inbounds=False)
        self._call("llvm.prefetch.p0", ir.VoidType(),
                   [ptr, ir.Constant(I32, 0), ir.Constant(I32, 4 - s.level), ir.Constant(I32, 1)])

    def s_If(self, s: L.If):
        cond = self.expr(s.cond)
        if s.orelse:
            with self.b.if_else(cond) as (then, orelse):
                with then:
                    self.stmts(s.then)
                with orelse:
                    self.stmts(s.orelse)
        else:
            with self.b.if_then(cond):
                self.stmts(s.then)

    def s_Let(self, s: L.Let):
        ty = llvm_type(s.local.dtype, s.local.lanes)
        slot = self.alloca_builder.alloca(ty, name=s.local.name)
        self.locals[id(s.local)] = slot
        self.b.store(self.splat(s.init, s.local.lanes), slot)

    def s_Set(self, s: L.Set):
        self.b.store(self.splat(s.value, s.local.lanes), self.locals[id(s.local)])

    # ------------------------------------------------------------ expressions
    def address(self, buf: L.Buf, index: L.Expr, inbounds: bool = True) -> ir.Value:
        return self.b.gep(self.pointer(buf), [self.expr(index)], inbounds=inbounds,
                          source_etype=mem_type(buf.dtype))

    def pointer(self, buf: L.Buf) -> ir.Value:
        """A param's pointer, or a scratch array's: allocated on first use in this function's
        entry block (an outlined parallel loop's own, so one per thread)."""
        ptr = self.ptrs.get(id(buf))
        if ptr is None and isinstance(buf, L.Scratch):
            array = self.alloca_builder.alloca(ir.ArrayType(mem_type(buf.dtype), buf.size),
                                               name=buf.name)
            array.align = 64
            array.type = PTR  # an opaque pointer, as the params are (llvmlite types it)
            ptr = self.ptrs[id(buf)] = array
        return ptr

    def splat(self, e: L.Expr, lanes: int) -> ir.Value:
        """e's value with `lanes` lanes: scalars in vector contexts are broadcast."""
        val = self.expr(e)
        if e.lanes == lanes:
            return val
        if e.lanes != 1:
            raise TypeError(f"kernel {self.kernel.name}: {e.lanes} lanes where {lanes} expected")
        vty = ir.VectorType(val.type, lanes)
        one = self.b.insert_element(ir.Constant(vty, ir.Undefined), val, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def operands(self, e, *subs) -> list[ir.Value]:
        return [self.splat(x, e.lanes) for x in subs]

    def expr(self, e: L.Expr) -> ir.Value:
        # Expressions are trees that share subtrees (x in x*sigmoid(x)); within one statement
        # they are straight-line code, so each shared subtree is emitted once.
        key = id(e)
        if key not in self.memo:
            self.memo[key] = (e, getattr(self, "e_" + type(e).__name__)(e))
        return self.memo[key][1]

    def e_Const(self, e: L.Const):
        return ir.Constant(llvm_type(e.dtype), e.value if e.dtype != np.bool_ else int(e.value))

    def e_Var(self, e: L.Var):
        return self.vars[id(e)]

    def e_RawIndex(self, e: RawIndex):
        return e.value

    def e_Get(self, e: L.Get):
        if id(e.local) not in self.locals:
            raise ValueError(f"kernel {self.kernel.name}: local {e.local.name} is read outside "
                             "the scope that declares it (parallel loops cannot read outer locals)")
        return self.b.load(self.locals[id(e.local)], typ=llvm_type(e.local.dtype, e.local.lanes))

    def e_Load(self, e: L.Load):
        return self._load(e.buf, e.index, 1)

    def e_VLoad(self, e: L.VLoad):
        if e.shift:
            return self._shifted(self.e_VLoad(dataclasses.replace(e, shift=0)), e.shift)
        if e.stride > 1:
            return self._strided_load(e)
        if e.inside:
            val = self._load(e.buf, e.index, e.lanes)
            return self.b.select(_mask(e.mask), val, ir.Constant(val.type, None))
        if e.mask is not None:  # its masked-off lanes may lie outside buf: no inbounds
            return self._masked_load(e.buf, self.address(e.buf, e.index, inbounds=False),
                                     e.lanes, _mask(e.mask))
        if e.valid is None:
            return self._load(e.buf, e.index, e.lanes)
        return self._masked_load(e.buf, self.address(e.buf, e.index), e.lanes,
                                 _lane_mask(e.lanes, e.valid), e.fill)

    def _shifted(self, val, shift: int):
        """val's lanes moved up by `shift`, zeros in the lanes below."""
        lanes = val.type.count
        picks = [lanes if k < shift else k - shift for k in range(lanes)]
        return self.b.shuffle_vector(val, ir.Constant(val.type, None),
                                     ir.Constant(ir.VectorType(I32, lanes), picks))

    def _masked_load(self, buf, address, lanes, mask, fill: float = 0):
        ty = mem_type(buf.dtype, lanes)
        passthru = ir.Constant(ty, [ir.Constant(ty.element, fill)] * lanes) if fill \
            else ir.Constant(ty, None)
        val = self._call(f"llvm.masked.load.{_mem_suffix(buf.dtype, lanes)}.p0", ty,
                         [address, ir.Constant(I32, buf.dtype.itemsize), mask, passthru])
        return self.b.trunc(val, llvm_type(np.bool_, lanes)) if buf.dtype == np.bool_ else val

    def _strided_load(self, e: L.VLoad):
        """The run of lanes * stride elements up to the last one a lane takes (a masked
        load), then its every stride-th element."""
        run = e.lanes * e.stride
        val = self._masked_load(e.buf, self.address(e.buf, e.index), run,
                                _lane_mask(run, ((e.valid or e.lanes) - 1) * e.stride + 1))
        picks = ir.Constant(ir.VectorType(I32, e.lanes), [k * e.stride for k in range(e.lanes)])
        return self.b.shuffle_vector(val, ir.Constant(val.type, None), picks)

    def e_Pick(self, e: L.Pick):
        vals = [self.expr(p) for p in e.parts]
        while len(vals) > 1:  # concatenated pairwise: shufflevector takes two of one type
            if len(vals) % 2:
                vals.append(ir.Constant(vals[0].type, None))
            vals = [self._concat(a, b) for a, b in zip(vals[::2], vals[1::2])]
        picks = ir.Constant(ir.VectorType(I32, e.lanes), list(e.picks))
        return self.b.shuffle_vector(vals[0], ir.Constant(vals[0].type, None), picks)

    def e_Shuffle(self, e: L.Shuffle):
        return self.b.shuffle_vector(self.expr(e.a), self.expr(e.b),
                                     ir.Constant(ir.VectorType(I32, e.lanes), list(e.picks)))

    def _concat(self, a, b):
        n = a.type.count
        return self.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n))))

    def e_Extract(self, e: L.Extract):
        return self.b.extract_element(self.expr(e.a), ir.Constant(I32, e.lane))

    def _load(self, buf, index, lanes):
        val = self.b.load(self.address(buf, index), typ=mem_type(buf.dtype, lanes),
                          align=buf.dtype.itemsize)
        if buf.dtype == np.bool_:
            val = self.b.trunc(val, llvm_type(np.bool_, lanes))
        return val

    def e_Broadcast(self, e: L.Broadcast):
        return self.splat(e.a, e.lanes)

    def e_Reduce(self, e: L.Reduce):
        a = self.expr(e.a)
        suffix = _vector_suffix(e.a.dtype, e.a.lanes)
        if not is_float(e.dtype):
            name = {"add": "add", "min": "smin", "max": "smax"}[e.op]
            if is_unsigned(e.dtype) and e.op != "add":
                name = "u" + name[1:]
            return self._call(f"llvm.vector.reduce.{name}.{suffix}", a.type.element, [a])
        if e.op == "add":  # reassoc: a tree of shuffles instead of a sequential chain
            zero = ir.Constant(a.type.element, 0.0)
            return self._call(f"llvm.vector.reduce.fadd.{suffix}", a.type.element, [zero, a],
                              fastmath=("reassoc",))
        if e.op == "maxnum":  # loops.reduce_lanes: no NaN lanes, hence nnan
            return self._call(f"llvm.vector.reduce.fmax.{suffix}", a.type.element, [a],
                              fastmath=("nnan",))
        name = "fminimum" if e.op == "min" else "fmaximum"  # NaN-propagating, as maximum()
        return self._call(f"llvm.vector.reduce.{name}.{suffix}", a.type.element, [a])

    def _call(self, fname, ret, args, fastmath=()):
        fn = declare(self.module, fname, ret, [x.type for x in args])
        return self.b.call(fn, args, fastmath=fastmath)

    def e_Select(self, e: L.Select):
        return self.b.select(*self.operands(e, e.cond, e.a, e.b))

    def e_Cmp(self, e: L.Cmp):
        a, b = self.operands(e, e.a, e.b)
        ops = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
        if is_float(e.a.dtype):
            if e.op == "ne":
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(ops[e.op], a, b)
        if is_unsigned(e.a.dtype):
            return self.b.icmp_unsigned(ops[e.op], a, b)
        return self.b.icmp_signed(ops[e.op], a, b)

    def e_Bin(self, e: L.Bin):
        a, b = self.operands(e, e.a, e.b)
        dt = e.a.dtype
        if is_float(dt):
            return self._fbin(e.op, a, b, dt)
        if e.op in ("mod", "floordiv") and _positive(b) and not is_unsigned(dt):
            return self._by_positive(e.op, a, b, self.nonneg(e.a))
        return self._ibin(e.op, a, b, dt)

    def nonneg(self, e: L.Expr) -> bool:
        """Whether the signed integer e is never negative, as far as its form shows (index
        arithmetic over counters and constants)."""
        key = id(e)
        if key not in self.signs:
            self.signs[key] = (e, self._nonneg(e))
        return self.signs[key][1]

    def _nonneg(self, e: L.Expr) -> bool:
        if isinstance(e, L.Const):
            return e.value >= 0
        if isinstance(e, L.Var):
            return id(e) in self.counters
        if isinstance(e, RawIndex):
            return e.nonneg
        if isinstance(e, L.Cast):  # widened, or the same width and not negative
            src, dst = np.dtype(e.a.dtype), np.dtype(e.dtype)
            if is_float(src) or dst.itemsize < src.itemsize:
                return False
            return dst.itemsize > src.itemsize if is_unsigned(src) else self.nonneg(e.a)
        if isinstance(e, L.Select):
            return self.nonneg(e.a) and self.nonneg(e.b)
        if not isinstance(e, L.Bin) or is_float(e.dtype):
            return False
        if e.op in ("add", "mul", "min", "div", "floordiv"):
            return self.nonneg(e.a) and self.nonneg(e.b)
        if e.op in ("max", "and"):
            return self.nonneg(e.a) or self.nonneg(e.b)
        if e.op == "shr":
            return self.nonneg(e.a)
        return e.op == "mod" and isinstance(e.b, L.Const) and e.b.value > 0

    def _by_positive(self, op, a, b, a_nonneg: bool):
        """Python's // and % by a constant above 0: the unsigned ones when a >= 0 (the
        index arithmetic of most kernels), else C's, fixed up where the remainder is
        negative. The general form takes 8 instructions; written out for every index of
        ShuffleNet's kernels it was 40% of the IR LLVM had to clean up."""
        B = self.b
        if a_nonneg:
            return B.udiv(a, b) if op == "floordiv" else B.urem(a, b)
        r = B.srem(a, b)
        below = B.icmp_signed("<", r, ir.Constant(a.type, 0))
        if op == "mod":
            return B.select(below, B.add(r, b), r)
        q = B.sdiv(a, b)
        return B.select(below, B.sub(q, ir.Constant(a.type, 1)), q)

    def _fbin(self, op, a, b, dt):
        B = self.b
        simple = {"add": B.fadd, "sub": B.fsub, "mul": B.fmul, "div": B.fdiv}
        if op in simple:
            return simple[op](a, b, flags=FLAGS)
        if op == "chain_add":  # loops.chain_add: no reassoc
            return B.fadd(a, b, flags=("contract", "nsz"))
        if op in ("min", "max"):
            # NaN-propagating; the sign of zero may be ignored, as FLAGS allow everywhere
            # else: its fixup (three more instructions around each AVX-512 vmaxps) doubled
            # the time of SqueezeNet's first max-pool (emeraldrapids, 1 thread: 261 -> 138 us)
            name = "minimum" if op == "min" else "maximum"
            return self.intrinsic(name, dt, a, b, fastmath=("nsz",))
        if op == "pow":
            return self.intrinsic("pow", dt, a, b)
        if op == "fmod":
            return B.frem(a, b)
        if op == "mod":  # python-style: result takes the divisor's sign
            r = B.frem(a, b)
            zero = ir.Constant(a.type, 0.0)
            fix = B.and_(B.fcmp_ordered("!=", r, zero),
                         B.xor(B.fcmp_ordered("<", r, zero), B.fcmp_ordered("<", b, zero)))
            return B.select(fix, B.fadd(r, b), r)
        if op == "floordiv":
            return self.intrinsic("floor", dt, B.fdiv(a, b))
        raise NotImplementedError(f"float op {op}")

    def _ibin(self, op, a, b, dt):
        B = self.b
        u = is_unsigned(dt)
        table = {"add": B.add, "sub": B.sub, "mul": B.mul, "and": B.and_, "or": B.or_,
                 "xor": B.xor, "shl": B.shl, "fmod": B.urem if u else B.srem,
                 "div": B.udiv if u else B.sdiv, "shr": B.lshr if u else B.ashr}
        if op in table:
            return table[op](a, b)
        if op in ("min", "max"):
            pred = "<" if op == "min" else ">"
            c = B.icmp_unsigned(pred, a, b) if u else B.icmp_signed(pred, a, b)
            return B.select(c, a, b)
        if op in ("mod", "floordiv"):
            if u:
                return B.urem(a, b) if op == "mod" else B.udiv(a, b)
            q, r = B.sdiv(a, b), B.srem(a, b)
            zero = ir.Constant(a.type, 0)
            fix = B.and_(B.icmp_signed("!=", r, zero),
                         B.xor(B.icmp_signed("<", r, zero), B.icmp_signed("<", b, zero)))
            if op == "mod":
                return B.select(fix, B.add(r, b), r)
            return B.select(fix, B.sub(q, ir.Constant(a.type, 1)), q)
        if op == "pow":
            raise NotImplementedError("integer pow: cast to float first")
        raise NotImplementedError(f"integer op {op}")

    def e_Un(self, e: L.Un):
        a = self.expr(e.a)
        dt = e.a.dtype
        B = self.b
        if e.op == "neg":
            return B.fneg(a) if is_float(dt) else B.neg(a)
        if e.op == "not":
            return B.not_(a)
        if not is_float(dt):
            return self._iun(e.op, a, dt)
        if e.op == "abs":
            return self.intrinsic("fabs", dt, a)
        if e.op == "round":
            return self.intrinsic("roundeven", dt, a)
        if e.op == "isnan":
            return B.fcmp_unordered("uno", a, a)
        if e.op in ("isinf", "isposinf", "isneginf"):
            inf = ir.Constant(a.type, float("inf"))
            if e.op == "isposinf":
                return B.fcmp_ordered("==", a, inf)
            if e.op == "isneginf":
                return B.fcmp_ordered("==", a, ir.Constant(a.type, float("-inf")))
            return B.fcmp_ordered("==", self.intrinsic("fabs", dt, a), inf)
        if e.op == "sign":
            zero, one = ir.Constant(a.type, 0.0), ir.Constant(a.type, 1.0)
            pos = B.select(B.fcmp_ordered(">", a, zero), one, zero)
            return B.select(B.fcmp_ordered("<", a, zero), B.fneg(one), pos)
        if e.op in _INTRINSIC:
            return self.intrinsic(e.op, dt, a)
        if e.op in _LIBM:
            return self.libm(e.op, dt, a)
        raise NotImplementedError(f"unary {e.op} on {dt}")

    def _iun(self, op, a, dt):
        B = self.b
        zero = ir.Constant(a.type, 0)
        if op == "abs":
            return a if is_unsigned(dt) else B.select(B.icmp_signed("<", a, zero), B.neg(a), a)
        if op == "sign":
            one = ir.Constant(a.type, 1)
            if is_unsigned(dt):
                return B.select(B.icmp_unsigned(">", a, zero), one, zero)
            pos = B.select(B.icmp_signed(">", a, zero), one, zero)
            return B.select(B.icmp_signed("<", a, zero), ir.Constant(a.type, -1), pos)
        if op in ("isnan", "isinf", "isposinf", "isneginf"):
            lanes = a.type.count if isinstance(a.type, ir.VectorType) else 1
            return ir.Constant(llvm_type(np.bool_, lanes), 0)
        raise NotImplementedError(f"unary {op} on integers")

    def e_PairDot(self, e: L.PairDot):
        # the plain pattern (widen, multiply, add even and odd lanes): LLVM selects
        # vpmaddwd / vpdpwssd on x86 and widening multiplies on Arm from it
        B, n = self.b, e.lanes
        wide = ir.VectorType(I32, 2 * n)
        a = B.sext(self.expr(e.a), wide)
        pairs = B.bitcast(self.splat(e.b, n), ir.VectorType(ir.IntType(16), 2 * n))
        products = B.mul(a, B.sext(pairs, wide))
        even = B.shuffle_vector(products, ir.Constant(wide, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, n), list(range(0, 2 * n, 2))))
        odd = B.shuffle_vector(products, ir.Constant(wide, ir.Undefined),
                               ir.Constant(ir.VectorType(I32, n), list(range(1, 2 * n, 2))))
        return B.add(even, odd)

    def e_Bitcast(self, e: L.Bitcast):
        return self.b.bitcast(self.expr(e.a), llvm_type(e.dtype, e.lanes))

    def e_Cast(self, e: L.Cast):
        a = self.expr(e.a)
        src, dst = np.dtype(e.a.dtype), np.dtype(e.dtype)
        B, ty = self.b, llvm_type(dst, e.lanes)
        if src == dst:
            return a
        if dst == np.bool_:
            if is_float(src):
                return B.fcmp_unordered("!=", a, ir.Constant(a.type, 0.0))
            return B.icmp_unsigned("!=", a, ir.Constant(a.type, 0))
        if is_float(src) and is_float(dst):
            return B.fpext(a, ty) if dst.itemsize > src.itemsize else B.fptrunc(a, ty)
        if is_float(src):
            return B.fptoui(a, ty) if is_unsigned(dst) else B.fptosi(a, ty)
        if is_float(dst):
            return B.uitofp(a, ty) if is_unsigned(src) else B.sitofp(a, ty)
        if dst.itemsize < src.itemsize:
            return B.trunc(a, ty)
        if dst.itemsize == src.itemsize and src != np.bool_:
            return a
        return B.zext(a, ty) if is_unsigned(src) else B.sext(a, ty)

    # ------------------------------------------------------------ calls
    def intrinsic(self, name, dt, *args, fastmath=()):
        ty = args[0].type
        lanes = ty.count if isinstance(ty, ir.VectorType) else 1
        return self._call(f"llvm.{name}.{_vector_suffix(dt, lanes)}", ty, list(args), fastmath)

    def libm(self, name, dt, a):
        """libm works in float or double; half goes through float."""
        if isinstance(a.type, ir.VectorType):
            raise NotImplementedError(f"kernel {self.kernel.name}: libm {name} has no vector "
                                      "form; use kernels/fastmath.py or a scalar loop")
        dt = np.dtype(dt)
        work = np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)
        fname = name if work == np.float64 else name + "f"
        ty = llvm_type(work)
        fn = declare(self.module, fname, ty, [ty], "nounwind")
        x = self.b.fpext(a, ty) if dt == np.float16 else a
        r = self.b.call(fn, [x])
        return self.b.fptrunc(r, llvm_type(dt)) if dt == np.float16 else r


def _positive(value: ir.Value) -> bool:
    """Whether value is a scalar integer constant above 0."""
    return (isinstance(value, ir.Constant) and isinstance(value.type, ir.IntType)
            and isinstance(value.constant, int) and value.constant > 0)


def _lane_mask(lanes: int, valid: int) -> ir.Constant:
    return _mask([k < valid for k in range(lanes)])


def _mask(bits) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, len(bits)), [int(b) for b in bits])


def _mem_suffix(dtype, lanes: int) -> str:
    """The suffix of a memory intrinsic: booleans are bytes in memory."""
    return _vector_suffix(np.uint8 if np.dtype(dtype) == np.bool_ else dtype, lanes)


def _vector_suffix(dtype, lanes: int) -> str:
    """Intrinsic name suffix: f32, or v8f32 for a vector of 8."""
    dt = np.dtype(dtype)
    scalar = _SUFFIX.get(dt.name) or f"i{1 if dt == np.bool_ else dt.itemsize * 8}"
    return scalar if lanes == 1 else f"v{lanes}{scalar}"


def lower_kernel(module: ir.Module, kernel: L.Kernel) -> ir.Function:
    return KernelLowering(module, kernel).lower()
