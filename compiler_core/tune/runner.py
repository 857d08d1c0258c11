"""Runner: time a batch of candidates in a child process with time limits.

Generated code runs only in the child (tune/measure_child.py). The child reports each
candidate as it starts and ends, so when it dies (a crash) or stops reporting (a hang: it is
killed after `candidate_seconds`) the candidate it was running is recorded as that failure
and a new child carries on with the rest, after timing the reference again (its outputs are
what the others are checked against). Wrong results are found by the child itself.
"""
from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..kernels import LOWERINGS
from ..kernels.schedule import SPACES
from .builder import BuildTask

BUILD_SECONDS = 120.0      # LLVM over a whole batch
CANDIDATE_SECONDS = 10.0   # checking and timing one candidate
# whole models (the model check): each built as cc.compile builds it; a turn of timing
MODEL_BUILD_SECONDS = 600.0
MODEL_TURN_SECONDS = 60.0


@dataclass
class Measurement:
    schedule: object
    seconds: float | None = None   # per call; None when it failed
    error: str | None = None
    by: str | None = None          # the worker that measured it (the service's slots)
    parts: list | None = None      # a whole model's: [[onnx nodes, seconds] per kernel]
    rounds: list | None = None     # a whole model's: seconds per run in each round (paired.py)

    @property
    def ok(self) -> bool:
        return self.error is None


def run_batch(task: BuildTask, candidate_seconds: float | None = None,
              build_seconds: float | None = None) -> list[Measurement]:
    """One Measurement per schedule of the task (the reference first)."""
    whole = task.graph is not None
    candidate_seconds = candidate_seconds or (MODEL_TURN_SECONDS if whole else CANDIDATE_SECONDS)
    build_seconds = build_seconds or (MODEL_BUILD_SECONDS if whole else BUILD_SECONDS)
    results: dict[int, Measurement] = {}
    todo = list(range(len(task.schedules)))
    while todo:
        sub = replace(task, schedules=[task.schedules[0]] + [task.schedules[k] for k in todo
                                                             if k != 0])
        index = [0] + [k for k in todo if k != 0]   # child's k -> task's k
        got = _one_child(sub, candidate_seconds, build_seconds)
        for ck, m in got.items():
            if index[ck] not in results:
                results[index[ck]] = m
        if 0 in results and not results[0].ok:
            break  # without the reference nothing can be checked
        # a child that died took the times of its candidates with it (they are reported
        # together, after the rounds): the next one times them again, with the reference
        todo = [k for k in todo if k not in results]
    reason = results[0].error if 0 in results else "the reference did not run"
    return [results.get(k) or Measurement(s, error=f"not measured: {reason}")
            for k, s in enumerate(task.schedules)]


def _one_child(task: BuildTask, candidate_seconds: float, build_seconds: float) -> dict:
    """Measurements this child got to; the one it was running when it failed is included."""
    with tempfile.TemporaryDirectory(prefix="tensorforge-tune-") as tmp:
        path = Path(tmp) / "task.pickle"
        path.write_bytes(pickle.dumps(task))
        err_path = Path(tmp) / "stderr"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(_command(task, path), stdout=subprocess.PIPE, stderr=err,
                                    env=_child_env(), start_new_session=True)
            try:
                return _follow(proc, task, candidate_seconds, build_seconds, err_path)
            finally:
                _kill_group(proc)
                proc.wait()
                proc.stdout.close()


def _kill_group(proc) -> None:
    """The child and the builder it may have forked (its own session: the group is theirs)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _command(task: BuildTask, path: Path) -> list[str]:
    modules = sorted({fn.__module__ for op in task.ops
                      for fn in (LOWERINGS.get(op), SPACES.get(op)) if fn is not None})
    return [sys.executable, "-m", "compiler_core.tune.measure_child", str(path), *modules]


def _child_env() -> dict:
    """The parent's import path, so modules registered outside the package (tests) import."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _follow(proc, task, candidate_seconds, build_seconds, err_path) -> dict:
    results: dict[int, Measurement] = {}
    running, limit = None, [build_seconds]  # the child is built, then per candidate
    for event in _events(proc, lambda: limit[0]):
        if event is None:  # silent for too long
            _fail(results, task, running, f"timed out after {limit[0]:.0f} s (hang)")
            return results
        if "built" in event:
            limit[0] = candidate_seconds
        elif "start" in event:
            running = event["start"]
        elif "done" in event:
            k = event["done"]
            results[k] = Measurement(task.schedules[k], event.get("seconds"), event.get("error"),
                                     parts=event.get("parts"), rounds=event.get("rounds"))
            running = None
    proc.wait()
    if running is not None or len(results) < len(task.schedules):
        _fail(results, task, running, _death(proc.returncode, err_path))
    return results


def _fail(results, task, running, why: str) -> None:
    """Blame the candidate that was running; a failure while building blames the batch."""
    ks = [running] if running is not None else [k for k in range(len(task.schedules))
                                                 if k not in results]
    for k in ks:
        results[k] = Measurement(task.schedules[k], error=why)


def _death(code: int, err_path: Path) -> str:
    tail = err_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"crashed ({how}) {tail[0][:200]}".strip()


def _events(proc, limit):
    """Parsed lines from the child; None when it said nothing for `limit()` seconds."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    deadline = time.monotonic() + limit()
    while True:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            yield None
            return
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            event = _parse(line)
            if event is not None:
                yield event
        deadline = time.monotonic() + limit()


def _parse(line: bytes) -> dict | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None  # something a kernel or library printed
    return event if isinstance(event, dict) else None
