"""Explicit vectors in the loop IR: loads, splats, arithmetic, locals, stores, reductions."""
import numpy as np
import pytest

from compiler_core.codegen.standalone import KernelLibrary
from compiler_core.ir.loops import (INT32, Get, KernelBuilder, broadcast, cast,
                                    interleave_lanes, pair_dot, pick_lanes, reduce_lanes,
                                    select)


def _axpy_kernel(lanes):
    kb = KernelBuilder("axpy")
    x, y = kb.buf("x", np.float32, (64,)), kb.buf("y", np.float32, (64,))
    with kb.loop(64 // lanes) as i:
        v = x.vec(i * lanes, lanes)
        kb.store_flat(y, i * lanes, v * 2.0 + broadcast(x.flat(0), lanes, np.float32))
    return kb.build()


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_vector_arithmetic_splats_scalars(lanes):
    lib = KernelLibrary([_axpy_kernel(lanes)])
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    lib(0, x, y)
    np.testing.assert_array_equal(y, x * 2 + x[0])


def test_vector_locals_accumulate_and_reduce():
    kb = KernelBuilder("dot")
    a, b = kb.buf("a", np.float32, (256,)), kb.buf("b", np.float32, (256,))
    out = kb.buf("out", np.float32, (2,))
    acc = kb.local(np.float32, 0.0, lanes=8)
    top = kb.local(np.float32, float("-inf"), lanes=8)
    with kb.loop(32) as i:
        kb.set(acc, Get(acc) + a.vec(i * 8, 8) * b.vec(i * 8, 8))
        va = a.vec(i * 8, 8)
        kb.set(top, select(va > Get(top), va, Get(top)))
    kb.store_flat(out, 0, reduce_lanes("add", Get(acc)))
    kb.store_flat(out, 1, reduce_lanes("max", Get(top)))
    lib = KernelLibrary([kb.build()])
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(256, np.float32), rng.standard_normal(256, np.float32)
    res = np.zeros(2, np.float32)
    lib(0, x, y, res)
    np.testing.assert_allclose(res[0], np.dot(x, y), rtol=1e-5)
    assert res[1] == x.max()


def test_vector_casts_widen_half_and_int8():
    kb = KernelBuilder("widen")
    h, q = kb.buf("h", np.float16, (16,)), kb.buf("q", np.int8, (16,))
    out = kb.buf("out", np.float32, (16,))
    with kb.loop(2) as i:
        wide = cast(h.vec(i * 8, 8), np.float32) + cast(q.vec(i * 8, 8), np.float32)
        kb.store_flat(out, i * 8, wide)
    lib = KernelLibrary([kb.build()])
    hv = np.linspace(-3, 3, 16).astype(np.float16)
    qv = np.arange(-8, 8, dtype=np.int8)
    res = np.zeros(16, np.float32)
    lib(0, hv, qv, res)
    np.testing.assert_array_equal(res, hv.astype(np.float32) + qv.astype(np.float32))


def test_mismatched_lanes_are_refused():
    kb = KernelBuilder("bad")
    x = kb.buf("x", np.float32, (16,))
    with pytest.raises(TypeError, match="lanes"):
        x.vec(0, 8) + x.vec(0, 4)


def test_chained_accumulators_stay_independent():
    """Four accumulators of an unrolled sum: correct, and their adds carry no reassoc flag,
    so LLVM cannot fold the four FMA chains back into one serial chain."""
    from llvmlite import ir

    from compiler_core.codegen.lower_kernel import lower_kernel
    from compiler_core.ir.loops import chain_add

    kb = KernelBuilder("chains")
    a, b = kb.buf("a", np.float32, (128,)), kb.buf("b", np.float32, (128,))
    out = kb.buf("out", np.float32, (1,))
    accs = [kb.local(np.float32, 0.0, lanes=8) for _ in range(4)]
    for j in range(16):
        acc = accs[j % 4]
        kb.set(acc, chain_add(Get(acc), a.vec(j * 8, 8) * b.vec(j * 8, 8)))
    total = Get(accs[0])
    for acc in accs[1:]:
        total = chain_add(total, Get(acc))
    kb.store_flat(out, 0, reduce_lanes("add", total))
    kernel = kb.build()
    module = ir.Module()
    lower_kernel(module, kernel)
    chained = [line for line in str(module).splitlines() if "= fadd" in line]
    assert len(chained) == 16 + 3 and not any("reassoc" in line for line in chained)
    assert all("contract" in line for line in chained)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(128, np.float32), rng.standard_normal(128, np.float32)
    res = np.zeros(1, np.float32)
    KernelLibrary([kernel])(0, x, y, res)
    np.testing.assert_allclose(res[0], np.dot(x, y), rtol=1e-5)


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_pair_dot_sums_products_of_adjacent_int16_pairs(lanes):
    """Lane j: a[2j] * b[2j] + a[2j+1] * b[2j+1], b broadcast as one int32 word of two int16
    (as the int8 GEMM tile uses it), extremes included, accumulated in int32."""
    kb = KernelBuilder("pairs")
    q, word = kb.buf("q", np.int8, (4 * lanes,)), kb.buf("word", np.int32, (2,))
    out = kb.buf("out", np.int32, (lanes,))
    acc = kb.local(INT32, 0, lanes=lanes)
    with kb.loop(2) as i:
        step = pair_dot(cast(q.vec(i * 2 * lanes, 2 * lanes), np.int16),
                        broadcast(word.flat(i), lanes))
        kb.set(acc, Get(acc) + step)
    kb.store_flat(out, 0, Get(acc))
    lib = KernelLibrary([kb.build()])
    rng = np.random.default_rng(lanes)
    qv = rng.integers(-127, 128, 4 * lanes).astype(np.int8)
    qv[:2] = (-127, 127)
    halves = np.array([[-32767, 32767], [1234, -5]], np.int16)
    res = np.zeros(lanes, np.int32)
    lib(0, qv, halves.view(np.int32).ravel(), res)
    want = sum(qv[k * 2 * lanes:(k + 1) * 2 * lanes].reshape(lanes, 2).astype(np.int64)
               @ halves[k].astype(np.int64) for k in range(2))
    np.testing.assert_array_equal(res, want)


def test_pair_dot_checks_its_operands():
    kb = KernelBuilder("bad")
    q, word = kb.buf("q", np.int8, (16,)), kb.buf("word", np.int32, (1,))
    with pytest.raises(TypeError, match="int16 x 16 and int32 x 8"):
        pair_dot(cast(q.vec(0, 8), np.int16), broadcast(word.flat(0), 8))


@pytest.mark.parametrize("lanes", [8, 16])
def test_lane_masked_loads_read_only_their_lanes_wherever_the_others_point(lanes):
    """Buf.vec_lanes: lanes with holes, the vector starting before the buffer and ending past
    it (masked-off lanes are never read), as a plain load when all lanes are on and a prefix
    load when only the first are."""
    kb = KernelBuilder("masked")
    x, y = kb.buf("x", np.float32, (lanes,)), kb.buf("y", np.float32, (3, lanes))
    holes = tuple(k % 3 != 0 for k in range(lanes))
    kb.store_flat(y, 0, x.vec_lanes(-2, tuple(2 <= k and holes[k] for k in range(lanes))))
    kb.store_flat(y, lanes, x.vec_lanes(3, tuple(k < lanes - 3 and holes[k]
                                                 for k in range(lanes))))
    kb.store_flat(y, 2 * lanes, x.vec_lanes(0, (True,) * lanes))
    lib = KernelLibrary([kb.build()])
    xv = np.arange(1, lanes + 1, dtype=np.float32)
    out = np.full((3, lanes), -1, np.float32)
    lib(0, xv, out)
    before = [xv[k - 2] if k >= 2 and holes[k] else 0 for k in range(lanes)]
    after = [xv[k + 3] if k < lanes - 3 and holes[k] else 0 for k in range(lanes)]
    np.testing.assert_array_equal(out, [before, after, xv])
    assert x.vec_lanes(0, (True,) * lanes).valid is None
    assert x.vec_lanes(0, (True,) * 3 + (False,) * (lanes - 3)).valid == 3
    assert x.vec_lanes(0, holes).mask == holes


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_interleave_lanes_lays_vectors_out_element_by_element(n, lanes):
    """Rows of n vectors interleaved (a Winograd tile row's columns into a row of y), and
    picked back apart at stride n."""
    kb = KernelBuilder("interleave")
    x, y = kb.buf("x", np.float32, (n, lanes)), kb.buf("y", np.float32, (2, n * lanes))
    vectors = [x.vec(j * lanes, lanes) for j in range(n)]
    chunks = interleave_lanes(vectors)
    for k, chunk in enumerate(chunks):
        kb.store_flat(y, k * lanes, chunk)
    for j in range(n):
        kb.store_flat(y, n * lanes + j * lanes, pick_lanes(chunks, n, j))
    lib = KernelLibrary([kb.build()])
    xv = np.arange(n * lanes, dtype=np.float32).reshape(n, lanes)
    out = np.zeros((2, n * lanes), np.float32)
    lib(0, xv, out)
    np.testing.assert_array_equal(out[0], xv.T.ravel())
    np.testing.assert_array_equal(out[1], xv.ravel())
