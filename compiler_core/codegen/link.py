"""LLVM module -> object -> position-independent shared library with embedded weights."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import llvmlite.binding as llvm

from .target_machine import MachineSpec, create_target_machine, optimize

WEIGHTS_ASM = """\
    .section .rodata.tf_weights,"a",@progbits
    .globl tf_weights
    .hidden tf_weights
    .balign 64
tf_weights:
    .incbin "{path}"
    .byte 0
    .section .note.GNU-stack,"",@progbits
"""


class LinkError(RuntimeError):
    pass


def find_cc() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise LinkError("no C compiler driver found (cc, gcc or clang): the worker machine needs "
                    "one with binutils to link the shared library; on Debian: apt-get install gcc")


def emit_object(llvm_ir: str, spec: MachineSpec, opt_level: int) -> bytes:
    mod = llvm.parse_assembly(llvm_ir)
    mod.verify()
    tm = create_target_machine(spec, opt=min(opt_level, 3))
    optimize(mod, tm, opt_level)
    return tm.emit_object(mod)


def link_shared(obj: bytes, weights: bytes, workdir: Path, out: Path, openmp: bool) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kernels.o").write_bytes(obj)
    (workdir / "weights.bin").write_bytes(weights)
    (workdir / "weights.s").write_text(WEIGHTS_ASM.format(path=(workdir / "weights.bin").resolve()))
    cmd = [find_cc(), "-shared", "-fPIC", "-o", str(out), str(workdir / "kernels.o"),
           str(workdir / "weights.s"), *(["-lgomp"] if openmp else []), "-lm",
           "-Wl,-z,noexecstack"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LinkError(f"linking failed: {proc.stderr.strip()[:2000]}")
