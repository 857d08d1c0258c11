"""Compiled vs ONNX Runtime on the reference models, measured in the same run.

    python -m bench.models [--filter NAME] [--threads 1] [--seconds 5] [--json FILE]

Prints, per model, both medians and the ratio ours / ONNX Runtime (below 1 is faster) —
absolute times alone mean little on a shared, noisy machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

import compiler_core as cc
from compiler_core.runtime.benchmark import compare

ROOT = Path(__file__).resolve().parents[1]
LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"
OWN = ROOT / "tests/models"


def reference_models() -> list[Path]:
    return sorted(LIGHT.glob("light_*.onnx")) + sorted(OWN.glob("*.onnx"))


def input_shapes_for(path: Path) -> dict:
    """Own models declare symbolic dims; bench them at the sizes their generators document."""
    sidecar = path.with_suffix(".shapes.json")
    return json.loads(sidecar.read_text()) if sidecar.exists() else {}


def bench_one(path: Path, threads: int, seconds: float) -> dict:
    t0 = time.perf_counter()
    art = cc.compile(path, input_shapes=input_shapes_for(path) or None)
    compile_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        art.save(tmp)
        r = compare(tmp, path, threads=threads, min_runs=5, max_seconds=seconds)
    return {"model": path.stem, "compile_s": compile_s, "ours_ms": r["compiled"]["median_ms"],
            "ort_ms": r["onnxruntime"]["median_ms"],
            "ratio": r["compiled"]["median_ms"] / r["onnxruntime"]["median_ms"],
            "speedup": r["speedup"], "allclose": r["allclose"], "max_abs_err": r["max_abs_err"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--filter", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'model':28s} {'ours ms':>10s} {'ORT ms':>10s} {'ours/ORT':>9s} {'speedup':>8s} "
          f"{'allclose':>8s} {'compile s':>9s}")
    for path in reference_models():
        if args.filter not in path.stem:
            continue
        try:
            row = bench_one(path, args.threads, args.seconds)
        except Exception as exc:  # one model failing must not hide the others' figures
            print(f"{path.stem:28s} FAILED: {str(exc).splitlines()[0][:100]}")
            continue
        rows.append(row)
        print(f"{row['model']:28s} {row['ours_ms']:10.3f} {row['ort_ms']:10.3f} "
              f"{row['ratio']:9.2f} {row['speedup']:7.2f}x {str(row['allclose']):>8s} "
              f"{row['compile_s']:9.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
