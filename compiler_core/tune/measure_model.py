"""The measure child's whole-model candidates (BuildTask.graph: the tuner's model check).

Each candidate is the model built as `cc.compile` builds it (memory plan, fused steps, one
shared library) with one schedule per node; it runs on random inputs, its outputs are
checked against the reference's (candidate 0), and then the candidates take turns, ROUNDS
times, each turn profiling ROUND_SECONDS of back-to-back runs (tf_profile: each kernel's
wall time), so machine noise hits them alike. A candidate's time per kernel is the median
of its turns' means: {"done": k, "seconds": model run, "rounds": [each turn's model run],
"parts": [[onnx nodes, seconds]...]} (tune/paired.py compares candidates round by round).
"""
from __future__ import annotations

import ctypes
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from .measure_child import in_rounds, mismatch, random_input

ROUNDS = 9
ROUND_SECONDS = 0.1
WARMUP_RUNS = 5
# float32 sums in another order through a whole model: ten times one kernel's tolerance,
# against each output's largest magnitude (elementwise, YOLOv8n-320's box outputs near 0
# differed past 1e-3 and its tuned kernels were all dropped)
RTOL, ATOL = 1e-3, 1e-4


class ModelRun:
    """A built candidate, loaded, with its input, output and arena buffers."""

    def __init__(self, so_path: Path, graph, parts: list, threads: int, seed: int = 0):
        self.lib = ctypes.CDLL(str(so_path))
        self.lib.tf_set_num_threads.argtypes = [ctypes.c_int]
        self.lib.tf_set_num_threads(threads)
        self.lib.tf_arena_size.restype = ctypes.c_size_t
        self.lib.tf_run_with_arena.restype = ctypes.c_int
        self.lib.tf_profile.restype = ctypes.c_int
        self.arena = np.empty(int(self.lib.tf_arena_size()) + 64, np.uint8)
        self.inputs = [random_input(v, seed) for v in graph.inputs]
        self.outputs = [np.empty(v.shape, v.dtype) for v in graph.outputs]
        self.parts = parts            # the ONNX nodes behind each kernel, in order
        self.ns = np.zeros(max(len(parts), 1), np.int64)
        ptrs = [a.ctypes.data for a in self.inputs], [o.ctypes.data for o in self.outputs]
        self.args = ((ctypes.c_void_p * max(len(ptrs[0]), 1))(*ptrs[0]),
                     (ctypes.c_void_p * max(len(ptrs[1]), 1))(*ptrs[1]),
                     ctypes.c_void_p((self.arena.ctypes.data + 63) // 64 * 64))

    def run(self) -> None:
        rc = self.lib.tf_run_with_arena(*self.args)
        if rc != 0:
            raise RuntimeError(f"the model returned error code {rc}")

    def profile(self, seconds: float) -> tuple[float, np.ndarray]:
        """(seconds per run, seconds per run of each kernel) over about `seconds`."""
        self.ns[:] = 0
        runs, started = 0, time.perf_counter()
        while runs == 0 or time.perf_counter() - started < seconds:
            rc = self.lib.tf_profile(*self.args, ctypes.c_void_p(self.ns.ctypes.data))
            if rc != 0:
                raise RuntimeError(f"the model returned error code {rc}")
            runs += 1
        return (time.perf_counter() - started) / runs, self.ns[:len(self.parts)] / runs / 1e9


def build_candidate(task, k: int, directory: Path) -> None:
    """candidate{k}.so and the ONNX nodes behind each of its kernels (candidate{k}.json),
    or the reason it did not build (candidate{k}.error)."""
    from ..driver import build_model
    from .builder import finished_model
    try:
        graph = finished_model(task, task.schedules[k])
        so_bytes, steps, step_nodes, _ = build_model(graph, task.spec, task.opt_level)
        (directory / f"candidate{k}.so").write_bytes(so_bytes)
        parts = [list(n.onnx_nodes) for n, s in zip(step_nodes, steps) if s.kernel]
        (directory / f"candidate{k}.json").write_text(json.dumps(parts))
    except Exception as exc:  # noqa: BLE001  a candidate that does not build fails alone
        (directory / f"candidate{k}.error").write_text(f"build: {type(exc).__name__}: {exc}")


def build_all(task, directory: Path) -> tuple[dict, list]:
    """({k: ModelRun}, per candidate its build error or None): the candidates after the
    first are built in forked processes meanwhile (LLVM builds take turns in one process)."""
    from ..codegen.split_build import fork_and_run
    pids = [fork_and_run(lambda k=k: build_candidate(task, k, directory))
            for k in range(1, len(task.schedules))]
    build_candidate(task, 0, directory)
    for pid in pids:
        os.waitpid(pid, 0)
    runs, errors = {}, []
    for k in range(len(task.schedules)):
        so, parts = directory / f"candidate{k}.so", directory / f"candidate{k}.json"
        error = directory / f"candidate{k}.error"
        if parts.exists():
            runs[k] = ModelRun(so, task.graph, json.loads(parts.read_text()), task.threads)
        errors.append(None if k in runs else
                      error.read_text()[:500] if error.exists() else "build: the builder died")
    return runs, errors


def measure_models(task, say) -> None:
    """The whole protocol for a graph task; `say(**event)` reports to the runner."""
    with tempfile.TemporaryDirectory(prefix="tensorforge-model-check-") as tmp:
        runs, errors = build_all(task, Path(tmp))
        say(built=errors)
        for k, e in enumerate(errors):
            if e:
                say(done=k, error=e)
        _check(runs, say)
        _time(runs, say)


def _check(runs: dict, say) -> None:
    reference = None
    for k in sorted(runs):
        say(start=k)
        runs[k].run()
        got = [o.copy() for o in runs[k].outputs]
        if reference is None:
            reference = got if k == 0 else None
            wrong = None if k == 0 else "the default schedules failed"
        else:
            wrong = mismatch(got, reference, RTOL, ATOL)
        if wrong:
            say(done=k, error=f"wrong result: model {wrong}")
            del runs[k]


def _time(runs: dict, say) -> None:
    in_rounds(runs, 1, lambda k, run: [run.run() for _ in range(WARMUP_RUNS)], say)
    profiles = in_rounds(runs, ROUNDS, lambda k, run: run.profile(ROUND_SECONDS), say)
    for k, run in runs.items():
        totals, parts = zip(*profiles[k])
        each = np.median(np.array(parts), axis=0)
        say(done=k, seconds=float(np.median(totals)), rounds=[float(t) for t in totals],
            parts=[[names, float(t)] for names, t in zip(run.parts, each)])
