"""Entry point of the sandboxed child: `python -m sandbox.child KIND ARGS.json RESULT.json LIMITS`.

It confines itself first (sandbox/confine.py), then imports compiler_core only (no Django),
prints stage events as JSON lines on stdout and writes {"result": ...} or
{"error": ..., "kind": ...}. KIND is compile, bench, inspect or measure (a batch of another worker's tuning).
"""
from __future__ import annotations

import errno
import json
import os
import sys
import traceback
from pathlib import Path

from . import confine
from .limits import Limits
from .linker import LinkHelper


def emit(stage: str, **extra) -> None:
    print(json.dumps({"stage": stage, **extra}), flush=True)


def do_compile(args: dict, linker: LinkHelper | None = None) -> dict:
    import compiler_core as cc

    shapes = {k: tuple(v) for k, v in args["input_shapes"].items()}
    helper = measuring(args, linker) if linker is not None else {}
    artifact = cc.compile(args["model_path"], input_shapes=shapes, target=args["target"],
                          opt_level=args["opt_level"], tuning=args["tuning"], progress=emit,
                          weight_dtype=args.get("weight_dtype", "float32"),
                          on_tune=lambda event: emit("tune", tuning=event), **helper)
    out = artifact.save(args["out_dir"])
    cc.load(out, threads=args.get("threads", 1))  # the library loads and links
    return {"meta": artifact.meta}


def measuring(args: dict, linker: LinkHelper) -> dict:
    """cc.compile's link and measure callables: the helper's, and one remote slot per other
    worker of the target that the worker found online (`measure_slots` in all)."""
    from .measure_slots import LocalSlot, RemoteSlot
    local = LocalSlot(linker.measure, args.get("worker") or "local", args.get("measure_lock_fd"))
    remote = RemoteSlot(Path(args.get("measure_dir") or "measure"),
                        lambda n: print(json.dumps({"measure": n}), flush=True),
                        float(args.get("measure_seconds") or 600))
    slots = [remote] * max(0, int(args.get("measure_slots") or 1) - 1)
    return {"link": linker.link, "measure": local, "measure_slots": slots}


def do_measure(args: dict, linker: LinkHelper) -> dict:
    """Another worker's batch of candidates, timed here: the pickle is untrusted, so it is
    only ever loaded inside this sandbox; the answer is plain JSON."""
    import pickle

    from compiler_core.errors import CompileError
    from compiler_core.tune.builder import BuildTask

    from .measure_slots import as_json
    task = pickle.loads(Path(args["task_path"]).read_bytes())
    if not isinstance(task, BuildTask):
        raise CompileError(f"a measuring task holds a {type(task).__name__}, not a BuildTask")
    emit("measure", candidates=len(task.schedules))
    return {"measurements": as_json(linker.measure(task))}


def do_bench(args: dict) -> dict:
    from compiler_core.runtime.benchmark import compare

    emit("benchmark")
    return compare(args["artifact_dir"], args["model_path"], threads=args["threads"],
                   warmup=args.get("warmup", 3), min_runs=args.get("min_runs", 10),
                   max_seconds=args.get("max_seconds", 10.0))


BARE_WITH_EXTERNAL_DATA = (
    "the model keeps its weights in external data files ({names}), which a bare .onnx upload "
    "cannot carry: upload a .zip or .tar of the model folder (the .onnx file with its data "
    "files beside it)")


def do_inspect(args: dict) -> dict:
    """An upload, a bare .onnx file or an archive of the model folder -> what it holds. An
    archive's model is written to `normalized_path` with its external data inlined, so the
    rest of the service handles one self-contained file."""
    from compiler_core.errors import CompileError
    from compiler_core.frontend.model_file import (load_model, read_proto,
                                                   tensors_with_external_data)
    from compiler_core.inspect_model import inspect_model

    from .archive import ArchiveError, kind_of, unpack

    path = Path(args["upload_path"])
    if kind_of(path) == "onnx":
        external = tensors_with_external_data(read_proto(path)[0])
        if external:
            names = ", ".join(sorted({t.name for t in external})[:3])
            raise CompileError(BARE_WITH_EXTERNAL_DATA.format(names=names))
        return {"info": inspect_model(path), "normalized": False}
    try:
        model_path = unpack(path, Path(args["unpack_dir"]), args["max_bytes"])
    except ArchiveError as exc:
        raise CompileError(str(exc)) from None
    proto, _ = load_model(model_path)
    Path(args["normalized_path"]).write_bytes(proto.SerializeToString())
    return {"info": inspect_model(proto), "normalized": True,
            "member": str(model_path.relative_to(args["unpack_dir"]))}


ENTRIES = {"compile": do_compile, "bench": do_bench, "inspect": do_inspect,
           "measure": do_measure}
NEEDS_LINKER = {"compile", "measure"}


def error_payload(exc: BaseException, limits: Limits) -> dict:
    from compiler_core.errors import CompileError
    if isinstance(exc, MemoryError):
        return {"error": f"ran out of memory (the limit is {limits.memory_mb} MiB; raise "
                         "TENSORFORGE_SANDBOX_MEMORY_MB or compile a smaller model)",
                "kind": "memory"}
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return {"error": f"wrote a file over the limit of {limits.file_mb} MiB", "kind": "disk"}
    if isinstance(exc, CompileError):
        return {"error": str(exc), "kind": "compile"}
    if isinstance(exc, ValueError):  # onnxruntime baseline and input errors are ValueErrors
        return {"error": str(exc), "kind": "value"}
    return {"error": f"{type(exc).__name__}: {exc}", "kind": "internal"}


def confined(kind: str, limits: Limits) -> LinkHelper | None:
    """Limits, user and parent-death signal; the link helper (if needed); then seccomp."""
    confine.set_rlimits(limits)
    if limits.nice:
        os.nice(limits.nice)
    confine.drop_root()
    confine.die_with_parent()
    helper = LinkHelper.start() if kind in NEEDS_LINKER else None
    confine.install_seccomp(allow_exec=limits.allow_exec)
    return helper


def run_entry(fn, args: dict, helper: LinkHelper | None):
    return fn(args, helper) if helper is not None else fn(args)


def main(argv: list[str], entries=ENTRIES) -> int:
    kind, args_path, result_path, limits = argv[1], argv[2], argv[3], Limits.from_json(argv[4])
    helper = confined(kind, limits)
    args = json.loads(Path(args_path).read_text())
    try:
        payload = {"result": run_entry(entries[kind], args, helper)}
        code = 0
    except BaseException as exc:  # noqa: BLE001  everything is reported to the parent
        traceback.print_exc()
        payload = error_payload(exc, limits)
        code = 1
    Path(result_path).write_text(json.dumps(payload, default=float))
    if helper is not None:
        helper.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
