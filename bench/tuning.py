"""`make bench-tuning`: tuned against untuned, measured in one run, with ONNX Runtime beside.

    python -m bench.tuning [--filter NAME[,NAME]] [--tune-seconds 240] [--threads 1]
                           [--seconds 6] [--records FILE [--reuse]] [--curve] [--json FILE]
                           [--target x86-64-v3]

Each model is compiled untuned, then tuned with the budget (sharing one records file, so a
workload tuned for one model is reused by the next: the `reused` column), and the two
artifacts and ONNX Runtime are timed interleaved, as in bench/models.py. `layouts` counts
the regions the layout search (tune/layouts.py) gave another layout than the rule's, of
those it could choose for. The tuned outputs must equal the untuned ones within float32
rounding, since a schedule changes the order of sums: `same` is the check the tuner makes
of every candidate against the default schedule (tune/measure_child.mismatch: within 1e-4
of each output's largest magnitude). An elementwise allclose at 1e-4 failed YOLOv8n-320's
untuned outputs against ONNX Runtime's too, on box coordinates near 0 beside others near
900. `--curve` prints the tuner's model-time estimate against trials (meta.json's
tuning.curve). `compile s` is the tuned compile's wall time, `tuner s` the tuner's share of
it (the budget bounds that share; import, passes and the final build come on top).

`--reuse` compiles from the records alone, with no budget: what a second compile of a tuned
model costs and gives (0 trials, `reused` kernels, its compile time, and as fast as the
tuned build). With a budget, the records' choices are reused too, but the budget then goes
on the workloads they left at their defaults.
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
from compiler_core.runtime.benchmark import SETTLE_MS, interleave
from compiler_core.runtime.loaded_model import load
from compiler_core.tune.measure_child import mismatch

from .baselines import ort_runner
from .machine import describe, header_line
from .suite import bench_models

BLOCK_MS = 25.0
COLUMNS = ("model", "trials", "reused", "tuned", "layouts", "untuned ms", "tuned ms", "ORT ms",
           "tuned/untuned", "ORT/tuned", "same", "compile s", "tuner s")


def measure(model, tune_seconds: float, threads: int, seconds: float, records: Path,
            target: str = "native", reuse: bool = False) -> dict:
    path, feeds = model.locate(), model.make_feeds()
    shapes = model.input_shapes or None
    untuned = cc.compile(path, input_shapes=shapes, target=target)
    budget = {} if reuse else {"seconds": tune_seconds}
    t0 = time.perf_counter()
    tuned = cc.compile(path, input_shapes=shapes, target=target, tuning={
        **budget, "records": str(records), "threads": threads})
    tune_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="tf-bench-tuning-") as tmp:
        runs = {name: load(art.save(Path(tmp) / name), threads=threads)
                for name, art in (("untuned", untuned), ("tuned", tuned))}
        calls = {name: m.bind_feeds(feeds) for name, m in runs.items()}
        runners = {**calls, "ort": ort_runner(path, threads, feeds)}
        samples = interleave(runners, warmup=2, min_runs=5, max_seconds=seconds,
                             block_ms=BLOCK_MS, settle=True, settle_ms=SETTLE_MS)
        ms = {name: float(np.median(v)) for name, v in samples.items()}
        same = mismatch(list(runs["tuned"].outputs_of(calls["tuned"]).values()),
                        list(runs["untuned"].outputs_of(calls["untuned"]).values())) is None
    summary = tuned.meta["tuning"]
    return {"model": model.name, "threads": threads, "trials": summary["trials"],
            "reused": summary["reused"], "tuned_kernels": summary["tuned_kernels"],
            "untuned_ms": ms["untuned"], "tuned_ms": ms["tuned"], "ort_ms": ms["ort"],
            "speedup_tuning": ms["untuned"] / ms["tuned"], "speedup_ort": ms["ort"] / ms["tuned"],
            "same_outputs": same, "tune_s": tune_s, "tuner_s": summary["seconds"],
            "curve": summary["curve"],
            "model_check": summary["model_check"], "layouts": summary["layouts"]}


def format_row(r: dict) -> str:
    layouts = f"{r['layouts']['changed']}/{r['layouts']['regions']}"
    return (f"{r['model']:16s} {r['trials']:6d} {r['reused']:6d} {r['tuned_kernels']:5d} "
            f"{layouts:>7s} "
            f"{r['untuned_ms']:10.3f} {r['tuned_ms']:8.3f} {r['ort_ms']:8.3f} "
            f"{r['speedup_tuning']:13.3f} {r['speedup_ort']:9.2f} {str(r['same_outputs']):>5s} "
            f"{r['tune_s']:9.0f} {r['tuner_s']:7.0f}")


def format_curve(curve: list[dict], points: int = 12) -> str:
    """Model-time estimate (the timed kernels: tuned so far / default) at ~`points` trials."""
    if not curve:
        return "    (no curve: nothing was measured)"
    step = max(1, len(curve) // points)
    picked = curve[::step] + ([curve[-1]] if (len(curve) - 1) % step else [])
    return "\n".join(f"    trials {p['trials']:5d}  estimate {p['estimate_ms']:9.3f} ms of "
                     f"default {p['default_ms']:9.3f} ms" for p in picked)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filter", default="squeezenet,mobilenet_v3",
                    help="models whose name contains one of these comma-separated words")
    ap.add_argument("--tune-seconds", type=float, default=240.0, help="tuning budget per model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", default="native",
                    help="code for another CPU this one can run, e.g. x86-64-v3 (AVX2)")
    ap.add_argument("--seconds", type=float, default=6.0, help="timing budget per model")
    ap.add_argument("--records", help="tuning records to start from and add to "
                                      "(default: a new file for this run)")
    ap.add_argument("--reuse", action="store_true",
                    help="compile from --records alone, measuring nothing")
    ap.add_argument("--curve", action="store_true", help="print each model's tuning curve")
    ap.add_argument("--json", help="also write every figure to this file")
    args = ap.parse_args(argv)
    if args.reuse and not args.records:
        ap.error("--reuse needs the --records to compile from")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    print(header_line(describe()) + ("" if args.target == "native" else
                                     f"; code for {args.target}"))
    print(" ".join(COLUMNS), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tf-records-") as tmp:
        records = Path(args.records) if args.records else Path(tmp) / "records.jsonl"
        for model in bench_models(args.filter):
            row = measure(model, args.tune_seconds, args.threads, args.seconds, records,
                          args.target, args.reuse)
            rows.append(row)
            print(format_row(row), flush=True)
            if args.curve:
                print(format_curve(row["curve"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
