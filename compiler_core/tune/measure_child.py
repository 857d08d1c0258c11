"""The runner's child process: build a batch of candidates, check and time each, one at a time.

    python -m compiler_core.tune.measure_child TASK.pickle [MODULE ...]

A task with a whole graph (the model check) goes to tune/measure_model.py instead.
MODULEs are imported first (they register the lowerings and spaces of ops outside
compiler_core.kernels). Prints one JSON object per line, flushed as it happens, so the
parent knows which candidate was running when the child crashed or hung:
    {"built": [error or null, ...]}
    {"start": k}
    {"done": k, "seconds": t}  or  {"done": k, "error": "..."}
Candidate 0 is the reference (the default schedule): every other candidate's checked
outputs must match its outputs on the same inputs. The candidates that pass are then timed
in REPEATS rounds, each round a run of every one of them in turn (a "start" before each),
and a time is the fastest of a candidate's runs: a machine that slows down for seconds at
a time (another tenant on the host) slows every candidate's run of the same rounds, where
timing each candidate's runs back to back handed one candidate the slow seconds (Xeon
Emerald Rapids, 1 thread, ResNet-50's 256 -> 1024 channel 1x1 conv at 14x14, one
candidate timed in two children of one tuning run: 1.013 and 1.394 ms; the default
1.154 and 1.284 ms). Every checked candidate keeps its weight copies until the rounds
end: at most the batch's count (tuner.BATCH + 1) times COLD_BYTES.

Calls go round copies of the constants (cold_copies): in a model a layer's weights were
last read a whole run ago and come from L3 or memory, and a candidate timed on weights kept
hot in L2 looks better than it runs there. znver5, 1 thread, ResNet-50's 1x1 convs at 7x7
(4 MB of weights each): packed 4x4-vector tiles timed hot 525 -> 416 us against channel
vectors, in the model 730 -> 659 us for that conv and the model no faster. Whole models,
5 minutes of tuning each, hot -> cold: ResNet-50's kernels add up to 30.7 -> 35.5 ms
untuned (it runs in 36.0-36.6 ms), tuned over untuned 0.997 -> 1.031, MobileNetV3 0.981
-> 1.038.
"""
from __future__ import annotations

import importlib
import itertools
import json
import pickle
import sys
import time
import zlib

import numpy as np

from .model_check import onnx_names

REPEATS = 5
REPEAT_SECONDS = 0.005  # calls per repeat: enough for about this long
COLD_BYTES = 64 << 20  # constants to go round (copies): past an L2, and a 32 MB L3
MAX_COPIES = 16


def say(**event) -> None:
    print(json.dumps(event), flush=True)


def arrays_for(nodes: list, rng_seed: int = 0) -> dict[str, np.ndarray]:
    """Every value the candidate's kernels read or write, by name: constants as compiled,
    the inputs no kernel writes random (the same for every candidate: each is drawn from
    its name and the seed), the others zeroed."""
    from ..kernels import kernel_params
    made = {v.name for n in nodes for v in n.outputs}
    arrays: dict[str, np.ndarray] = {}
    for v in (v for n in nodes for v in kernel_params(n)):
        if v.name in arrays:
            continue
        if v.is_const:
            arrays[v.name] = np.ascontiguousarray(v.const, dtype=v.dtype).reshape(v.shape)
        elif v.name in made:
            arrays[v.name] = np.zeros(v.shape, v.dtype)
        else:
            arrays[v.name] = random_input(v, rng_seed)
    return arrays


def random_input(v, seed: int = 0) -> np.ndarray:
    """The same values for a value of this name in every candidate."""
    rng = np.random.default_rng([seed, zlib.crc32(v.name.encode())])
    if v.dtype.kind == "f":
        return rng.standard_normal(v.shape).astype(v.dtype)
    if v.dtype.kind == "b":
        return rng.integers(0, 2, v.shape).astype(v.dtype)
    return rng.integers(0, 4, v.shape).astype(v.dtype)


def cold_copies(nodes: list, arrays: dict) -> list[dict]:
    """Copies of `arrays` with their own constants (the same values), as many as make,
    with `arrays`, COLD_BYTES of constants (at most MAX_COPIES in all); the other arrays
    are shared."""
    from ..kernels import kernel_params
    consts = {v.name for n in nodes for v in kernel_params(n) if v.is_const}
    size = sum(arrays[name].nbytes for name in consts if name in arrays)
    count = max(1, min(MAX_COPIES, COLD_BYTES // max(size, 1)))
    return [{name: a.copy() if name in consts else a for name, a in arrays.items()}
            for _ in range(count - 1)]


def rotating(calls: list):
    """One no-argument call that runs the next of `calls` each time."""
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def outputs_of(task, arrays: dict) -> list[np.ndarray]:
    return [arrays[task.node.outputs[k].name].copy() for k in task.checked]


def bound_call(nodes: list, libs: list, arrays: dict):
    """A no-argument call running the candidate's kernels in order."""
    from ..kernels import kernel_params
    calls = [lib.bind(index, *[arrays[v.name] for v in kernel_params(n)])
             for n, (lib, index) in zip(nodes, libs)]
    if len(calls) == 1:
        return calls[0]

    def call():
        for c in calls:
            c()
    return call


def timed_part(task, nodes: list, libs: list) -> tuple[list, list]:
    """The nodes, and their kernels, that compute the workload's ONNX nodes: what the model
    check times of it in the model (model_check.seconds_in_model). The others convert the
    workload's inputs and outputs between the blocked layout and the graph's, which the
    workload alone needs and the model does not (a region converts at its edges only):
    they run in the check, whose inputs they leave converted for the timed calls. Timed
    with them, MobileNetV3's blocked kernels took 1.3-6.6x their time in the model (znver4,
    1 thread: the 3x3 depthwise conv over 64 channels at 112x112, stride 2, 0.42 ms
    against 0.064), and a candidate's gain shrank to a fraction of the noise."""
    names = onnx_names([task.node, *task.prologue])
    keep = [j for j, n in enumerate(nodes) if names.intersection(n.onnx_nodes)]
    keep = keep or list(range(len(nodes)))
    return [nodes[j] for j in keep], [libs[j] for j in keep]


def mismatch(got: list, want: list, rtol: float = 1e-4, atol: float = 1e-5) -> str | None:
    """Why `got` is not `want`, or None: the same shapes, integers equal, floats within
    rtol of the output's largest magnitude (plus atol) and non-finite where `want` is."""
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {k} has shape {g.shape}, the default's {w.shape}"
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return f"output {k} differs from the default schedule's"
            continue
        finite = np.isfinite(w)
        if not np.array_equal(g[~finite], w[~finite], equal_nan=True):
            return f"output {k} differs from the default schedule's where that is not finite"
        g, w = g[finite], w[finite]
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        err = float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0
        if not np.isfinite(err) or err > rtol * scale + atol:
            return f"output {k} differs from the default schedule's (max abs err {err:.3g})"
    return None


def calls_per_run(call) -> int:
    """Calls that take about REPEAT_SECONDS (the first, timed here, also warms up)."""
    started = time.perf_counter()
    call()
    once = max(time.perf_counter() - started, 1e-7)
    return max(1, min(10000, int(REPEAT_SECONDS / once)))


def in_rounds(items: dict, rounds: int, turn, say) -> dict[int, list]:
    """{k: [turn(k, item), ...]} of {k: item}: `rounds` rounds of one turn of every item,
    each turn announced (a hang or crash in it is that candidate's). A machine that slows
    down for seconds at a time then slows every candidate's turns of the same rounds."""
    got: dict[int, list] = {k: [] for k in items}
    for _ in range(rounds):
        for k, item in items.items():
            say(start=k)
            got[k].append(turn(k, item))
    return got


def seconds_in_rounds(calls: dict) -> dict:
    """{k: seconds per call} of {k: call}: the fastest of REPEATS runs of each, the runs
    taken in rounds of one run of every call."""
    warmed = in_rounds(calls, 1, lambda k, call: calls_per_run(call), say)
    numbers = {k: got[0] for k, got in warmed.items()}

    def run(k, call):
        started = time.perf_counter()
        for _ in range(numbers[k]):
            call()
        return (time.perf_counter() - started) / numbers[k]
    # interference only ever adds time
    return {k: min(times) for k, times in in_rounds(calls, REPEATS, run, say).items()}


def measure(task, built) -> None:
    reference, checked = None, {}
    for k, nodes in enumerate(built.nodes):
        if built.errors[k]:
            say(done=k, error=built.errors[k])
            continue
        say(start=k)
        arrays = arrays_for(nodes)
        call = bound_call(nodes, built.libs[k], arrays)
        call()
        got = outputs_of(task, arrays)
        if reference is None:
            reference = got
            wrong = None if k == 0 else "the default schedule failed"
        else:
            wrong = mismatch(got, reference)
        if wrong:
            say(done=k, error=f"wrong result: {wrong}")
            continue
        timed, libs = timed_part(task, nodes, built.libs[k])
        checked[k] = rotating([bound_call(timed, libs, arrays)]
                              + [bound_call(timed, libs, copy)
                                 for copy in cold_copies(timed, arrays)])
    for k, seconds in seconds_in_rounds(checked).items():
        say(done=k, seconds=seconds)


def main(argv: list[str]) -> int:
    for module in argv[1:]:
        importlib.import_module(module)
    from .builder import build_batch
    with open(argv[0], "rb") as f:
        task = pickle.load(f)
    if task.graph is not None:
        from .measure_model import measure_models
        measure_models(task, say)
        return 0
    built = build_batch(task)
    say(built=built.errors)
    libs = {id(lib): lib for kernels in filter(None, built.libs) for lib, _ in kernels}
    for lib in libs.values():
        lib.set_threads(task.threads)
    measure(task, built)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
