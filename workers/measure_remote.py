"""Tuning spread over the workers: batches of candidates measured by the other workers of
the job's target, and a measurement lock per set of cores.

The requesting side (Dispatcher, one per compile) reads the batch the compile child wrote
(`measure/N.task`, a pickle it never loads: untrusted bytes from a user's compile), sends it
base64-encoded as a MEASURE_BATCH task to the target's queue, and waits on a Redis list for
the measuring worker's replies: {"started": worker}, then the measurements (plain JSON) or
an error. What it gets, or an error when no worker started the batch within
MEASURE_START_SECONDS, the batch took longer than MEASURE_TIMEOUT, or the job ended, goes
to `measure/N.result.json`; the compile child then measures a failed batch itself.

The measuring side (`measure_batch`) checks that its CPU is the requester's, takes the
measurement lock of the cores it is pinned to, and times the batch in a sandboxed child of
kind "measure" (the only place the pickle is loaded). The compile child's own measurements
hold the same lock (an open file the worker passes in), so two workers pinned to the same
cores never time candidates at once, and two pinned to different cores may.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings

from compiler_core.codegen.target_machine import host_spec
from compiler_core.targets import get_target
from sandbox.runner import ChildSpec, SandboxError, run_child
from webapp.celery import MEASURE_BATCH, app
from webapp.jobs import fleet

log = logging.getLogger(__name__)

WAIT = 1.0   # seconds per Redis wait: how soon a cancelled job's requests stop


# ---------------------------------------------------------------- the lock

def lock_path() -> Path:
    cpus = "-".join(map(str, sorted(os.sched_getaffinity(0))))
    directory = Path(settings.MEASURE_LOCK_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"cpus-{cpus}.lock"


def open_lock() -> int:
    """A new open file description of this worker's lock: flock conflicts between two of
    them even in one process."""
    return os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


@contextlib.contextmanager
def measurement_lock(timeout: float):
    fd = open_lock()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError("the cores stayed busy measuring") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------- who measures

def same_hardware(target: str) -> list[str]:
    """The online workers that time this target's code as this one does: the same CPU, and
    for a named target, one they run natively."""
    cpu = host_spec().cpu
    return sorted(beat["worker"] for beat in fleet.online_workers()
                  if beat.get("cpu") == cpu
                  and (target == fleet.NATIVE or target in beat.get("targets", [])))


def queue_of(target: str) -> str:
    return settings.CELERY_QUEUE if target == fleet.NATIVE else fleet.queue_name(target)


class Dispatcher:
    """The remote batches of one compile child."""

    def __init__(self, job, workdir: Path, log_line):
        self.job, self.directory, self.log_line = job, workdir / "measure", log_line
        self.stopped = threading.Event()
        others = [w for w in same_hardware(job.target) if w != job.worker]
        self.slots = 1 + len(others) if get_target(job.target).runs_here else 1
        if self.slots > 1:
            log_line(f"tuning: batches measured here and by {', '.join(others)}")

    def child_args(self, lock_fd: int) -> dict:
        return {"measure_slots": self.slots, "measure_dir": str(self.directory),
                "measure_lock_fd": lock_fd, "worker": self.job.worker,
                # the child waits longer than this side does, so this side always answers
                "measure_seconds": settings.MEASURE_START_SECONDS + settings.MEASURE_TIMEOUT
                + 90}

    def handle(self, n) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return
        threading.Thread(target=self._request, args=(n,), daemon=True,
                         name=f"measure-{n}").start()

    def stop(self) -> None:
        self.stopped.set()

    def _request(self, n: int) -> None:
        try:
            reply = self._remote(self.directory / f"{n}.task")
        except Exception as exc:  # noqa: BLE001  every failure is measured locally instead
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        if "error" in reply:
            log.info("job %s: remote batch %s: %s", self.job.pk, n, reply["error"])
        try:
            _write_json(self.directory / f"{n}.result.json", reply)
        except OSError:  # the job ended and its work directory is gone
            pass

    def _remote(self, task_path: Path) -> dict:
        if task_path.is_symlink() or task_path.stat().st_size > settings.MEASURE_TASK_MB * 2**20:
            return {"error": "the batch is not a plain file within the size limit"}
        key = f"{settings.CELERY_QUEUE}:measure:{uuid.uuid4().hex}"
        data = task_path.read_bytes()
        task_path.unlink(missing_ok=True)  # the work directory's size is watched
        payload = {"task": base64.b64encode(data).decode(),
                   "reply": key, "cpu": host_spec().cpu, "target": self.job.target,
                   "threads": self.job.threads, "requester": self.job.worker}
        app.send_task(MEASURE_BATCH, args=[payload], queue=queue_of(self.job.target),
                      expires=settings.MEASURE_START_SECONDS)
        try:
            return self._await(key)
        finally:
            fleet.client().delete(key)

    def _await(self, key: str) -> dict:
        started, deadline = None, time.monotonic() + settings.MEASURE_START_SECONDS
        while not self.stopped.is_set():
            if time.monotonic() > deadline:
                return {"error": "no worker started the batch in time" if started is None
                        else f"{started} did not finish the batch in time"}
            got = fleet.client().blpop([key], timeout=WAIT)
            if got is None:
                continue
            message = json.loads(got[1])
            if "started" in message:
                started = str(message["started"])
                deadline = time.monotonic() + settings.MEASURE_TIMEOUT + 30
                continue
            return _reply(message)
        return {"error": "the job ended"}


def _reply(message: dict) -> dict:
    """Only the fields the child reads, in the types it expects."""
    if "error" in message:
        return {"error": str(message["error"])[:1000]}
    rows = message.get("measurements")
    if not isinstance(rows, list):
        return {"error": "the measuring worker's answer has no measurements"}
    return {"worker": str(message.get("worker")), "measurements": [
        {"seconds": r.get("seconds"), "error": r.get("error")} if isinstance(r, dict)
        else {"seconds": None, "error": "no measurement"} for r in rows]}


def _write_json(path: Path, data: dict) -> None:
    """Whole or not at all: the child polls for the file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# ---------------------------------------------------------------- the measuring side

def measure_batch(payload: dict, worker: str) -> None:
    client = fleet.client()
    key = payload["reply"]

    def say(message: dict) -> None:
        client.rpush(key, json.dumps(message))
        client.expire(key, settings.MEASURE_TIMEOUT + 120)
    if payload.get("cpu") != host_spec().cpu or not get_target(payload["target"]).runs_here:
        say({"error": f"{worker} runs other hardware ({host_spec().cpu})"})
        return
    say({"started": worker})
    try:
        with measurement_lock(settings.MEASURE_TIMEOUT / 2):
            result = _measure_in_sandbox(payload)
        say({"worker": worker, "measurements": result["measurements"]})
    except (SandboxError, TimeoutError, OSError, KeyError, ValueError) as exc:
        say({"error": f"{worker}: {exc}"})


def _measure_in_sandbox(payload: dict) -> dict:
    from .pipeline import sandbox_limits, thread_env
    workdir = Path(settings.WORK_DIR) / f"measure-{uuid.uuid4().hex}"
    workdir.mkdir(parents=True)
    try:
        task_path = workdir / "task.pickle"
        task_path.write_bytes(base64.b64decode(payload["task"], validate=True))
        threads = int(payload.get("threads") or 1)
        spec = ChildSpec("measure", {"task_path": str(task_path)}, workdir,
                         settings.MEASURE_TIMEOUT,
                         sandbox_limits(settings.MEASURE_TIMEOUT, threads),
                         env=thread_env(threads))
        return run_child(spec)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
