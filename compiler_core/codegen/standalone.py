"""Kernels on their own: a shared library that exports each Kernel, callable on numpy arrays.

Kernel tests and the autotuner's runner use it to build and time one kernel (or a batch of
candidate schedules of one kernel) without a whole model around it. Each kernel k is
exported as `void tf_kernel_k(void **params)`; params are in the Kernel's own order.
"""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np
from llvmlite import ir

from ..ir.loops import Kernel
from .link import emit_object, link_shared
from .lower_kernel import I64, PTR, lower_kernel
from .module_builder import set_threads_function
from .parallel import uses_threads
from .target_machine import MachineSpec, host_spec


def build_module(kernels: list[Kernel], triple: str) -> ir.Module:
    module = ir.Module(name="kernels")
    module.triple = triple
    for k, kernel in enumerate(kernels):
        _export(module, lower_kernel(module, kernel), len(kernel.params), f"tf_kernel_{k}")
    set_threads_function(module)
    return module


def build_library(kernels: list[Kernel], spec: MachineSpec, opt_level: int, path: Path) -> None:
    module = build_module(kernels, spec.triple)
    obj = emit_object(str(module), spec, opt_level)
    link_shared([obj], b"", path.parent / f"{path.stem}-build", path, uses_threads(module))


def _export(module, fn, nparams, name) -> None:
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=name)
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))
    table = wrapper.args[0]
    args = [b.load(b.gep(table, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR)
            for i in range(nparams)]
    b.call(fn, args)
    b.ret_void()


class KernelLibrary:
    """`lib(k, *arrays)` runs kernel k; arrays must match its params' dtypes and sizes."""

    def __init__(self, kernels: list[Kernel], spec: MachineSpec | None = None, opt_level=3,
                 built: Path | None = None):
        """`built`: the library build_library already made of these kernels."""
        self.kernels = kernels
        self._tmp = tempfile.TemporaryDirectory(prefix="tensorforge-kernels-")
        path = built or Path(self._tmp.name) / "kernels.so"
        if built is None:
            build_library(kernels, spec or host_spec(), opt_level, path)
        self._lib = ctypes.CDLL(str(path))
        self._lib.tf_set_num_threads.argtypes = [ctypes.c_int]

    def set_threads(self, n: int) -> None:
        self._lib.tf_set_num_threads(n)

    def bind(self, k: int, *arrays: np.ndarray):
        """A no-argument call running kernel k on these exact arrays (for timing loops)."""
        self._check(self.kernels[k], arrays)
        table = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        fn = getattr(self._lib, f"tf_kernel_{k}")
        fn.argtypes = [ctypes.c_void_p]

        def call():
            fn(table)
        call.buffers = arrays  # keep them alive as long as the call
        return call

    def __call__(self, k: int, *arrays: np.ndarray) -> None:
        self.bind(k, *arrays)()

    @staticmethod
    def _check(kernel: Kernel, arrays) -> None:
        if len(arrays) != len(kernel.params):
            raise ValueError(f"{kernel.name}: {len(kernel.params)} params, {len(arrays)} arrays")
        for p, a in zip(kernel.params, arrays):
            if a.dtype != p.dtype or a.size < p.size or not a.flags.c_contiguous:
                raise ValueError(f"{kernel.name}: param {p.name} needs a contiguous "
                                 f"{p.dtype}[{p.size}], got {a.dtype}{list(a.shape)}")
