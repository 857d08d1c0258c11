"""python -m compiler_core inspect|compile|run|bench  (see docs/architecture.md)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from .codegen.link import LinkError
from .errors import CompileError, RuntimeInputError
from .passes.weight_precision import WEIGHT_DTYPES
from .runtime.emulation import EmulationError


class UsageError(Exception):
    pass


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """'x=1x3x224x224' -> ('x', (1, 3, 224, 224))."""
    m = re.fullmatch(r"(.+)=(\d+(?:[x,]\d+)*)", text)
    if not m:
        raise UsageError(f"--input {text!r}: expected NAME=DIMS such as data=1x3x224x224")
    return m.group(1), tuple(int(d) for d in re.split("[x,]", m.group(2)))


def cmd_inspect(args) -> int:
    from .inspect_model import inspect_model
    info = inspect_model(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"opset {info['opset']}, {info['nodes']} nodes, {info['parameters']:,} parameters")
    for kind in ("inputs", "outputs"):
        for io in info[kind]:
            print(f"{kind[:-1]:7s} {io['name']}: {io['dtype']} {io['shape']}")
    print("ops:", ", ".join(f"{op} x{n}" for op, n in info["ops"].items()))
    for w in info["sparse_weights"]:
        print(f"block-sparse at batch 1: {w['node']} {w['weight']} {w['shape'][0]}x"
              f"{w['shape'][1]}, {w['block']} blocks, density {w['density']:.0%}, "
              f"estimated {w['estimated_speedup']:.1f}x")
    if info["unsupported_ops"]:
        print("UNSUPPORTED:", ", ".join(f"{op} x{n}" for op, n in info["unsupported_ops"].items()))
    return 0


def cmd_compile(args) -> int:
    from .driver import compile
    shapes = dict(parse_input_shape(t) for t in args.input or [])
    tuning = None
    if args.tune_trials or args.tune_seconds or args.records:
        tuning = {"trials": args.tune_trials, "seconds": args.tune_seconds, "records": args.records}
    sample_inputs = None
    if args.sample_inputs:
        from .runtime.feeds import load_feeds
        sample_inputs = load_feeds(args.sample_inputs)
    art = compile(args.model, input_shapes=shapes, target=args.target, opt_level=args.opt_level,
                  tuning=tuning, weight_dtype=args.weight_dtype, sample_inputs=sample_inputs,
                  on_tune=TuningBar() if sys.stderr.isatty() else None)
    art.save(args.output)
    stats = art.meta["stats"]
    if tuning:
        print(tuning_line(art.meta["tuning"]))
    print(f"compiled {len(art.meta['kernels'])} kernels in {stats['compile_seconds']:.2f}s -> "
          f"{args.output} (arena {stats['arena_bytes'] / 2**20:.1f} MiB, "
          f"weights {stats['weights_bytes'] / 2**20:.1f} MiB)")
    if "weight_precision" in art.meta:
        print_precision(art.meta["weight_precision"])
    return 0


class TuningBar:
    """One self-rewriting line on stderr: budget used, kernels done, estimated gain."""

    def __call__(self, e: dict) -> None:
        if e["trials_budget"]:
            used = e["trials"] / e["trials_budget"]
        else:
            used = e["seconds"] / e["seconds_budget"]
        bar = "#" * round(30 * min(used, 1.0))
        gain = e["default_ms"] / e["estimate_ms"] if e["estimate_ms"] else 1.0
        print(f"\rtuning [{bar:30s}] {e['trials']} trials {e['seconds']:.0f}s  kernels "
              f"{e['kernels_done']}/{e['kernels_total']}  {gain:.2f}x on timed kernels  ",
              end="", file=sys.stderr, flush=True)


def tuning_line(t: dict) -> str:
    line = (f"tuning: {t['trials']} trials ({t['failures']} failed) in {t['seconds']:.1f}s, "
            f"{t['tuned_kernels']} kernels tuned, {t['reused']} from records, "
            f"of {t['tunable_kernels']} tunable")
    return line + (f"\nnote: {t['note']}" if t.get("note") else "")


def cmd_records(args) -> int:
    from .tune.records_cli import run_records_command
    print(run_records_command(args.action, args.files, args.output, args.target))
    return 0


def print_precision(report: dict) -> None:
    acc = report["accuracy"]
    print(f"{report['weight_dtype']} weights in {len(report['layers'])} layers; error against "
          f"float32 on {acc['inputs']} inputs (measured on {acc['measured_on']}):")
    for name, e in acc["outputs"].items():
        print(f"  {name}: max_abs_err {e['max_abs_err']:.3g}  max_rel_err {e['max_rel_err']:.3g}")


def cmd_run(args) -> int:
    from .runtime.feeds import load_feeds
    from .runtime.loaded_model import load
    model = load(args.artifact)
    outputs = model.run(load_feeds(args.inputs))
    np.savez(args.out, **outputs)
    how = f" (run under {model.arch} emulation)" if model.emulated else ""
    print(f"wrote {', '.join(outputs)} to {args.out}{how}")
    return 0


def cmd_bench(args) -> int:
    from .runtime.benchmark import compare
    from .runtime.feeds import load_feeds
    feeds = load_feeds(args.inputs) if args.inputs else None
    result = compare(args.artifact, args.model, feeds, threads=args.threads, warmup=args.warmup,
                     min_runs=args.runs, max_seconds=args.seconds)
    if args.layers and not result.get("emulated"):
        result["layer_report"] = layers_of(args.artifact, result, args.remeasure)
    if args.json:
        for side in ("compiled", "onnxruntime"):
            (result[side] or {}).pop("samples_ms", None)
        print(json.dumps(result))
        return 0
    if result.get("emulated"):
        return print_emulated(result)
    if args.layers:
        from .analysis.layer_report import format_layers
        print(format_layers(result["layer_report"], args.top))
    for side in ("compiled", "onnxruntime"):
        s = result[side]
        print(f"{side:12s} median {s['median_ms']:9.3f} ms  p90 {s['p90_ms']:9.3f} ms  "
              f"({s['runs']} runs)")
    print(f"speedup {result['speedup']:.2f}x  max_abs_err {result['max_abs_err']:.3g}  "
          f"allclose {result['allclose']}")
    return 0


def layers_of(artifact: str, result: dict, remeasure: bool = False) -> dict:
    """The per-ONNX-node report of a `compare` result (the machine's limits are measured on
    first use and cached in the cache directory)."""
    from .analysis.layer_report import layer_report
    from .analysis.machine_limits import machine_limits
    from .runtime.artifact_dir import read_meta
    from .runtime.emulation import cache_dir
    limits = machine_limits(cache_dir(), remeasure)
    return layer_report(read_meta(Path(artifact)), result["kernels"], limits, result["threads"])


def print_emulated(result: dict) -> int:
    print(f"NOTE: {result['arch']} artifact {result['note']}.")
    print(f"emulated wall time median {result['compiled']['median_ms']:.1f} ms (meaningless)")
    print(f"max_abs_err {result['max_abs_err']:.3g}  allclose {result['allclose']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m compiler_core", description="Tensorforge compiler")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="show a model's inputs, outputs and ops")
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_inspect)
    p = sub.add_parser("compile", help="compile a model into an artifact directory")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--input", action="append", metavar="NAME=1x3x224x224")
    p.add_argument("--target", default="native")
    p.add_argument("--opt-level", type=int, default=3, choices=[0, 1, 2, 3])
    p.add_argument("--tune-trials", type=int)
    p.add_argument("--tune-seconds", type=float)
    p.add_argument("--records", help="tuning records (JSON lines): applied, and new "
                   "measurements appended")
    p.add_argument("--weight-dtype", default="float32", choices=WEIGHT_DTYPES,
                   help="store dense and recurrent weights at this precision (default float32)")
    p.add_argument("--sample-inputs", metavar="FEEDS.npz",
                   help="inputs on which a reduced --weight-dtype's error is measured "
                        "(default: random)")
    p.set_defaults(fn=cmd_compile)
    p = sub.add_parser("records", help="export, import or merge tuning records files")
    p.add_argument("action", choices=["export", "import", "merge"])
    p.add_argument("files", nargs="+", help="export: STORE; import: STORE FILE...; "
                   "merge: FILE...")
    p.add_argument("-o", "--output", help="export/merge: the file to write")
    p.add_argument("--target", help="export: only records of targets starting with this")
    p.set_defaults(fn=cmd_records)
    p = sub.add_parser("run", help="run an artifact on inputs from an .npz file")
    p.add_argument("artifact")
    p.add_argument("--inputs", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("bench", help="time an artifact against ONNX Runtime")
    p.add_argument("artifact")
    p.add_argument("--model", required=True)
    p.add_argument("--inputs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--runs", type=int, default=10, help="minimum timed runs")
    p.add_argument("--seconds", type=float, default=5.0, help="keep timing up to this long")
    p.add_argument("--json", action="store_true")
    p.add_argument("--layers", action="store_true",
                   help="time per ONNX node against the machine's limits, with what-ifs")
    p.add_argument("--top", type=int, default=20, help="ONNX nodes listed with --layers")
    p.add_argument("--remeasure", action="store_true",
                   help="with --layers: measure the machine's peak and bandwidths again")
    p.set_defaults(fn=cmd_bench)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (CompileError, RuntimeInputError, UsageError, LinkError, EmulationError,
            FileNotFoundError, ValueError, KeyError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
