"""The compile child's measuring slots (compiler_core/tune/tuner.py): its own, and one per
other worker on the same hardware.

Its own slot asks the link helper (sandbox/linker.py) to time a batch, holding the worker's
measurement lock (an open file the worker passes in, locked with flock) so that no other
worker times candidates on the same cores meanwhile. A remote slot cannot reach the network:
it writes the pickled BuildTask into the work directory and prints {"measure": N}; the
worker sends those bytes to another worker (workers/measure_remote.py) and writes back
`N.result.json`, plain JSON, which this side turns into Measurements. A slot that gets no
answer in time raises, and the tuner measures that batch here instead.
"""
from __future__ import annotations

import fcntl
import json
import pickle
import threading
import time
from dataclasses import replace
from pathlib import Path

POLL = 0.05


class LocalSlot:
    def __init__(self, measure, worker: str, lock_fd: int | None):
        self.measure, self.worker, self.lock_fd = measure, worker, lock_fd
        self.busy = threading.Lock()  # one request at a time on the helper's pipe

    def __call__(self, task) -> list:
        with self.busy:
            if self.lock_fd is not None:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            try:
                measured = self.measure(task)
            finally:
                if self.lock_fd is not None:
                    fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        return [replace(m, by=self.worker) for m in measured]


class RemoteSlot:
    counter = 0
    counting = threading.Lock()

    def __init__(self, directory: Path, emit, seconds: float):
        self.directory, self.emit = directory, emit
        self.seconds = seconds  # the worker answers within this, if it is alive

    def __call__(self, task) -> list:
        with RemoteSlot.counting:
            RemoteSlot.counter += 1
            n = RemoteSlot.counter
        self.directory.mkdir(exist_ok=True)
        result = self.directory / f"{n}.result.json"
        (self.directory / f"{n}.task").write_bytes(pickle.dumps(task))
        self.emit(n)
        deadline = time.monotonic() + self.seconds
        while not result.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer for remote batch {n}")
            time.sleep(POLL)
        reply = json.loads(result.read_text())
        result.unlink(missing_ok=True)
        return measurements(task, reply)


def measurements(task, reply: dict) -> list:
    """The reply's plain JSON -> one Measurement per schedule of the task."""
    if "error" in reply:
        raise RuntimeError(f"remote batch failed: {reply['error']}")
    rows, worker = reply["measurements"], str(reply["worker"])
    if len(rows) != len(task.schedules):
        raise RuntimeError("remote batch answered for another number of candidates")
    return [_measurement(s, r, worker) for s, r in zip(task.schedules, rows)]


def _measurement(schedule, row: dict, worker: str):
    from compiler_core.tune.runner import Measurement
    seconds, error = row.get("seconds"), row.get("error")
    if error is not None:
        return Measurement(schedule, None, str(error)[:500], worker)
    if not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        return Measurement(schedule, None, "the remote worker gave no time", worker)
    return Measurement(schedule, float(seconds), None, worker)


def as_json(measured: list) -> list[dict]:
    return [{"seconds": m.seconds, "error": m.error} for m in measured]
