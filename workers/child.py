"""Entry point of the sandboxed child: `python -m workers.child KIND ARGS.json RESULT.json MB`.

It imports compiler_core only (no Django), limits its own address space, prints stage events
as JSON lines on stdout and writes {"result": ...} or {"error": ..., "kind": ...}.
"""
from __future__ import annotations

import json
import resource
import sys
import traceback
from pathlib import Path


def emit(stage: str, **extra) -> None:
    print(json.dumps({"stage": stage, **extra}), flush=True)


def limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core dumps from crashing models


def do_compile(args: dict) -> dict:
    import compiler_core as cc

    shapes = {k: tuple(v) for k, v in args["input_shapes"].items()}
    artifact = cc.compile(args["model_path"], input_shapes=shapes, target=args["target"],
                          opt_level=args["opt_level"], tuning=args["tuning"], progress=emit)
    out = artifact.save(args["out_dir"])
    cc.load(out, threads=args.get("threads", 1))  # the library loads and links
    return {"meta": artifact.meta}


def do_bench(args: dict) -> dict:
    from compiler_core.runtime.benchmark import compare

    emit("benchmark")
    return compare(args["artifact_dir"], args["model_path"], threads=args["threads"],
                   warmup=args.get("warmup", 3), min_runs=args.get("min_runs", 10),
                   max_seconds=args.get("max_seconds", 10.0))


ENTRIES = {"compile": do_compile, "bench": do_bench}


def error_payload(exc: BaseException, megabytes: int) -> dict:
    from compiler_core.errors import CompileError
    if isinstance(exc, MemoryError):
        return {"error": f"ran out of memory (the limit is {megabytes} MiB; raise "
                         "TENSORFORGE_SANDBOX_MEMORY_MB or compile a smaller model)",
                "kind": "memory"}
    if isinstance(exc, CompileError):
        return {"error": str(exc), "kind": "compile"}
    if isinstance(exc, ValueError):  # onnxruntime baseline and input errors are ValueErrors
        return {"error": str(exc), "kind": "value"}
    return {"error": f"{type(exc).__name__}: {exc}", "kind": "internal"}


def main(argv: list[str], entries=ENTRIES) -> int:
    kind, args_path, result_path, megabytes = argv[1], argv[2], argv[3], int(argv[4])
    limit_memory(megabytes)
    args = json.loads(Path(args_path).read_text())
    try:
        payload = {"result": entries[kind](args)}
        code = 0
    except BaseException as exc:  # noqa: BLE001  everything is reported to the parent
        traceback.print_exc()
        payload = error_payload(exc, megabytes)
        code = 1
    Path(result_path).write_text(json.dumps(payload, default=float))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
