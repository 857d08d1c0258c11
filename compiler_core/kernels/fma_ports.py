"""How many 512-bit FMAs a cycle a target's cores issue: kernels' defaults differ by it."""
from __future__ import annotations


def two_wide_fma_ports(spec) -> bool:
    """Intel's AVX-512 cores and Zen 5 issue two 512-bit FMAs a cycle; Zen 4 one (it splits
    each into 256-bit halves). Zen 5, 1 thread, whole models with the rules this decides
    (new/old): SqueezeNet 0.969, YOLOv8n-320 0.975 (0.993 of it the Winograd rule),
    Inception v2 0.977, DenseNet-121 0.984, ResNet-50 0.988; 2 threads SqueezeNet 0.975,
    YOLOv8n-320 0.974."""
    return spec.vector_bits >= 512 and spec.cpu != "znver4"


def one_wide_fma_port(spec) -> bool:
    """AVX-512 code on a core that issues one 512-bit FMA a cycle (Zen 4)."""
    return spec.vector_bits >= 512 and not two_wide_fma_ports(spec)


def amd_two_wide_fma_ports(spec) -> bool:
    """Zen 5 (and later AMD cores): some defaults measured there differ from Intel's."""
    return two_wide_fma_ports(spec) and spec.cpu.startswith("znver")


def intel_two_fma_ports(spec) -> bool:
    return two_wide_fma_ports(spec) and not amd_two_wide_fma_ports(spec)
