"""The machine's compute and memory-bandwidth limits, measured once and cached.

* Compute: numpy's BLAS (OpenBLAS) multiplying two 2048x2048 float32 matrices on one thread,
  best of a few runs, in GFLOP/s (a multiply-add is 2 FLOPs, as in analysis/node_cost.py).
* Bandwidth: numpy's BLAS float32 dot product (sdot) of two vectors, one thread, best of a
  few runs, in GB/s of bytes read, at three working-set sizes: half the L2 cache, half the
  L3 cache and four times the L3 cache (main memory). Which one a model runs against
  depends on whether its weights and arena stay in a cache between runs (`ceiling_for`).

Both run in a child process because OpenBLAS reads its thread count from the environment
once, when it loads. The result is cached as JSON per CPU (model name and LLVM cpu name):
the measurement takes a few seconds, the machine does not change.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

SCRIPT = """
import json, sys, time
import numpy as np

def best(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)

def sgemm_gflops(n=2048, repeats=5):
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    return 2 * n ** 3 / best(lambda: a @ b, repeats) / 1e9

def read_gbps(nbytes):
    n = max(nbytes // 8, 1024)  # two float32 vectors
    a, b = np.ones(n, np.float32), np.ones(n, np.float32)
    inner = max(1, int(64e6 // nbytes))  # about 64 MB read per timed block
    def block():
        for _ in range(inner):
            np.dot(a, b)
    return 8 * n * inner / best(block, 7) / 1e9

sizes = json.loads(sys.argv[1])
print(json.dumps({"peak_gflops": sgemm_gflops(),
                  "bandwidth_gbps": {level: read_gbps(size) for level, size in sizes.items()}}))
"""

LEVELS = ("L2", "L3", "memory")
FALLBACK_CACHES = {"L2": 512 * 1024, "L3": 32 * 2 ** 20}  # when sysfs does not say


@dataclass(frozen=True)
class MachineLimits:
    cpu: str                      # LLVM's name for the CPU, e.g. znver3
    cpu_model: str                # /proc/cpuinfo's model name
    peak_gflops: float            # one thread
    bandwidth_gbps: dict          # level (L2, L3, memory) -> GB/s read by one thread
    cache_bytes: dict             # level (L2, L3) -> size in bytes

    def as_dict(self) -> dict:
        return asdict(self)

    def ceiling_for(self, footprint_bytes: int) -> tuple[str, float]:
        """The bandwidth a model whose weights and arena take `footprint_bytes` streams
        at, run after run: the smallest cache level that holds it, else main memory."""
        for level in ("L2", "L3"):
            if footprint_bytes <= self.cache_bytes[level]:
                return level, self.bandwidth_gbps[level]
        return "memory", self.bandwidth_gbps["memory"]


def cache_sizes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict:
    sizes = dict(FALLBACK_CACHES)
    for index in sorted(sysfs.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if level in (2, 3) and kind in ("Unified", "Data"):
            sizes[f"L{level}"] = size
    return sizes


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        raise ValueError(f"cache size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}[m.group(2)]


def cpu_model_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def measure() -> MachineLimits:
    """A few seconds of single-thread sgemm and sdot (see the module docstring)."""
    from ..targets import get_target
    caches = cache_sizes()
    working_sets = {"L2": caches["L2"] // 2, "L3": caches["L3"] // 2, "memory": 4 * caches["L3"]}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(working_sets)], env=env,
                         capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout)
    return MachineLimits(get_target("native").spec.cpu, cpu_model_name(),
                         figures["peak_gflops"], figures["bandwidth_gbps"], caches)


def machine_limits(cache_dir: Path, remeasure: bool = False) -> MachineLimits:
    """This machine's limits, from `cache_dir` when measured before on the same CPU."""
    path = machine_limits_path(cache_dir)
    if not remeasure and path.is_file():
        try:
            return MachineLimits(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # an older or broken file: measure again
    limits = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(limits.as_dict(), indent=1))
    os.replace(tmp, path)
    return limits



def machine_limits_path(cache_dir: Path) -> Path:
    """One file per CPU kind, so a cache directory shared by machines stays right."""
    from ..targets import get_target
    key = re.sub(r"[^A-Za-z0-9]+", "-", f"{get_target('native').spec.cpu}-{cpu_model_name()}")
    return Path(cache_dir) / f"machine-limits-{key}.json"
