"""Compiled model vs ONNX Runtime on the same inputs, measured in the same process, interleaved."""
from __future__ import annotations

import os
import time

import numpy as np

from .emulation import EMULATION_NOTE
from .feeds import random_feeds
from .loaded_model import load

EMULATED_RUNS = 3  # timings under emulation mean nothing: enough runs to show that, no more


def latency_stats(samples_ms: list[float]) -> dict:
    a = np.asarray(samples_ms, np.float64)
    return {"median_ms": float(np.median(a)), "mean_ms": float(a.mean()),
            "p90_ms": float(np.percentile(a, 90)), "p99_ms": float(np.percentile(a, 99)),
            "min_ms": float(a.min()), "max_ms": float(a.max()), "std_ms": float(a.std()),
            "runs": int(a.size)}


class BaselineError(ValueError):
    """ONNX Runtime, the baseline, cannot run the model."""


ORT_MAX_IR_VERSION = 10


def ort_session(model, threads: int):
    import onnx
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(
        model if isinstance(model, bytes) else open(model, "rb").read())
    # New onnx releases stamp IR versions onnxruntime has not caught up with; the opset,
    # not the IR version, decides what the graph means.
    proto.ir_version = min(proto.ir_version, ORT_MAX_IR_VERSION)
    try:
        return ort.InferenceSession(proto.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001  onnxruntime raises its own exception types
        raise BaselineError(f"onnxruntime cannot load the model: {exc}") from None


def ort_outputs(model, feeds: dict) -> dict:
    """ONNX Runtime's outputs by name, at one thread: the reference outputs."""
    sess = ort_session(os.fspath(model) if isinstance(model, os.PathLike) else model, 1)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def numerical_check(got: dict, ref: dict) -> dict:
    max_abs, max_rel, ok = 0.0, 0.0, True
    for name, r in ref.items():
        g, r = np.asarray(got[name]), np.asarray(r)
        if g.shape != r.shape:
            return {"max_abs_err": None, "max_rel_err": None, "allclose": False}
        if r.dtype.kind in "fc":
            diff = np.abs(g.astype(np.float64) - r.astype(np.float64))
            scale = float(np.max(np.abs(r), initial=0.0))
            finite = np.isfinite(diff)
            max_abs = max(max_abs, float(np.max(diff[finite], initial=0.0)))
            max_rel = max(max_rel, float(np.max(diff[finite], initial=0.0)) / max(scale, 1e-30))
            ok &= bool(np.allclose(g, r, rtol=1e-3, atol=1e-4 + 1e-3 * scale, equal_nan=True))
        else:
            ok &= bool(np.array_equal(g, r))
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "allclose": ok}


def interleave(runners: dict, warmup: int = 3, min_runs: int = 10, max_seconds: float = 10.0,
               max_runs: int = 1000, block_ms: float = 0.0,
               settle: bool = False, settle_ms: float = 0.0) -> dict[str, list[float]]:
    """Milliseconds per call of each no-argument runner, calling them in turn so that machine
    noise hits them alike: at least `min_runs` rounds, then more until `max_seconds` or
    `max_runs`. A round gives each runner a turn: one timed call, or with `block_ms` back to
    back calls for about that long (at most 50).

    Runtimes in one process disturb each other: idle threads spin for a while after a
    parallel region (ONNX Runtime's pool, OpenMP) and take the cores the next runtime's
    threads want; measured on ResNet-50 at 2 threads, OpenVINO right after ONNX Runtime ran
    1.5x slower than after itself. With `settle`, each turn starts with untimed calls, until
    they have run within SETTLE_TOLERANCE of the runner's fastest call so far for `settle_ms`
    in a row (the previous runtime's threads have given up the cores), for at most
    SETTLE_MAX_MS. The warm-up ends with SETTLE_MAX_MS of each runner's calls back to back,
    so that the fastest call is one that nothing slowed down."""
    fastest = {name: float("inf") for name in runners}
    for _ in range(warmup):
        fastest = {name: min(fastest[name], _call_ms(fn)) for name, fn in runners.items()}
    if settle and warmup:  # a fastest call to settle against, not slowed by others' spinning
        fastest = {name: settle_calls(fn, SETTLE_MAX_MS, fastest[name])
                   for name, fn in runners.items()}
    repeats = {name: max(1, min(50, int(block_ms / max(ms, 1e-3)))) if warmup else 1
               for name, ms in fastest.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    deadline = time.perf_counter() + max_seconds
    rounds = 0
    while rounds < min_runs or (time.perf_counter() < deadline and rounds < max_runs):
        for name, fn in runners.items():
            if settle:
                fastest[name] = settle_calls(fn, settle_ms, fastest[name])
            samples[name] += [_call_ms(fn) for _ in range(repeats[name])]
            fastest[name] = min(fastest[name], *samples[name][-repeats[name]:])
        rounds += 1
    return samples


# Measured on a batch-1 sampling net at 2 threads (2-core znver3): one untimed call left
# our 2-thread figure at the 1-thread one (ONNX Runtime's idle pool still spinning on the
# second core), 5 ms recovered half of the 2-thread gain, 20 ms all of it (the same as
# timing the net alone). ONNX Runtime's own 2-thread figure improved as much.
SETTLE_MS = 20.0
# On Inception v2 at 2 threads (2-core znver4) ONNX Runtime's pool kept spinning for 50 to
# 200 ms after its last call: our next calls took 25-70 ms against 16 ms alone, and the
# bench put us at 24.8 ms. A fixed wait long enough for the worst case would cost every
# turn of every model; waiting for calls as fast as the runner has been costs SETTLE_MS
# where nothing spins. One such call is not enough: on MobileNetV3 at 2 threads (2-core
# znver4), for about 100 ms after ONNX Runtime's turn one call in three still took 7 ms
# against 3.1 ms, and turns that began on the first fast call timed a median of 7.1 ms;
# with SETTLE_MS of fast calls in a row, 3.17 ms, as when timed alone.
SETTLE_TOLERANCE = 1.15
SETTLE_MAX_MS = 400.0


def settle_calls(fn, ms: float, fastest: float) -> float:
    """Untimed calls (at least one) until they have all taken at most SETTLE_TOLERANCE x
    `fastest` for `ms` in a row, or SETTLE_MAX_MS have passed; the new fastest."""
    start = time.perf_counter()
    calm_since = None  # when the current run of calls at the usual speed began
    while True:
        began = time.perf_counter()
        took = _call_ms(fn)
        fastest = min(fastest, took)
        now = time.perf_counter()
        if took > SETTLE_TOLERANCE * fastest:
            calm_since = None
        elif calm_since is None:
            calm_since = began
        if (now - start) * 1e3 >= SETTLE_MAX_MS or \
                (calm_since is not None and (now - calm_since) * 1e3 >= ms):
            return fastest


def _call_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def compare(artifact_dir, model, feeds: dict | None = None, threads: int = 1, warmup: int = 3,
            min_runs: int = 10, max_seconds: float = 10.0, max_runs: int = 1000) -> dict:
    """Interleave runs of both so machine noise hits them alike. An artifact of another
    architecture runs under emulation: a correctness check, with no meaningful timing."""
    compiled = load(artifact_dir, threads=threads)
    feeds = feeds if feeds is not None else random_feeds(compiled.inputs)
    sess = ort_session(model, threads)
    if compiled.emulated:
        return compare_emulated(compiled, sess, feeds, min(min_runs, EMULATED_RUNS))
    ort_names = [o.name for o in sess.get_outputs()]
    run_compiled = compiled.bind_feeds(feeds)

    def run_ort():
        return sess.run(None, feeds)

    samples = interleave({"compiled": run_compiled, "onnxruntime": run_ort}, warmup, min_runs,
                         max_seconds, max_runs)
    ours, theirs = samples["compiled"], samples["onnxruntime"]
    got = compiled.outputs_of(run_compiled)
    ref = dict(zip(ort_names, run_ort()))
    result = {"compiled": {**latency_stats(ours), "samples_ms": ours},
              "onnxruntime": {**latency_stats(theirs), "samples_ms": theirs},
              "threads": threads}
    result["speedup"] = result["onnxruntime"]["median_ms"] / max(result["compiled"]["median_ms"], 1e-9)
    result.update(numerical_check(got, ref))
    result["kernels"] = compiled.profile(feeds, runs=max(1, min(10, len(ours))))
    return result


def compare_emulated(compiled, sess, feeds: dict, runs: int) -> dict:
    """ONNX Runtime's outputs vs the emulated run's. `compiled` holds the emulated wall
    times only so nobody has to guess what they were; `speedup` is None."""
    got, samples = compiled.timed_run(feeds, runs)
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    result = {"emulated": True, "arch": compiled.arch, "note": EMULATION_NOTE,
              "compiled": {**latency_stats(samples), "samples_ms": samples},
              "onnxruntime": None, "speedup": None, "threads": compiled.threads, "kernels": []}
    result.update(numerical_check(got, ref))
    return result
