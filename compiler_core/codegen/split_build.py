"""A model's object code built on two cores: LLVM takes turns within a process, so the
kernels are split in two shares of about equal size; a forked process lowers, optimizes and
emits one share into an object of its own, while this one does the other and the entry
points, which call the other share's kernels by their (hidden) names. The thread count
(codegen/parallel.py) is defined once, beside the entry points, for both. With one core, or
a handful of kernels, it is one module as before.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from llvmlite import ir

from ..ir.loops import For, If, Kernel
from ..passes.memory_plan import MemoryPlan
from .link import emit_object
from .lower_kernel import lower_kernel
from .module_builder import Step, build_module
from .parallel import THREADS, uses_threads
from .target_machine import MachineSpec

MIN_KERNELS = 4  # fewer: the fork costs more than it saves


def build_objects(name: str, spec: MachineSpec, opt_level: int, steps: list[Step],
                  plan: MemoryPlan) -> tuple[list[bytes], bool]:
    """(the objects to link, whether any has parallel loops)."""
    kernels = list({id(s.kernel): s.kernel for s in steps if s.kernel is not None}.values())
    if len(kernels) < MIN_KERNELS or len(os.sched_getaffinity(0)) < 2:
        module = build_module(name, spec.triple, steps, plan)
        return [emit_object(str(module), spec, opt_level)], uses_threads(module)
    apart = half_by_size(kernels)
    with tempfile.TemporaryDirectory(prefix="tensorforge-split-") as tmp:
        path = Path(tmp) / "apart.o"
        try:
            pid = fork_and_run(lambda: _write_share(name, spec, opt_level, apart, path))
        except OSError:  # no process to spare (RLIMIT_NPROC): the share is built here below
            pid = 0
        try:
            main = build_module(name, spec.triple, steps, plan, elsewhere={id(k) for k in apart})
            objects = [emit_object(str(main), spec, opt_level)]
        finally:  # the fork is waited for even when this share fails
            built = bool(pid) and os.waitpid(pid, 0)[1] == 0 and path.exists()
        if not built:  # built here after all (an error then shows as it would in one module)
            _write_share(name, spec, opt_level, apart, path)
        objects.append(path.read_bytes())
        threads = uses_threads(main) or path.with_suffix(".threads").exists()
    return objects, threads


def half_by_size(kernels: list[Kernel]) -> list[Kernel]:
    """About half of the kernels' statements (LLVM's time grows with them): the biggest
    first, each to the lighter share; the second share is returned."""
    shares: tuple[list, list] = ([], [])
    sizes = [0, 0]
    for size, kernel in sorted(((_statements(k.body), k) for k in kernels),
                               key=lambda pair: pair[0], reverse=True):
        lighter = sizes.index(min(sizes))
        shares[lighter].append(kernel)
        sizes[lighter] += size
    return shares[1]


def _statements(body: list) -> int:
    count = 0
    for s in body:
        count += 1
        if isinstance(s, For):
            count += _statements(s.body)
        elif isinstance(s, If):
            count += _statements(s.then) + _statements(s.orelse)
    return count


def _write_share(name: str, spec: MachineSpec, opt_level: int, kernels: list[Kernel],
                 path: Path) -> None:
    module = share_module(name, spec.triple, kernels)
    path.write_bytes(emit_object(str(module), spec, opt_level))
    if uses_threads(module):
        path.with_suffix(".threads").touch()


def share_module(name: str, triple: str, kernels: list[Kernel]):
    """The kernels as hidden functions of their own names, reading the thread count the
    entry points' module defines."""
    module = ir.Module(name=f"{name}.share")
    module.triple = triple
    for kernel in kernels:  # llvmlite writes the linkage where LLVM reads a visibility
        lower_kernel(module, kernel).linkage = "hidden"
    threads = module.globals.get(THREADS)
    if threads is not None:
        threads.initializer, threads.linkage, threads.storage_class = None, "external", "hidden"
    return module


def fork_and_run(build) -> int:
    """A forked process that runs `build` and leaves at once, whatever happens; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            build()
            code = 0
        finally:
            os._exit(code)
    return pid
