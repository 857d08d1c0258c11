"""`make bench`: our compiled models against ONNX Runtime (and OpenVINO when installed), at
several thread counts, measured in one run.

    python -m bench.models [--filter NAME[,NAME]] [--threads 1,2] [--seconds 6] [--json FILE]
                           [--kernels] [--top 8] [--weight-dtype float32|float16|int8]

Each model is compiled once; then every runner (ours, ONNX Runtime, OpenVINO, at every
thread count: our artifact is loaded once per thread count, from its own copy, since the
count is a global of the library) gets a turn of about 25 ms of back-to-back calls, round
after round, so machine noise hits them alike; each turn starts with an untimed call, which
absorbs the previous runtime's threads winding down. Figures are medians; see bench/table.py for the columns. `--kernels` adds
each model's top kernels with GFLOP/s against a single-thread sgemm peak measured here.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import compiler_core as cc
from compiler_core.passes.weight_precision import WEIGHT_DTYPES
from compiler_core.runtime.benchmark import SETTLE_MS, interleave, numerical_check, ort_outputs
from compiler_core.runtime.loaded_model import load

from . import table
from .baselines import baseline_runners
from .kernel_report import format_kernels, kernel_rows
from .machine import describe, header_line, sgemm_peak_gflops
from .suite import GROUPS, BenchModel, bench_models

BLOCK_MS = 25.0  # each runner's turn in a round (compiler_core.runtime.benchmark.interleave)


def measure(model: BenchModel, threads: list[int], seconds: float, kernels: bool,
            weight_dtype: str = "float32") -> list[dict]:
    """With reduced-precision weights, the error columns are against ONNX Runtime float32:
    the weights' error (meta.json's weight_precision says the same against our float32)."""
    path, feeds = model.locate(), model.make_feeds()
    t0 = time.perf_counter()
    artifact = cc.compile(path, input_shapes=model.input_shapes or None,
                          weight_dtype=weight_dtype, sample_inputs=feeds)
    compile_s = time.perf_counter() - t0
    reference = ort_outputs(path, feeds)
    with tempfile.TemporaryDirectory(prefix="tf-bench-") as tmp:
        ours = {t: load(artifact.save(Path(tmp) / f"threads{t}"), threads=t) for t in threads}
        calls = {t: m.bind_feeds(feeds) for t, m in ours.items()}
        runners = {}
        for t in threads:
            runners[("ours", t)] = calls[t]
            runners.update({(name, t): fn for name, fn in baseline_runners(path, t, feeds).items()})
        samples = interleave(runners, warmup=2, min_runs=5, max_seconds=seconds,
                             block_ms=BLOCK_MS, settle=True,
                             settle_ms=SETTLE_MS)
        medians = {key: float(np.median(v)) for key, v in samples.items()}
        rows = [_row(model, t, medians, compile_s) for t in threads]
        if weight_dtype != "float32":  # the name says which weights were timed
            rows = [{**row, "model": f"{model.name}[{weight_dtype}]"} for row in rows]
        for row, t in zip(rows, threads):
            row.update(numerical_check(ours[t].outputs_of(calls[t]), reference))
            if kernels:
                row["kernels"] = kernel_rows(ours[t], feeds)
    return rows


def _row(model: BenchModel, t: int, medians: dict, compile_s: float) -> dict:
    ours, ort, ov = medians[("ours", t)], medians[("ort", t)], medians.get(("openvino", t))
    best = min(ort, ov) if ov else ort
    one = medians.get(("ours", 1))
    return {"model": model.name, "group": model.group, "threads": t, "ours_ms": ours,
            "ort_ms": ort, "openvino_ms": ov, "speedup_ort": ort / ours,
            "speedup_openvino": ov / ours if ov else None, "speedup_best": best / ours,
            "scaling": one / ours if one and t != 1 else None, "compile_s": compile_s}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filter", default="",
                    help="only models whose name contains one of these comma-separated words")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="timing budget per model, all runners together")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--kernels", action="store_true", help="add each model's top kernels")
    ap.add_argument("--top", type=int, default=8, help="kernels listed per model")
    ap.add_argument("--weight-dtype", default="float32", choices=WEIGHT_DTYPES,
                    help="compile with weights stored at this precision")
    args = ap.parse_args(argv)
    try:
        args.threads = sorted({int(t) for t in args.threads.split(",")})
    except ValueError:
        ap.error(f"--threads takes comma-separated integers such as 1,2, got {args.threads!r}")
    if min(args.threads) < 1:
        ap.error("--threads must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = describe()
    peak = sgemm_peak_gflops()
    print(header_line(machine))
    print(f"peak: numpy sgemm 2048^3 on one thread, {peak:.1f} GFLOP/s")
    print(table.header(), flush=True)
    rows = []
    for model in bench_models(args.filter):
        try:
            new = measure(model, args.threads, args.seconds, args.kernels, args.weight_dtype)
        except Exception as exc:  # noqa: BLE001  one failure must not hide the rest
            print(f"{model.name:24s} FAILED: {str(exc).splitlines()[0][:100]}", flush=True)
            continue
        rows += new
        for row in new:
            print(table.format_row(row), flush=True)
            if args.kernels:
                print(format_kernels(row["kernels"], peak * row["threads"], args.top))
    means = table.group_means(rows, GROUPS, args.threads)
    for mean in means:
        print(table.format_mean(mean))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "sgemm_peak_gflops": peak,
                                               "rows": rows, "geomeans": means}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
