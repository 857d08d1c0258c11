"""The target registry: names a user can ask for, and the LLVM machine each means."""
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
        if self.spec.triple.split("-")[0] != host.triple.split("-")[0]:
            return False
        have = {f for f in host.features.split(",") if f.startswith("+")}
        need = {f for f in self.spec.features.split(",") if f.startswith("+")}
        return need <= have

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "triple": self.spec.triple,
                "cpu": self.spec.cpu, "features": self.spec.features,
                "vector_bits": self.spec.vector_bits, "runs_here": self.runs_here}


_X86_V3 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+popcnt,+sse4.2"
_X86_V4 = _X86_V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"


def all_targets() -> dict[str, Target]:
    host = host_spec()
    return {
        "native": Target("native", f"this machine's CPU ({host.cpu})", host),
        "x86-64-v3": Target("x86-64-v3", "any x86-64 CPU with AVX2 and FMA (Haswell, Zen 1+)",
                            MachineSpec("x86_64-unknown-linux-gnu", "x86-64-v3", _X86_V3)),
        "x86-64-v4": Target("x86-64-v4", "x86-64 CPUs with AVX-512 (Skylake-X, Zen 4+)",
                            MachineSpec("x86_64-unknown-linux-gnu", "x86-64-v4", _X86_V4)),
    }


def get_target(name: str) -> Target:
    targets = all_targets()
    if name not in targets:
        raise CompileError(f"unknown target {name!r}; valid targets: {', '.join(targets)}")
    return targets[name]
