"""What the figures were measured on, and the peak they are held against.

The peak is measured, not looked up: numpy's BLAS (OpenBLAS) multiplying two 2048x2048
float32 matrices on one thread, best of a few runs. It runs in a child process because
OpenBLAS reads its thread count from the environment once, when it is loaded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from compiler_core.targets import get_target

SGEMM_SCRIPT = """
import json, sys, time
import numpy as np
n, repeats = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
a @ b
times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t0)
print(json.dumps(2 * n ** 3 / min(times) / 1e9))
"""


def sgemm_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Single-thread float32 GEMM throughput of numpy's BLAS on this machine, GFLOP/s."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", SGEMM_SCRIPT, str(n), str(repeats)], env=env,
                         capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout))


def cpu_model_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def vector_isa(features: str) -> str:
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    if "avx512f" in have:
        return "AVX-512"
    return "AVX2" if "avx2" in have else "SSE"


def describe(openvino_version: str | None) -> dict:
    import onnxruntime
    target = get_target("native").as_dict()
    return {"cpu": target["cpu"], "cpu_model": cpu_model_name(), "cores": os.cpu_count(),
            "vector_bits": target["vector_bits"], "isa": vector_isa(target["features"]),
            "onnxruntime": onnxruntime.__version__, "openvino": openvino_version}


def header_line(machine: dict) -> str:
    ov = machine["openvino"] or "not installed"
    return (f"CPU {machine['cpu']} ({machine['cpu_model']}, {machine['cores']} cores), "
            f"{machine['isa']} {machine['vector_bits']}-bit vectors; "
            f"ONNX Runtime {machine['onnxruntime']}, OpenVINO {ov}")
