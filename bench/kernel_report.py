"""`--kernels`: where a compiled model spends its time, kernel by kernel.

Each kernel's time comes from the artifact's own profiling entry point (tf_profile, wall
time per kernel call); its FLOPs, bytes and the ONNX nodes it covers from meta.json (written
by compiler_core/analysis/node_cost.py at compile time). GFLOP/s is set against the peak the
bench measured (numpy's sgemm, one thread, times the thread count).
"""
from __future__ import annotations

import numpy as np

from compiler_core.runtime.benchmark import SETTLE_MS, settle_calls

# Per kernel, the median over this many profiled runs. A mean let one disturbed run lead
# the report: AMD EPYC (LLVM: znver5), YOLOv8n-320 at 2 threads, two 1x1 convs read 0.306
# and 0.362 ms as means of 5 runs, against 0.09-0.11 ms in every run of a profile taken
# alone.
PROFILE_RUNS = 7


def kernel_rows(loaded, feeds: dict) -> list[dict]:
    """Profiled after calls have run at their usual speed for a while (benchmark.settle_calls):
    the bench profiles right after timing every runtime in turn, and the last one's idle
    threads spin on. AMD EPYC (LLVM: znver5), YOLOv8n-320 at 2 threads after OpenVINO's
    turn: the kernels added up to 12.0 ms in a model timed at 7.6 ms, each about as slow
    as at 1 thread."""
    settle_calls(loaded.bind_feeds(feeds), SETTLE_MS, float("inf"))
    medians = np.median(loaded.profile_runs(feeds, PROFILE_RUNS), axis=0)
    rows = []
    for k, meta in enumerate(loaded.meta["kernels"]):
        ms, flops = float(medians[k]), meta.get("flops")
        rows.append({"index": k, "name": meta["name"], "op": meta["op"], "ms": ms,
                     "flops": flops, "bytes": meta.get("bytes"),
                     "onnx_nodes": meta.get("onnx_nodes", []),
                     "gflops": flops / ms / 1e6 if flops and ms > 0 else None})
    return rows


def format_kernels(rows: list[dict], peak_gflops: float, top: int) -> str:
    total = sum(r["ms"] for r in rows) or 1.0
    lines = [f"    {'kernel':28s} {'ms':>8s} {'share':>6s} {'GFLOP/s':>8s} {'%peak':>6s}  "
             f"onnx nodes ({len(rows)} kernels, {total:.3f} ms)"]
    for r in sorted(rows, key=lambda r: -r["ms"])[:top]:
        rate = f"{r['gflops']:8.1f} {100 * r['gflops'] / peak_gflops:5.0f}%" if r["gflops"] \
            else f"{'-':>8s} {'-':>6s}"
        nodes = ", ".join(r["onnx_nodes"][:4]) + (" ..." if len(r["onnx_nodes"]) > 4 else "")
        lines.append(f"    {r['name'][:28]:28s} {r['ms']:8.3f} {100 * r['ms'] / total:5.1f}% "
                     f"{rate}  {nodes}")
    return "\n".join(lines)
