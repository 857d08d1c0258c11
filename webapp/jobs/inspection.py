"""Uploads are inspected in the sandbox, never in the web process.

An upload is either a bare .onnx file or a .zip/.tar of the model folder (for models whose
weights live in external data files). Parsing the protobuf, unpacking the archive and reading
the external data all happen in a sandboxed child (sandbox/child.py, kind "inspect") under a
memory and a time limit; the web process only spools the bytes and reads back a small JSON
description, plus, for an archive, the model with its external data inlined.
"""
from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from sandbox.limits import Limits
from sandbox.runner import ChildSpec, SandboxError, run_child

from .errors import RequestError, TooLarge


@dataclass
class Inspected:
    info: dict          # compiler_core.inspect_model's description
    model_path: Path    # the self-contained .onnx file to store


def inspect_limits() -> Limits:
    mb = settings.UPLOAD_INSPECT_MEMORY_MB
    return Limits(memory_mb=mb, cpu_seconds=settings.UPLOAD_INSPECT_TIMEOUT + 5,
                  file_mb=max(settings.MAX_MODEL_BYTES // 2**20 * 2, 16),
                  workdir_mb=max(settings.MAX_MODEL_BYTES // 2**20 * 5, 64), processes=64,
                  nice=10)  # the web server shares the machine: its requests come first


def workdir() -> Path:
    path = Path(settings.WORK_DIR) / "uploads" / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


def refusal(exc: SandboxError, filename: str) -> RequestError:
    if exc.kind in ("compile", "value"):
        return RequestError(f"{filename} is not a usable ONNX model: {exc}")
    if exc.kind in ("timeout", "memory", "disk", "output") or "crashed" in str(exc):
        return TooLarge(f"{filename} could not be inspected within the limits "
                        f"({settings.UPLOAD_INSPECT_MEMORY_MB} MiB, "
                        f"{settings.UPLOAD_INSPECT_TIMEOUT} s): {exc}")
    return RequestError(f"{filename} could not be inspected: {exc}")


def inspect_upload(upload_path: Path, work: Path, filename: str) -> Inspected:
    """Inspect the spooled upload in `work` (a fresh directory the child may write)."""
    args = {"upload_path": str(upload_path), "unpack_dir": str(work / "unpacked"),
            "normalized_path": str(work / "normalized.onnx"),
            "max_bytes": settings.MAX_MODEL_BYTES}
    spec = ChildSpec("inspect", args, work, settings.UPLOAD_INSPECT_TIMEOUT, inspect_limits(),
                     env={"TENSORFORGE_MAX_MODEL_BYTES": str(settings.MAX_MODEL_BYTES)})
    try:
        result = run_child(spec)
    except SandboxError as exc:
        raise refusal(exc, filename) from None
    shutil.rmtree(work / "unpacked", ignore_errors=True)
    path = work / "normalized.onnx" if result["normalized"] else upload_path
    return Inspected(result["info"], path)
