"""Run compiler work in a child process with wall-time and memory limits.

Generated code can crash or hang; a child process keeps that from taking the worker down.
The child (workers/child.py by default) reports stage events as JSON lines on stdout and
writes its result or error to a JSON file; stderr goes to a log file whose tail ends up in
the job log.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent


class SandboxError(RuntimeError):
    """The child failed: crashed, timed out, ran out of memory or raised."""

    def __init__(self, message: str, kind: str = "error", log_tail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.log_tail = log_tail


class Aborted(RuntimeError):
    """should_abort() said stop (the job was cancelled); the child was killed."""


@dataclass
class ChildSpec:
    kind: str                       # "compile" or "bench"
    args: dict
    workdir: Path
    timeout: float
    memory_mb: int
    module: str = "workers.child"
    env: dict = field(default_factory=dict)


def _read_events(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child may have started its own children
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode(errors="replace")


def _start(spec: ChildSpec, result_path: Path, log_path: Path) -> subprocess.Popen:
    args_path = spec.workdir / f"{spec.kind}-args.json"
    args_path.write_text(json.dumps(spec.args))
    env = {**os.environ, **spec.env, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", spec.module, spec.kind, str(args_path), str(result_path),
           str(spec.memory_mb)]
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, cwd=REPO_ROOT,
                                env=env, start_new_session=True, text=True)


def _crash_message(what: str, rc: int, memory_mb: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = {"SIGSEGV": "a segmentation fault in generated or native code",
                "SIGKILL": "killed, usually by the kernel's out-of-memory killer",
                "SIGABRT": "an abort in native code", "SIGBUS": "a bus error in native code",
                "SIGILL": "an illegal instruction: the code was built for a CPU feature this "
                          "machine lacks"}.get(name, "a fatal signal")
        return f"the {what} process crashed with {name} ({hint})"
    return (f"the {what} process exited with status {rc} without a result "
            f"(memory limit {memory_mb} MiB)")


def run_child(spec: ChildSpec, on_event: Callable[[dict], None] = lambda e: None,
              should_abort: Callable[[], bool] = lambda: False, poll: float = 0.2) -> dict:
    """Run the child to completion and return its result dict, or raise SandboxError/Aborted."""
    spec.workdir.mkdir(parents=True, exist_ok=True)
    result_path = spec.workdir / f"{spec.kind}-result.json"
    log_path = spec.workdir / f"{spec.kind}.log"
    result_path.unlink(missing_ok=True)
    proc = _start(spec, result_path, log_path)
    events: queue.Queue = queue.Queue()
    threading.Thread(target=_read_events, args=(proc.stdout, events), daemon=True).start()
    deadline = time.monotonic() + spec.timeout
    try:
        while proc.poll() is None:
            _drain(events, on_event)
            if time.monotonic() > deadline:
                _kill(proc)
                raise SandboxError(f"the {spec.kind} step took longer than its wall-time limit "
                                   f"of {spec.timeout:g} s and was stopped", "timeout",
                                   _tail(log_path))
            if should_abort():
                _kill(proc)
                raise Aborted(f"{spec.kind} aborted")
            time.sleep(poll)
    finally:
        if proc.poll() is None:
            _kill(proc)
    time.sleep(0.05)
    _drain(events, on_event)
    return _outcome(spec, proc.returncode, result_path, log_path)


def _drain(events: queue.Queue, on_event) -> None:
    while True:
        try:
            line = events.get_nowait()
        except queue.Empty:
            return
        if not line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # stray prints from libraries
        if isinstance(event, dict):
            on_event(event)


def _outcome(spec: ChildSpec, rc: int, result_path: Path, log_path: Path) -> dict:
    tail = _tail(log_path)
    try:
        payload = json.loads(result_path.read_text())
    except (OSError, json.JSONDecodeError):
        payload = None
    if payload is None:
        raise SandboxError(_crash_message(spec.kind, rc, spec.memory_mb), "crash", tail)
    if "error" in payload:
        raise SandboxError(payload["error"], payload.get("kind", "error"), tail)
    return payload["result"]
