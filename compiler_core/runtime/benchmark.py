"""Compiled model vs ONNX Runtime on the same inputs, measured in the same process, interleaved."""
from __future__ import annotations

import time

import numpy as np

from .feeds import random_feeds
from .loaded_model import load


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
    except Exception as exc:  # onnxruntime raises its own exception types
        raise BaselineError(f"onnxruntime cannot load the model: {exc}") from None


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


def compare(artifact_dir, model, feeds: dict | None = None, threads: int = 1, warmup: int = 3,
            min_runs: int = 10, max_seconds: float = 10.0, max_runs: int = 1000) -> dict:
    """Interleave runs of both so machine noise hits them alike."""
    compiled = load(artifact_dir, threads=threads)
    feeds = feeds if feeds is not None else random_feeds(compiled.inputs)
    sess = ort_session(model, threads)
    ort_names = [o.name for o in sess.get_outputs()]
    arrays = compiled._check(feeds)
    outs = [np.empty(s["shape"], np.dtype(s["dtype"])) for s in compiled.outputs]

    run_compiled = compiled.bind(arrays, outs)

    def run_ort():
        return sess.run(None, feeds)

    for _ in range(warmup):
        run_compiled()
        run_ort()
    ours, theirs = [], []
    deadline = time.perf_counter() + max_seconds
    while len(ours) < min_runs or (time.perf_counter() < deadline and len(ours) < max_runs):
        for fn, samples in ((run_compiled, ours), (run_ort, theirs)):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    got = {s["name"]: o for s, o in zip(compiled.outputs, outs)}
    ref = dict(zip(ort_names, run_ort()))
    result = {"compiled": {**latency_stats(ours), "samples_ms": ours},
              "onnxruntime": {**latency_stats(theirs), "samples_ms": theirs},
              "threads": threads}
    result["speedup"] = result["onnxruntime"]["median_ms"] / max(result["compiled"]["median_ms"], 1e-9)
    result.update(numerical_check(got, ref))
    result["kernels"] = compiled.profile(feeds, runs=max(1, min(10, len(ours))))
    return result
