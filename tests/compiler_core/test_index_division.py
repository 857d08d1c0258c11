"""Python's // and % on integers in generated code: by a constant above 0 they take the
short unsigned form where the dividend cannot be negative, and keep floor semantics
wherever it can."""
import numpy as np
import pytest
from llvmlite import ir

from compiler_core.codegen.lower_kernel import lower_kernel
from compiler_core.codegen.standalone import KernelLibrary
from compiler_core.ir.loops import KernelBuilder, cast


def _divide_kernel(start: int, stop: int, divisor: int, kind: str = "serial"):
    """out[k] = (i // divisor, i % divisor, (3 * i + 1) // divisor) for i = start + k."""
    kb = KernelBuilder("divide")
    out = kb.buf("out", np.int64, (stop - start, 3))
    with kb.loop(stop, start=start, kind=kind) as i:
        kb.store(out, (i - start, 0), i // divisor)
        kb.store(out, (i - start, 1), i % divisor)
        kb.store(out, (i - start, 2), (i * 3 + 1) // divisor)
    return kb.build()


def _run(kernel, rows: int) -> np.ndarray:
    out = np.zeros((rows, 3), np.int64)
    KernelLibrary([kernel])(0, out)
    return out


def _expected(start: int, stop: int, divisor: int) -> np.ndarray:
    i = np.arange(start, stop, dtype=np.int64)
    return np.stack([i // divisor, i % divisor, (3 * i + 1) // divisor], axis=1)


@pytest.mark.parametrize("start,divisor", [(-23, 4), (-9, 7), (0, 5), (3, 8)])
def test_floor_division_and_modulo_match_python(start, divisor):
    got = _run(_divide_kernel(start, start + 40, divisor), 40)
    np.testing.assert_array_equal(got, _expected(start, start + 40, divisor))


def test_a_parallel_loop_counts_as_never_negative():
    kernel = _divide_kernel(0, 64, 6, kind="parallel")
    np.testing.assert_array_equal(_run(kernel, 64), _expected(0, 64, 6))
    assert "sdiv" not in _ir(kernel) and "udiv" in _ir(kernel)


def _ir(kernel) -> str:
    module = ir.Module()
    lower_kernel(module, kernel)
    return str(module)


def test_a_counter_from_zero_is_divided_unsigned_and_one_from_below_zero_signed():
    counted = _ir(_divide_kernel(0, 40, 4))
    assert "udiv" in counted and "urem" in counted
    assert "sdiv" not in counted and "srem" not in counted
    signed = _ir(_divide_kernel(-8, 40, 4))
    assert "sdiv" in signed and "srem" in signed


def test_a_value_read_from_memory_keeps_floor_semantics():
    kb = KernelBuilder("divide_loaded")
    src, out = kb.buf("src", np.int32, (16,)), kb.buf("out", np.int64, (16, 2))
    with kb.loop(16) as i:
        kb.store(out, (i, 0), cast(src[i] // 3, np.int64))
        kb.store(out, (i, 1), cast(src[i], np.int64) % 3)
    values = np.arange(-8, 8, dtype=np.int32)
    out = np.zeros((16, 2), np.int64)
    KernelLibrary([kb.build()])(0, values, out)
    np.testing.assert_array_equal(out[:, 0], values // 3)
    np.testing.assert_array_equal(out[:, 1], values % 3)
