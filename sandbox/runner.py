"""Start a confined child, watch it, and read back what it reports.

The child (sandbox/child.py by default) prints stage events as JSON lines on stdout and writes
its result or error to a JSON file in the work directory; stderr goes to a log file whose tail
ends up in the job log. The parent enforces what the child cannot be trusted to: the wall-time
limit, the size of the work directory, the length and number of event lines and the size of the
result file. Any breach kills the child's whole process group.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import namespaces
from .limits import Limits

REPO_ROOT = Path(__file__).resolve().parent.parent
# Variables the child may see besides the ones the caller passes: nothing that holds a secret.
PASSED_THROUGH = ("TENSORFORGE_MAX_MODEL_BYTES", "TENSORFORGE_MAX_TENSOR_BYTES",
                  "TENSORFORGE_MAX_ARENA_BYTES", "CC", "LANG", "TZ")
# A root worker's children each run as a user of their own, drawn from ids no account has:
# RLIMIT_NPROC counts all processes of a user, so children sharing `nobody` would share it,
# and one fork bomb at its limit would leave every other job's child unable to start a
# thread. Two children drawing the same id (1 in 65536) only share that count again.
CHILD_UIDS = range(2**30, 2**30 + 2**16)


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
    kind: str                       # "compile", "bench", "inspect" or "measure"
    args: dict
    workdir: Path
    timeout: float
    limits: Limits = field(default_factory=Limits)
    module: str = "sandbox.child"
    env: dict = field(default_factory=dict)
    pass_fds: tuple = ()            # open files the child gets (the measurement lock)


def child_env(spec: ChildSpec) -> dict:
    """An allow-list, never the parent's environment (which holds database and S3 secrets)."""
    inherited = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
    return {**inherited, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "HOME": str(spec.workdir), "TMPDIR": str(spec.workdir / "tmp"),
            "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", **spec.env}


def _packages(module: str) -> list[Path]:
    """The repository's packages the child imports: its own and the compiler."""
    return [REPO_ROOT / "sandbox", REPO_ROOT / "compiler_core", REPO_ROOT / module.split(".")[0]]


def child_command(spec: ChildSpec, result_path: Path, args_path: Path) -> list[str]:
    inner = [sys.executable, "-m", spec.module, spec.kind, str(args_path), str(result_path),
             spec.limits.to_json()]
    if namespaces.availability()[0]:
        return namespaces.command(inner, spec.workdir, _packages(spec.module))
    return inner


def _parent_env() -> dict:
    return {} if namespaces.availability()[0] else {"TF_SANDBOX_PARENT": str(os.getpid())}


def child_uid() -> int | None:
    """The user a root worker's next child becomes (sandbox/confine.drop_root)."""
    return CHILD_UIDS[secrets.randbelow(len(CHILD_UIDS))] if os.geteuid() == 0 else None


def _hand_over(workdir: Path, uid: int | None) -> dict:
    """Give the child its work directory; the variables that tell it who it is."""
    if uid is None:
        return {}
    for path in [workdir, *workdir.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)
    return {"TF_SANDBOX_UID": str(uid)}


def _start(spec: ChildSpec, result_path: Path, log_path: Path, lifeline: int) -> subprocess.Popen:
    args_path = spec.workdir / f"{spec.kind}-args.json"
    args_path.write_text(json.dumps(spec.args))
    (spec.workdir / "tmp").mkdir(exist_ok=True)
    identity = _hand_over(spec.workdir, child_uid())
    cmd = child_command(spec, result_path, args_path)
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, cwd=spec.workdir,
                                env={**child_env(spec), **_parent_env(), **identity,
                                     "TF_SANDBOX_LIFELINE": str(lifeline)},
                                start_new_session=True,
                                stdin=subprocess.DEVNULL, close_fds=True,
                                pass_fds=(*spec.pass_fds, lifeline))


def _read_events(stream, out: queue.Queue, limits: Limits) -> None:
    """Lines up to limits.event_bytes, at most limits.events of them; then a flood marker."""
    count = 0
    while True:
        line = stream.readline(limits.event_bytes)
        if not line:
            break
        count += 1
        if count > limits.events or (len(line) == limits.event_bytes and not line.endswith(b"\n")):
            out.put(FLOOD)
            break
        out.put(line)
    out.put(None)


FLOOD = b"\0flood"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child may have started its own children
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(path.stat().st_size - limit, 0))
            data = f.read(limit)
    except OSError:
        return ""
    return data.decode(errors="replace")


def directory_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _killed_by(rc: int) -> int:
    """The signal that ended the child, or 0; bwrap reports one as exit status 128 + signal."""
    if rc < 0:
        return -rc
    return rc - 128 if 128 < rc < 128 + 65 else 0


def _crash_message(what: str, rc: int, limits: Limits) -> str:
    if _killed_by(rc):
        rc = -_killed_by(rc)
        name = signal.Signals(-rc).name
        hint = {"SIGSEGV": "a segmentation fault in generated or native code",
                "SIGKILL": "killed, usually by the kernel's out-of-memory killer",
                "SIGXCPU": f"over its CPU-time limit of {limits.cpu_seconds} s",
                "SIGABRT": "an abort in native code", "SIGBUS": "a bus error in native code",
                "SIGILL": "an illegal instruction: the code was built for a CPU feature this "
                          "machine lacks"}.get(name, "a fatal signal")
        return f"the {what} process crashed with {name} ({hint})"
    return (f"the {what} process exited with status {rc} without a result "
            f"(memory limit {limits.memory_mb} MiB)")


class _Watch:
    """The parent's side of the limits: wall time, work directory size, event flood."""

    def __init__(self, spec: ChildSpec, proc: subprocess.Popen, log_path: Path):
        self.spec, self.proc, self.log_path = spec, proc, log_path
        self.deadline = time.monotonic() + spec.timeout

    def stop(self, message: str, kind: str) -> SandboxError:
        _kill(self.proc)
        return SandboxError(message, kind, _tail(self.log_path))

    def check(self, flooded: bool) -> None:
        spec = self.spec
        if time.monotonic() > self.deadline:
            raise self.stop(f"the {spec.kind} step took longer than its wall-time limit of "
                            f"{spec.timeout:g} s and was stopped", "timeout")
        if flooded:
            raise self.stop(f"the {spec.kind} process flooded its output (over "
                            f"{spec.limits.events} lines or a line over "
                            f"{spec.limits.event_bytes} bytes) and was stopped", "output")
        if directory_bytes(spec.workdir) > spec.limits.workdir_mb * 2**20:
            raise self.stop(f"the {spec.kind} process wrote more than "
                            f"{spec.limits.workdir_mb} MiB to its work directory and was "
                            "stopped", "disk")


def run_child(spec: ChildSpec, on_event: Callable[[dict], None] = lambda e: None,
              should_abort: Callable[[], bool] = lambda: False, poll: float = 0.2) -> dict:
    """Run the child to completion and return its result dict, or raise SandboxError/Aborted."""
    spec.workdir.mkdir(parents=True, exist_ok=True)
    result_path = spec.workdir / f"{spec.kind}-result.json"
    log_path = spec.workdir / f"{spec.kind}.log"
    result_path.unlink(missing_ok=True)
    # the child holds the read end: it sees end-of-file when this process is gone, however
    # and whenever it died (sandbox/confine.die_with_parent)
    lifeline, keep = os.pipe()
    try:
        proc = _start(spec, result_path, log_path, lifeline)
    except BaseException:
        os.close(keep)
        raise
    finally:
        os.close(lifeline)
    events: queue.Queue = queue.Queue()
    threading.Thread(target=_read_events, args=(proc.stdout, events, spec.limits),
                     daemon=True).start()
    watch = _Watch(spec, proc, log_path)
    try:
        while proc.poll() is None:
            watch.check(_drain(events, on_event))
            if should_abort():
                _kill(proc)
                raise Aborted(f"{spec.kind} aborted")
            time.sleep(poll)
    finally:
        if proc.poll() is None:
            _kill(proc)
        os.close(keep)
    time.sleep(0.05)
    _drain(events, on_event)
    return _outcome(spec, proc.returncode, result_path, log_path)


def _drain(events: queue.Queue, on_event) -> bool:
    """Hand queued events over; True when the child flooded its output."""
    while True:
        try:
            line = events.get_nowait()
        except queue.Empty:
            return False
        if line == FLOOD:
            return True
        if not line:
            continue
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # stray prints from libraries
        if isinstance(event, dict):
            on_event(event)


def _read_result(spec: ChildSpec, result_path: Path):
    try:
        if result_path.is_symlink() or result_path.stat().st_size > spec.limits.result_mb * 2**20:
            raise SandboxError(f"the {spec.kind} process left a result that is not a plain "
                               f"file under {spec.limits.result_mb} MiB", "output")
        return json.loads(result_path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def _outcome(spec: ChildSpec, rc: int, result_path: Path, log_path: Path) -> dict:
    tail = _tail(log_path)
    payload = _read_result(spec, result_path)
    if not isinstance(payload, dict) or not ("result" in payload or "error" in payload):
        raise SandboxError(_crash_message(spec.kind, rc, spec.limits), "crash", tail)
    if "error" in payload:
        raise SandboxError(str(payload["error"]), str(payload.get("kind", "error")), tail)
    return payload["result"]
