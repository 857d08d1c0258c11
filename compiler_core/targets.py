"""The target registry: names a user can ask for, and the LLVM machine each means.

Targets of another architecture than the host's (the aarch64 ones on an x86-64 worker) are
cross-compiled: LLVM emits the object and the target's GNU cross toolchain links it
(codegen/link.py); their artifacts run here only under user-mode emulation
(runtime/emulation.py), which checks correctness but says nothing about speed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .codegen.target_machine import MachineSpec, host_spec
from .errors import CompileError


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    spec: MachineSpec

    @property
    def runs_here(self) -> bool:
        host = host_spec()
        if self.spec.arch != host.arch:
            return False
        have = {f for f in host.features.split(",") if f.startswith("+")}
        need = {f for f in self.spec.features.split(",") if f.startswith("+")}
        return need <= have

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "arch": self.spec.arch,
                "triple": self.spec.triple, "cpu": self.spec.cpu, "features": self.spec.features,
                "vector_bits": self.spec.vector_bits, "runs_here": self.runs_here}


_X86_V3 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+popcnt,+sse4.2"
_X86_V4 = _X86_V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"
_X86 = "x86_64-unknown-linux-gnu"
_ARM = "aarch64-unknown-linux-gnu"
# Each Arm feature string holds only what every CPU its description names has (Cortex-A76,
# in the Raspberry Pi 5, has Neoverse N1's features), and each extends the one before.
_ARM_V8 = "+v8a,+neon,+fp-armv8,+crc"
_ARM_V82 = "+v8.2a,+neon,+fp-armv8,+crc,+lse,+rdm,+rcpc,+dotprod,+fullfp16"
_ARM_V1 = _ARM_V82.replace("+v8.2a", "+v8.4a") + ",+sve,+bf16,+i8mm"


def all_targets() -> dict[str, Target]:
    host = host_spec()
    return {
        "native": Target("native", f"this machine's CPU ({host.cpu})", host),
        "x86-64-v3": Target("x86-64-v3", "any x86-64 CPU with AVX2 and FMA (Haswell, Zen 1+)",
                            MachineSpec(_X86, "x86-64-v3", _X86_V3)),
        "x86-64-v4": Target("x86-64-v4", "x86-64 CPUs with AVX-512 (Skylake-X, Zen 4+)",
                            MachineSpec(_X86, "x86-64-v4", _X86_V4)),
        "aarch64": Target("aarch64", "64-bit Arm, ARMv8.2-A with NEON (AWS Graviton 2, Ampere "
                          "Altra, Raspberry Pi 5; Linux, glibc)",
                          MachineSpec(_ARM, "neoverse-n1", _ARM_V82)),
        "neoverse-v1": Target("neoverse-v1", "64-bit Arm Neoverse V1, ARMv8.4-A with SVE (AWS "
                              "Graviton 3); kernels use 128-bit NEON vectors, LLVM may add SVE",
                              MachineSpec(_ARM, "neoverse-v1", _ARM_V1)),
        "cortex-a72": Target("cortex-a72", "64-bit Arm, ARMv8.0-A with NEON (Raspberry Pi 4, "
                             "Cortex-A72/A57 boards such as Jetson Nano)",
                             MachineSpec(_ARM, "cortex-a72", _ARM_V8)),
    }


def get_target(name: str) -> Target:
    targets = all_targets()
    if name not in targets:
        raise CompileError(f"unknown target {name!r}; valid targets: {', '.join(targets)}")
    return targets[name]
