"""LLVM module -> object -> position-independent shared library with embedded weights.

The linker follows the target triple: the host's C compiler driver for the host's
architecture, the GNU cross driver `<arch>-linux-gnu-gcc` (Debian: gcc-<arch>-linux-gnu, which
brings that architecture's binutils and libc) for any other. A library with parallel loops
gets the thread pool (thread_pool.c), compiled by the same driver.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import llvmlite.binding as llvm

from .target_machine import MachineSpec, create_target_machine, host_spec, optimize

WEIGHTS_ASM = """\
    .section .rodata.tf_weights,"a",%progbits
    .globl tf_weights
    .hidden tf_weights
    .balign 64
tf_weights:
    .incbin "{path}"
    .byte 0
    .section .note.GNU-stack,"",%progbits
"""
# `%progbits`, not `@progbits`: GNU as reads both on x86-64 and AArch64, and `@` starts a
# comment on some other architectures.


class LinkError(RuntimeError):
    pass


def find_cc(triple: str) -> str:
    """The C compiler driver that links for `triple`."""
    arch = triple.split("-")[0]
    if arch != host_spec().arch:
        return find_cross_cc(arch)
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise LinkError("no C compiler driver found (cc, gcc or clang): the worker machine needs "
                    "one with binutils to link the shared library; on Debian: apt-get install gcc")


DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}


def cross_packages(arch: str) -> list[str]:
    """The Debian packages of the GNU cross toolchain for `arch` (gcc, binutils, libc)."""
    return [f"gcc-{arch}-linux-gnu", f"libc6-dev-{DEBIAN_ARCH.get(arch, arch)}-cross"]


def find_cross_cc(arch: str) -> str:
    name = f"{arch}-linux-gnu-gcc"
    if not shutil.which(name) or not Path(f"/usr/{arch}-linux-gnu/lib/crti.o").is_file():
        raise LinkError(f"no {name} with its C library to link for {arch}: install the cross "
                        f"toolchain (Debian: apt-get install {' '.join(cross_packages(arch))}, "
                        "or `make setup` as root)")
    return shutil.which(name)


def emit_object(llvm_ir: str, spec: MachineSpec, opt_level: int) -> bytes:
    mod = llvm.parse_assembly(llvm_ir)
    mod.verify()
    tm = create_target_machine(spec, opt=min(opt_level, 3))
    optimize(mod, tm, opt_level)
    return tm.emit_object(mod)


POOL_SOURCE = Path(__file__).with_name("thread_pool.c")


@lru_cache(maxsize=None)
def pool_object(cc: str) -> bytes:
    """thread_pool.c compiled by `cc`, once per process (a tuning run links hundreds of
    candidate libraries)."""
    with tempfile.TemporaryDirectory(prefix="tensorforge-pool-") as tmp:
        obj = Path(tmp) / "thread_pool.o"
        _run([cc, "-O2", "-fPIC", "-std=c11", "-Wall", "-Werror", "-c", str(POOL_SOURCE),
              "-o", str(obj)], "compiling the thread pool")
        return obj.read_bytes()


def link_shared(objects: list[bytes], weights: bytes, workdir: Path, out: Path, threads: bool,
                triple: str | None = None) -> None:
    """Link for `triple` (default: this machine, as kernel libraries loaded here are);
    `threads`: the code has parallel loops (codegen/parallel.uses_threads)."""
    write_inputs(objects, weights, workdir)
    link_written(workdir, len(objects), out, threads, triple)


def write_inputs(objects: list[bytes], weights: bytes, workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for k, obj in enumerate(objects):
        (workdir / f"kernels{k}.o").write_bytes(obj)
    (workdir / "weights.bin").write_bytes(weights)


def link_written(workdir: Path, count: int, out: Path, threads: bool,
                 triple: str | None = None) -> None:
    """link_shared's link, of the `count` objects and the weights write_inputs wrote."""
    (workdir / "weights.s").write_text(WEIGHTS_ASM.format(path=(workdir / "weights.bin").resolve()))
    cc = find_cc(triple or host_spec().triple)
    objects = [str(workdir / f"kernels{k}.o") for k in range(count)] + [str(workdir / "weights.s")]
    if threads:
        (workdir / "thread_pool.o").write_bytes(pool_object(cc))
        objects.append(str(workdir / "thread_pool.o"))
    _run([cc, "-shared", "-fPIC", "-o", str(out), *objects, *(["-pthread"] if threads else []),
          "-lm", "-Wl,-z,noexecstack"], "linking")


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LinkError(f"{what} failed: {proc.stderr.strip()[:2000]}")
