"""The runtimes users would otherwise deploy with, each as a no-argument call on fixed inputs:
ONNX Runtime (always) and OpenVINO's CPU plugin (when `openvino` is installed: it is
optional, in requirements-bench.txt). Both get the thread count the compiled model gets.
"""
from __future__ import annotations

import sys
from pathlib import Path

from compiler_core.runtime.benchmark import ort_session


def openvino_version() -> str | None:
    try:
        import openvino
    except ImportError:
        return None
    return openvino.__version__.split("-")[0]


def ort_runner(path: Path, threads: int, feeds: dict):
    sess = ort_session(str(path), threads)
    return lambda: sess.run(None, feeds)


def openvino_runner(path: Path, threads: int, feeds: dict):
    """OpenVINO as its docs advise for latency: one stream, f32 (no bf16/f16 downcast)."""
    import openvino as ov
    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape({name: list(a.shape) for name, a in feeds.items()})
    compiled = core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY",
                                                 "INFERENCE_NUM_THREADS": threads,
                                                 "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return lambda: request.infer(feeds)


def baseline_runners(path: Path, threads: int, feeds: dict) -> dict:
    """ONNX Runtime, and OpenVINO unless it is missing or cannot convert this model (then
    its column stays empty for the model and the reason goes to stderr: an optional
    baseline must not hide the others' figures)."""
    runners = {"ort": ort_runner(path, threads, feeds)}
    if openvino_version():
        try:
            runners["openvino"] = openvino_runner(path, threads, feeds)
        except Exception as exc:  # noqa: BLE001  OpenVINO raises its own RuntimeError kinds
            reason = next((line for line in str(exc).splitlines() if line.strip()), "")
            print(f"OpenVINO cannot run {path.name}: {reason[:200]}", file=sys.stderr)
    return runners
