"""What the figures were measured on, and the peak they are held against.

The peak is measured, not looked up: numpy's BLAS (OpenBLAS) multiplying two 2048x2048
float32 matrices on one thread, best of a few runs (compiler_core/analysis/machine_limits.py).
The bench measures it in every run rather than reading the per-CPU cache that layer reports
use: the bench runs alone on the machine, a cached figure may have been taken under load.
"""
from __future__ import annotations

import os

from compiler_core.analysis.machine_limits import cpu_model_name, measure
from compiler_core.targets import get_target

from .baselines import openvino_version


def sgemm_peak_gflops() -> float:
    """Single-thread float32 GEMM throughput of numpy's BLAS on this machine now, GFLOP/s
    (measure() also takes the bandwidths, a few seconds in a single-threaded child)."""
    return measure().peak_gflops


def vector_isa(features: str) -> str:
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    if "avx512f" in have:
        return "AVX-512"
    return "AVX2" if "avx2" in have else "SSE"


def describe() -> dict:
    import onnxruntime
    target = get_target("native").as_dict()
    return {"cpu": target["cpu"], "cpu_model": cpu_model_name(), "cores": os.cpu_count(),
            "vector_bits": target["vector_bits"], "isa": vector_isa(target["features"]),
            "onnxruntime": onnxruntime.__version__, "openvino": openvino_version()}


def header_line(machine: dict) -> str:
    ov = machine["openvino"] or "not installed"
    return (f"CPU {machine['cpu']} ({machine['cpu_model']}, {machine['cores']} cores), "
            f"{machine['isa']} {machine['vector_bits']}-bit vectors; "
            f"ONNX Runtime {machine['onnxruntime']}, OpenVINO {ov}")
