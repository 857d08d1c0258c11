"""The runner's child process: build a batch of candidates, check and time each, one at a time.

    python -m compiler_core.tune.measure_child TASK.pickle [MODULE ...]

MODULEs are imported first (they register the lowerings and spaces of ops outside
compiler_core.kernels). Prints one JSON object per line, flushed as it happens, so the
parent knows which candidate was running when the child crashed or hung:
    {"built": [error or null, ...]}
    {"start": k}
    {"done": k, "seconds": t}  or  {"done": k, "error": "..."}
Candidate 0 is the reference (the default schedule): every other candidate's checked
outputs must match its outputs on the same inputs. It is timed again after the others (a
second "done" for 0: the lower time counts). A time is the fastest of REPEATS runs.
"""
from __future__ import annotations

import importlib
import json
import pickle
import sys
import time

import numpy as np

REPEATS = 5
REPEAT_SECONDS = 0.005  # calls per repeat: enough for about this long


def say(**event) -> None:
    print(json.dumps(event), flush=True)


def arrays_for(node, rng_seed: int = 0) -> list[np.ndarray]:
    """Params in kernel order: constants as compiled, other inputs random (the same for every
    candidate: they share the seed and the non-constant inputs), outputs zeroed."""
    from ..kernels import kernel_params
    rng = np.random.default_rng(rng_seed)
    out = []
    for v in kernel_params(node):
        if v.is_const:
            out.append(np.ascontiguousarray(v.const, dtype=v.dtype).reshape(v.shape))
        elif v in node.outputs:
            out.append(np.zeros(v.shape, v.dtype))
        else:
            out.append(_random(rng, v))
    return out


def _random(rng, v) -> np.ndarray:
    if v.dtype.kind == "f":
        return rng.standard_normal(v.shape).astype(v.dtype)
    if v.dtype.kind == "b":
        return rng.integers(0, 2, v.shape).astype(v.dtype)
    return rng.integers(0, 4, v.shape).astype(v.dtype)


def outputs_of(node, arrays, checked) -> list[np.ndarray]:
    first = len(arrays) - len(node.outputs)
    return [arrays[first + k].copy() for k in checked]


def mismatch(got: list, want: list) -> str | None:
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {k} has shape {g.shape}, the default's {w.shape}"
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return f"output {k} differs from the default schedule's"
            continue
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        err = float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0
        if not np.isfinite(err) or err > 1e-4 * scale + 1e-5:
            return f"output {k} differs from the default schedule's (max abs err {err:.3g})"
    return None


def seconds_per_call(call) -> float:
    started = time.perf_counter()
    call()
    once = max(time.perf_counter() - started, 1e-7)
    number = max(1, min(10000, int(REPEAT_SECONDS / once)))
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - started) / number)
    return min(samples)  # interference only ever adds time


def measure(task, built) -> None:
    reference, calls = None, {}
    for k, node in enumerate(built.nodes):
        if built.errors[k]:
            say(done=k, error=built.errors[k])
            continue
        say(start=k)
        lib, index = built.libs[k]
        arrays = arrays_for(node)
        call = lib.bind(index, *arrays)
        call()
        got = outputs_of(node, arrays, task.checked)
        if reference is None:
            reference = got
            wrong = None if k == 0 else "the default schedule failed"
        else:
            wrong = mismatch(got, reference)
        if wrong:
            say(done=k, error=f"wrong result: {wrong}")
            continue
        calls[k] = seconds_per_call(call), call
        say(done=k, seconds=calls[k][0])
    if 0 in calls and len(calls) > 1:
        # timed again last: the first kernel timed in a fresh process runs slow (clock
        # ramp, cold caches), which would flatter every candidate against the default
        say(done=0, seconds=min(calls[0][0], seconds_per_call(calls[0][1])))


def main(argv: list[str]) -> int:
    for module in argv[1:]:
        importlib.import_module(module)
    from .builder import build_batch
    with open(argv[0], "rb") as f:
        task = pickle.load(f)
    built = build_batch(task)
    say(built=built.errors)
    libs = {id(lib): lib for lib, _ in filter(None, built.libs)}
    for lib in libs.values():
        lib.set_threads(task.threads)
    measure(task, built)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
