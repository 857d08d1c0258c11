"""Loop-nest IR: what every kernel lowers to before LLVM.

Expressions are small immutable trees (Const, Var, Load, Bin, Cmp, Un, Select, Cast, Get);
statements are For / Store / If / Let / Set. Kernels are written with `KernelBuilder`, a
context-manager front end that nests statements, and with Python operators on Expr.
Index arithmetic is int64; buffers are flat, row-major, addressed by `buf[i, j, ...]`.

Vectors: an expression has `lanes` (1 = scalar). `buf.vec(i, n)` loads n consecutive
elements, `broadcast(e, n)` splats a scalar, and arithmetic between a vector and a scalar
splats the scalar, so `acc + broadcast(a, 8) * w.vec(k, 8)` is one FMA on 8 lanes. Storing
a vector writes its lanes to consecutive elements; `reduce_lanes` folds a vector to a scalar.
Micro-kernels use them to control register tiles exactly (kernels/microkernel.py); plain
loops leave vectorization to LLVM.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

INDEX = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
INT32 = np.dtype(np.int32)
_counter = itertools.count()


def _dt(x) -> np.dtype:
    return np.dtype(x)


class Expr:
    dtype: np.dtype
    lanes: int = 1

    def _bin(self, op, other, swap=False):
        other = as_expr(other, self.dtype)
        a, b = (other, self) if swap else (self, other)
        return binop(op, a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __mod__(self, o): return self._bin("mod", o)
    def __and__(self, o): return self._bin("and", o)
    def __rand__(self, o): return self._bin("and", o, True)
    def __or__(self, o): return self._bin("or", o)
    def __ror__(self, o): return self._bin("or", o, True)
    def __xor__(self, o): return self._bin("xor", o)
    def __neg__(self): return unop("neg", self)
    def __invert__(self): return unop("not", self)
    def __lt__(self, o): return Cmp("lt", self, as_expr(o, self.dtype))
    def __le__(self, o): return Cmp("le", self, as_expr(o, self.dtype))
    def __gt__(self, o): return Cmp("gt", self, as_expr(o, self.dtype))
    def __ge__(self, o): return Cmp("ge", self, as_expr(o, self.dtype))
    def eq(self, o): return Cmp("eq", self, as_expr(o, self.dtype))
    def ne(self, o): return Cmp("ne", self, as_expr(o, self.dtype))
    __hash__ = object.__hash__


@dataclass(eq=False)
class Const(Expr):
    value: object
    dtype: np.dtype = INDEX

    def __post_init__(self):
        self.dtype = _dt(self.dtype)
        self.value = self.dtype.type(self.value).item()


@dataclass(eq=False)
class Var(Expr):
    name: str
    dtype: np.dtype = INDEX


def row_major_strides(shape) -> list[int]:
    """Elements between consecutive indices of each dim of a row-major array of `shape`."""
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


@dataclass(eq=False)
class Buf:
    """A kernel parameter: one tensor, seen as a flat row-major array."""
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(row_major_strides(self.shape))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def offset(self, idx) -> Expr:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"{self.name}: {len(idx)} indices for shape {self.shape}")
        flat: Expr = Const(0)
        for i, s in zip(idx, self.strides):
            flat = flat + as_expr(i) * s
        return flat

    def __getitem__(self, idx) -> Expr:
        return Load(self, self.offset(idx))

    def flat(self, i) -> Expr:
        return Load(self, as_expr(i))

    def vec(self, i, lanes: int, valid: int | None = None, stride: int = 1,
            first: int = 0, fill: float = 0) -> Expr:
        """Elements i, i + stride, ... (`lanes` of them) as one vector (a scalar load when
        lanes is 1); with `valid` and `first`, only lanes first .. valid - 1 are read and
        the other lanes are 0 (`fill`, of a unit-stride load from lane 0)."""
        if lanes == 1:
            return Load(self, as_expr(i))
        valid = None if valid is None or valid >= lanes else valid
        if fill and (first or stride > 1):
            raise ValueError("only a unit-stride load from lane 0 fills its other lanes")
        if first:
            return VLoad(self, as_expr(i) + first * stride, lanes, (valid or lanes) - first,
                         stride, first)
        return VLoad(self, as_expr(i), lanes, valid, stride, fill=fill)

    def vec_lanes(self, i, mask: tuple[bool, ...]) -> Expr:
        """Elements i .. i + len(mask) - 1 as one vector, reading only the lanes whose mask
        entry is true (the others are 0 and may lie outside the buffer, before or after)."""
        lanes = len(mask)
        if all(mask):
            return VLoad(self, as_expr(i), lanes)
        if not any(mask[mask.index(False):]):  # a prefix: the plain masked load
            return VLoad(self, as_expr(i), lanes, mask.index(False))
        return VLoad(self, as_expr(i), lanes, mask=tuple(bool(m) for m in mask))

    def vec_inside(self, i, mask: tuple[bool, ...]) -> Expr:
        """vec_lanes where all of elements i .. i + len(mask) - 1 lie inside the buffer: a
        plain load and a blend with zeros, cheaper than AVX2's masked load (several times a
        plain one on Zen 1: kernels/depthwise.py) and NEON's (none: lane by lane)."""
        if all(mask):
            return VLoad(self, as_expr(i), len(mask))
        return VLoad(self, as_expr(i), len(mask), mask=tuple(bool(m) for m in mask), inside=True)

    __hash__ = object.__hash__


@dataclass(eq=False)
class Scratch(Buf):
    """An array of the kernel's own, on the stack of the function that runs the loops
    reading it: each thread of a parallel loop has its own, reused item after item, so it
    stays in cache (a few KB: the stack is the thread's)."""

    __hash__ = object.__hash__


@dataclass(eq=False)
class Load(Expr):
    buf: Buf
    index: Expr

    @property
    def dtype(self):
        return self.buf.dtype


@dataclass(eq=False)
class Bin(Expr):
    op: str  # add sub mul div floordiv mod min max pow and or xor shl shr
    a: Expr
    b: Expr

    @property
    def dtype(self):
        return self.a.dtype

    @cached_property  # expressions are DAGs: walked per path, Mish's took 18 s to lower
    def lanes(self):
        return max(self.a.lanes, self.b.lanes)


@dataclass(eq=False)
class Cmp(Expr):
    op: str  # lt le gt ge eq ne
    a: Expr
    b: Expr
    dtype: np.dtype = BOOL

    @cached_property
    def lanes(self):
        return max(self.a.lanes, self.b.lanes)


@dataclass(eq=False)
class Un(Expr):
    op: str  # neg not abs sqrt exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh
    # floor ceil round(half-even) erf isnan isinf isposinf isneginf sign
    a: Expr

    @property
    def dtype(self):
        return BOOL if self.op.startswith("is") else self.a.dtype

    @cached_property
    def lanes(self):
        return self.a.lanes


@dataclass(eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self):
        return self.a.dtype

    @cached_property
    def lanes(self):
        return max(self.cond.lanes, self.a.lanes, self.b.lanes)


@dataclass(eq=False)
class Cast(Expr):
    a: Expr
    dtype: np.dtype

    @cached_property
    def lanes(self):
        return self.a.lanes


@dataclass(eq=False)
class Bitcast(Expr):
    """Reinterpret the bits as another type of the same width (float32 <-> int32)."""
    a: Expr
    dtype: np.dtype

    @cached_property
    def lanes(self):
        return self.a.lanes


@dataclass(eq=False)
class VLoad(Expr):
    """`lanes` consecutive elements of `buf` from flat `index` on; with `valid` < lanes only
    the first `valid` are read (a masked load: the rest may lie past the buffer's end).
    With `stride` s > 1, the elements index, index + s, ...: whole vectors of the run
    loaded and shuffled, never reading past the last element a lane takes. With `shift`,
    the vector moves up by that many lanes (zeros below): Buf.vec's lanes from `first` on,
    loaded from their first element so that no address lies before it. With `mask`, only
    the lanes it marks are read (Buf.vec_lanes), whatever the others' addresses; with
    `mask` and `inside`, all lanes lie inside the buffer and the vector is a plain load whose
    other lanes are then zeroed (Buf.vec_inside). A unit-stride load of its first `valid`
    lanes holds `fill` in the others (a max pool's -inf past a row's end)."""
    buf: "Buf"
    index: Expr
    lanes: int
    valid: int | None = None
    stride: int = 1
    shift: int = 0
    mask: tuple[bool, ...] | None = None
    inside: bool = False
    fill: float = 0

    @property
    def dtype(self):
        return self.buf.dtype


@dataclass(eq=False)
class Broadcast(Expr):
    """A scalar copied into every lane."""
    a: Expr
    lanes: int

    @property
    def dtype(self):
        return self.a.dtype


@dataclass(eq=False)
class Reduce(Expr):
    """All lanes of a vector folded into one scalar with op (add, min, max)."""
    op: str
    a: Expr

    @property
    def dtype(self):
        return self.a.dtype


@dataclass(eq=False)
class Extract(Expr):
    """One lane of a vector."""
    a: Expr
    lane: int

    @property
    def dtype(self):
        return self.a.dtype


@dataclass(eq=False)
class Pick(Expr):
    """Lanes of `parts` laid end to end: lane t is lane picks[t] of their concatenation. A
    few shuffles once, where a strided load (VLoad.stride) shuffles each load: the columns
    of a stride-2 row computed densely, then picked (pick_lanes); rows of tiles laid out
    element by element (interleave_lanes)."""
    parts: tuple
    picks: tuple

    @property
    def dtype(self):
        return self.parts[0].dtype

    @property
    def lanes(self):
        return len(self.picks)


@dataclass(eq=False)
class Shuffle(Expr):
    """Lane t is lane picks[t] of `a` and `b` laid end to end: one two-input shuffle (a
    register transpose's step, transpose_lanes)."""
    a: Expr
    b: Expr
    picks: tuple

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def lanes(self):
        return len(self.picks)


@dataclass(eq=False)
class PairDot(Expr):
    """Integer products summed over adjacent pairs: lane j is a[2j] * b[2j] + a[2j+1] * b[2j+1]
    in int32, where `a` is 2n int16 lanes and `b` is n int32 lanes, each holding two int16
    (the lower half first). One instruction on x86 (vpmaddwd; vpdpwssd with the sum into an
    accumulator on AVX-512 VNNI), a few on Arm (smull, smlal): twice the products of a float
    FMA per instruction, the inner step of GEMMs with int8 weights."""
    a: Expr
    b: Expr

    @property
    def dtype(self):
        return INT32

    @property
    def lanes(self):
        return self.b.lanes


@dataclass(eq=False)
class Local:
    name: str
    dtype: np.dtype
    lanes: int = 1
    __hash__ = object.__hash__


@dataclass(eq=False)
class Get(Expr):
    local: Local

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def lanes(self):
        return self.local.lanes


# ---------------------------------------------------------------- statements

@dataclass(eq=False)
class For:
    var: Var
    start: Expr
    stop: Expr
    body: list
    # serial | vector | unroll | parallel; "scalar": LLVM must not vectorize or interleave
    # this loop (its body is already a register tile that the SLP vectorizer packs)
    kind: str = "serial"


@dataclass(eq=False)
class Store:
    buf: Buf
    index: Expr
    value: Expr
    valid: int | None = None  # a vector value: store only its first `valid` lanes


@dataclass(eq=False)
class Prefetch:
    """A hint to bring buf's element at `index` into the cache (`level` 1: L1, 2: L2) for a
    later read; it never faults, so it may point past the end of buf."""
    buf: Buf
    index: Expr
    level: int = 2


@dataclass(eq=False)
class If:
    cond: Expr
    then: list
    orelse: list = field(default_factory=list)


@dataclass(eq=False)
class Let:
    local: Local
    init: Expr


@dataclass(eq=False)
class Set:
    local: Local
    value: Expr


@dataclass(eq=False)
class Kernel:
    name: str
    params: list[Buf]
    body: list
    outputs: int = 1  # the last `outputs` params are written


# ---------------------------------------------------------------- constructors

def as_expr(x, dtype=INDEX) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        return Const(bool(x), BOOL if _dt(dtype) == BOOL else dtype)
    return Const(x, dtype)


def const(value, dtype) -> Const:
    return Const(value, dtype)


def _is_const(e, v=None):
    return isinstance(e, Const) and (v is None or e.value == v)


def binop(op: str, a: Expr, b: Expr) -> Expr:
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: dtype mismatch {a.dtype} vs {b.dtype}")
    if a.lanes != b.lanes and min(a.lanes, b.lanes) != 1:
        raise TypeError(f"{op}: {a.lanes} lanes vs {b.lanes} lanes")
    if a.dtype == INDEX and a.lanes == b.lanes == 1:  # keep index arithmetic small so LLVM sees simple strides
        if _is_const(a) and _is_const(b) and op in _FOLD:
            return Const(_FOLD[op](a.value, b.value))
        if op == "add" and _is_const(b, 0) or op == "mul" and _is_const(b, 1):
            return a
        if op == "add" and _is_const(a, 0) or op == "mul" and _is_const(a, 1):
            return b
        if op == "mul" and (_is_const(a, 0) or _is_const(b, 0)):
            return Const(0)
        if op == "sub" and _is_const(b, 0):
            return a
    return Bin(op, a, b)


_FOLD = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "min": min, "max": max,
}


def chain_add(a: Expr, b: Expr) -> Expr:
    """a + b (floats) that LLVM may contract into an FMA but not reassociate. Accumulators
    of a fully unrolled sum are otherwise one expression tree, which reassociation turns
    into a single serial chain of FMAs, bound by the FMA's latency instead of throughput."""
    return binop("chain_add", a, b)


def unop(op: str, a: Expr) -> Expr:
    return Un(op, a)


def minimum(a, b) -> Expr:
    a = as_expr(a, getattr(b, "dtype", INDEX))
    return binop("min", a, as_expr(b, a.dtype))


def maximum(a, b) -> Expr:
    a = as_expr(a, getattr(b, "dtype", INDEX))
    return binop("max", a, as_expr(b, a.dtype))


def select(cond: Expr, a, b) -> Expr:
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    else:
        b = as_expr(b, INDEX) if not isinstance(b, Expr) else b
        a = as_expr(a, b.dtype)
    return Select(cond, a, b)


def cast(a: Expr, dtype) -> Expr:
    dtype = _dt(dtype)
    return a if a.dtype == dtype else Cast(a, dtype)


def bitcast(a: Expr, dtype) -> Expr:
    dtype = _dt(dtype)
    if dtype.itemsize != a.dtype.itemsize:
        raise TypeError(f"bitcast {a.dtype} -> {dtype}: sizes differ")
    return Bitcast(a, dtype)


def call(op: str, a: Expr) -> Expr:
    return Un(op, a)


def broadcast(a, lanes: int, dtype=None) -> Expr:
    """`a` (an Expr, or a Python number of `dtype`) in every one of `lanes` lanes."""
    a = as_expr(a, dtype or INDEX)
    if a.lanes != 1:
        raise TypeError(f"broadcast of a {a.lanes}-lane vector")
    return a if lanes == 1 else Broadcast(a, lanes)


def extract(a: Expr, lane: int) -> Expr:
    if not 0 <= lane < a.lanes:
        raise IndexError(f"lane {lane} of a {a.lanes}-lane vector")
    return a if a.lanes == 1 else Extract(a, lane)


def reduce_lanes(op: str, a: Expr) -> Expr:
    """The lanes of `a` combined by op: add, min, max (NaN-propagating, as maximum()) or,
    for floats that are never NaN, maxnum (a tree of plain max instructions)."""
    if op not in ("add", "min", "max", "maxnum"):
        raise ValueError(f"reduce_lanes: unknown op {op!r}")
    return a if a.lanes == 1 else Reduce(op, a)


def pick_lanes(parts: list, stride: int, first: int = 0) -> Expr:
    """Lane t of the result is lane first + t * stride of `parts` (vectors of equal lanes)
    end to end."""
    if len(parts) * parts[0].lanes < first + (parts[0].lanes - 1) * stride + 1:
        raise ValueError(f"{len(parts)} vectors hold too few lanes to pick at stride {stride}")
    if stride == 1 and not first:
        return parts[0]
    return Pick(tuple(parts), tuple(first + t * stride for t in range(parts[0].lanes)))


def interleave_lanes(vectors: list) -> list[Expr]:
    """n vectors v_0 .. v_n-1 of L lanes laid out element by element (v_0[0], v_1[0], ..,
    v_0[1], ..), as n vectors of L lanes in order: pick_lanes(..., stride=n, first=j)
    undone."""
    n, lanes = len(vectors), vectors[0].lanes
    if any(v.lanes != lanes for v in vectors):
        raise ValueError("interleave_lanes needs vectors of equal lanes")
    if n == 1:
        return list(vectors)
    return [Pick(tuple(vectors), tuple((e % n) * lanes + e // n
                                       for e in range(k * lanes, (k + 1) * lanes)))
            for k in range(n)]


def transpose_lanes(kb, rows: list) -> list[Expr]:
    """The columns of the square matrix whose rows are `rows` (n vectors of n lanes, n a
    power of two): log2(n) steps of n two-input shuffles, step s exchanging bit s of each
    element's row and lane (n * log2(n) shuffles; picking each column's lanes from all n
    rows took n * (n - 1)). Each step's vectors are locals: its values feed two of the next."""
    n = len(rows)
    if n & (n - 1) or any(r.lanes != n for r in rows):
        raise ValueError("transpose_lanes needs n vectors of n lanes, n a power of two")
    vals, s = list(rows), n // 2
    while s:
        keep = tuple(t if not t & s else n + t - s for t in range(n))
        swap = tuple(t + s if not t & s else n + t for t in range(n))
        for i in (i for i in range(n) if not i & s):
            a, b = vals[i], vals[i + s]
            vals[i] = Get(kb.local(a.dtype, Shuffle(a, b, keep), "t", n))
            vals[i + s] = Get(kb.local(a.dtype, Shuffle(a, b, swap), "t", n))
        s //= 2
    return vals


def pair_dot(a: Expr, b: Expr) -> Expr:
    """PairDot(a, b), checking its operands (int16 a with twice the lanes of int32 b)."""
    if a.dtype != np.int16 or b.dtype != INT32 or a.lanes != 2 * b.lanes:
        raise TypeError(f"pair_dot needs int16 x {2 * b.lanes} and int32 x {b.lanes}, got "
                        f"{a.dtype} x {a.lanes} and {b.dtype} x {b.lanes}")
    return PairDot(a, b)


def logical_and(a: Expr, b: Expr) -> Expr:
    return Bin("and", a, b)


# ---------------------------------------------------------------- builder

# a thread's stack is 2 MB or more (glibc's default for the main thread, 4 MB for the
# pool's: codegen/thread_pool.c): scratch arrays stay far below it
MAX_SCRATCH_BYTES = 128 * 1024


class KernelBuilder:
    """Builds one Kernel: `with kb.loop(n) as i: kb.store(out, (i,), x[i] * 2)`."""

    def __init__(self, name: str, vector_bits: int = 256):
        """`vector_bits`: the target's SIMD register width, which sizes micro-kernel tiles."""
        self.name = name
        self.vector_bits = vector_bits
        self.params: list[Buf] = []
        self._stack: list[list] = [[]]

    def lanes(self, dtype) -> int:
        """Elements of `dtype` in one SIMD register of the target."""
        return max(1, self.vector_bits // (8 * _dt(dtype).itemsize))

    def buf(self, name: str, dtype, shape) -> Buf:
        b = Buf(name, _dt(dtype), tuple(int(s) for s in shape))
        self.params.append(b)
        return b

    def emit(self, stmt):
        self._stack[-1].append(stmt)

    @contextlib.contextmanager
    def _block(self, target: list):
        self._stack.append(target)
        try:
            yield
        finally:
            self._stack.pop()

    @contextlib.contextmanager
    def loop(self, stop, start=0, kind="serial", name="i"):
        var = Var(f"{name}{next(_counter)}")
        stmt = For(var, as_expr(start), as_expr(stop), [], kind)
        self.emit(stmt)
        with self._block(stmt.body):
            yield var

    @contextlib.contextmanager
    def loops(self, shape, kind="serial"):
        """Nested loops over `shape`; yields the tuple of indices (outermost first).
        Extent-1 dims get no loop (index 0); `kind` goes to the outermost real loop."""
        with contextlib.ExitStack() as stack:
            idx = []
            for n in shape:
                if n == 1:
                    idx.append(Const(0))
                    continue
                first = all(isinstance(i, Const) for i in idx)
                idx.append(stack.enter_context(self.loop(n, kind=kind if first else "serial")))
            yield tuple(idx)

    @contextlib.contextmanager
    def if_(self, cond: Expr):
        stmt = If(cond, [], [])
        self.emit(stmt)
        with self._block(stmt.then):
            yield stmt

    @contextlib.contextmanager
    def else_(self, stmt: If):
        with self._block(stmt.orelse):
            yield

    def store(self, buf: Buf, idx, value, valid: int | None = None) -> None:
        """Store a scalar, or a vector's lanes to consecutive elements (only the first
        `valid` of them when given)."""
        value = as_expr(value, buf.dtype)
        if value.dtype != buf.dtype:
            raise TypeError(f"store {value.dtype} into {buf.name}: {buf.dtype}")
        index = buf.offset(idx) if isinstance(idx, tuple) else as_expr(idx)
        masked = valid is not None and valid < value.lanes
        self.emit(Store(buf, index, value, valid if masked else None))

    def store_flat(self, buf: Buf, i, value, valid: int | None = None) -> None:
        self.store(buf, as_expr(i), value, valid)

    def scratch(self, name: str, dtype, size: int) -> Scratch:
        """A flat array of `size` elements for this kernel's own use (see Scratch)."""
        if size * _dt(dtype).itemsize > MAX_SCRATCH_BYTES:
            raise ValueError(f"{self.name}: scratch {name} of {size} elements is past "
                             f"{MAX_SCRATCH_BYTES} bytes")
        return Scratch(name, _dt(dtype), (int(size),))

    def prefetch(self, buf: Buf, i, level: int = 2) -> None:
        self.emit(Prefetch(buf, as_expr(i), level))

    def local(self, dtype, init, name="acc", lanes: int = 1) -> Local:
        """A mutable variable; `lanes` > 1 makes it a vector (a scalar init is splatted)."""
        loc = Local(f"{name}{next(_counter)}", _dt(dtype), lanes)
        init = as_expr(init, loc.dtype)
        self.emit(Let(loc, broadcast(init, lanes) if init.lanes != lanes else init))
        return loc

    def set(self, loc: Local, value) -> None:
        self.emit(Set(loc, as_expr(value, loc.dtype)))

    def get(self, loc: Local) -> Expr:
        return Get(loc)

    def build(self, outputs: int = 1) -> Kernel:
        return Kernel(self.name, self.params, self._stack[0], outputs)


def broadcast_index(idx: tuple, in_shape: tuple, out_shape: tuple) -> tuple:
    """Indices into an input of `in_shape` that numpy-broadcasts to `out_shape`."""
    lead = len(out_shape) - len(in_shape)
    return tuple(Const(0) if d == 1 and out_shape[lead + k] != 1 else idx[lead + k]
                 for k, d in enumerate(in_shape))
