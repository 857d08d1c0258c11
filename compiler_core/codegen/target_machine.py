"""LLVM initialisation, target machines and the optimisation pipeline."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm


@functools.cache
def init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@dataclass(frozen=True)
class MachineSpec:
    triple: str
    cpu: str
    features: str

    @property
    def arch(self) -> str:
        """The triple's architecture: 'x86_64', 'aarch64', ..."""
        return self.triple.split("-")[0]

    @property
    def vector_bits(self) -> int:
        """Width of the fixed-width vectors our kernels may use. AArch64 answers 128 (NEON)
        even with SVE: kernels pick fixed lane counts at compile time, and SVE's width is
        only known on the device (256 bits on Graviton 3), though LLVM's own loop
        vectorizer may still emit SVE code for the target's features."""
        if self.arch == "aarch64":
            return 128
        feats = set(self.features.split(","))
        if "+avx512f" in feats:
            return 512
        if "+avx2" in feats or "+avx" in feats:
            return 256
        return 128

    @property
    def vector_registers(self) -> int:
        """Architectural SIMD registers: what a register tile may fill."""
        x86 = self.arch in ("x86_64", "i686", "i386")
        return 16 if x86 and self.vector_bits < 512 else 32


@functools.cache
def host_spec() -> MachineSpec:
    init_llvm()
    return MachineSpec(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                       llvm.get_host_cpu_features().flatten())


# Measured on znver4: LLVM's cost model let the loop vectorizer turn a strided elementwise
# loop (squeeze-excite's channel scaling, x[c, i] * s[c]) into AVX-512 gathers and scatters,
# 8x slower than the AVX2 build's plain loads; gathers and scatters are slow on AMD cores.
# Our kernels load vectors explicitly where they want them.
X86_TUNING = ",+prefer-no-gather,+prefer-no-scatter"
# LLVM tunes Intel's AVX-512 cores (skylake-avx512 to sapphirerapids; rocketlake is what a
# Sapphire Rapids-class cloud Xeon reports) to prefer 256-bit vectors, and then splits even
# our explicit 16-float vectors into halves: every conv and GEMM tile ran as AVX2 at half
# the FMA width, 1x1 convs at 93 of numpy's 196 GFLOP/s. Our kernels choose their widths.
X86_FULL_WIDTH = ",-prefer-256-bit"


def create_target_machine(spec: MachineSpec, opt: int = 3):
    init_llvm()
    target = llvm.Target.from_triple(spec.triple)
    features = spec.features
    if spec.arch == "x86_64":
        features += X86_TUNING + (X86_FULL_WIDTH if spec.vector_bits == 512 else "")
    return target.create_target_machine(cpu=spec.cpu, features=features, opt=opt,
                                        reloc="pic", codemodel="default")


def optimize(module, tm, opt_level: int) -> None:
    if opt_level <= 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
