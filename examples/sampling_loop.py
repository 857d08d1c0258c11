"""Autoregressive sampling with a compiled WaveRNN-style step: one second of 24 kHz audio.

    python examples/sampling_loop.py [--model wavernn_sparse80|wavernn|PATH.onnx]
                                     [--seconds 1] [--threads 1] [--onnxruntime]

Each step runs the compiled net on (x, h) -> (probs, h_next), draws the next 8-bit sample
from probs, and builds the next x from that sample's embedding and the conditioning
features of the current frame (a new frame every 300 samples, 12.5 ms). The state h is
fed back without a copy: two bound calls swap the two h buffers. Prints the real-time
factor (wall time / audio time; below 1 is faster than real time), the microseconds per
step of the whole loop and of the compiled step alone. --onnxruntime runs the same loop on
ONNX Runtime for comparison.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import compiler_core as cc
from compiler_core.runtime.benchmark import ort_session

RATE, HOP, CLASSES = 24_000, 300, 256


class Conditioning:
    """The step's input x: [embedding of the previous sample (32), frame features (32)]."""

    def __init__(self, width: int, steps: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        half = width // 2
        self.embedding = rng.standard_normal((CLASSES, half)).astype(np.float32)
        self.frames = rng.standard_normal((steps // HOP + 1, width - half)).astype(np.float32)
        self.uniform = rng.random(steps)  # one draw per step, made up front
        self.half = half

    def next_x(self, x: np.ndarray, probs: np.ndarray, step: int) -> int:
        """Draw the sample from probs and write the next step's x in place."""
        sample = min(int(np.searchsorted(np.cumsum(probs), self.uniform[step])), CLASSES - 1)
        x[0, :self.half] = self.embedding[sample]
        x[0, self.half:] = self.frames[step // HOP]
        return sample


def model_path(name: str) -> Path:
    if name.endswith(".onnx"):
        return Path(name)
    from tests.models import catalog
    return catalog.model_path(name)


def compiled_loop(model, steps: int, threads: int, cond: Conditioning) -> tuple[float, float]:
    """(loop seconds, seconds spent in the compiled step) for `steps` steps."""
    x = np.zeros((1, cond.half * 2), np.float32)
    h = [np.zeros((1, model.inputs[1]["shape"][1]), np.float32) for _ in range(2)]
    probs = np.empty((1, CLASSES), np.float32)
    # inputs (x, h), outputs (probs, h_next): step k reads h[k % 2] and writes h[1 - k % 2]
    calls = [model.bind([x, h[k]], [probs, h[1 - k]]) for k in (0, 1)]
    in_step = 0.0
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        calls[step & 1]()
        in_step += time.perf_counter() - t0
        cond.next_x(x, probs[0], step)
    return time.perf_counter() - start, in_step


def onnxruntime_loop(path: Path, steps: int, threads: int, cond: Conditioning, hidden: int):
    sess = ort_session(str(path), threads)
    x = np.zeros((1, cond.half * 2), np.float32)
    h = np.zeros((1, hidden), np.float32)
    in_step = 0.0
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        probs, h = sess.run(None, {"x": x, "h": h})
        in_step += time.perf_counter() - t0
        cond.next_x(x, probs[0], step)
    return time.perf_counter() - start, in_step


def report(name: str, seconds_of_audio: float, steps: int, wall: float, in_step: float):
    print(f"{name:12s} real-time factor {wall / seconds_of_audio:.3f}   "
          f"{wall / steps * 1e6:6.1f} us/step in the loop, {in_step / steps * 1e6:6.1f} us/step "
          f"in the net")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="wavernn_sparse80")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--onnxruntime", action="store_true", help="also run the loop on ORT")
    args = ap.parse_args(argv)
    path = model_path(args.model)
    steps = round(args.seconds * RATE)
    art = cc.compile(path, input_shapes={"x": (1, 64), "h": (1, 384)})
    sparse = art.meta["sparse_layers"]
    print(f"{path.name}: {len(sparse)} block-sparse layer(s) "
          + ", ".join(f"{s['weight']} {s['block']} {s['density']:.0%}" for s in sparse))
    with tempfile.TemporaryDirectory(prefix="sampling-") as tmp:
        model = cc.load(art.save(Path(tmp) / "step"), threads=args.threads)
        compiled_loop(model, min(steps, 500), args.threads, Conditioning(64, steps))  # warm up
        wall, in_step = compiled_loop(model, steps, args.threads, Conditioning(64, steps))
    print(f"{steps} steps ({args.seconds:g} s of {RATE} Hz audio), {args.threads} thread(s)")
    report("compiled", args.seconds, steps, wall, in_step)
    if args.onnxruntime:
        wall, in_step = onnxruntime_loop(path, steps, args.threads, Conditioning(64, steps), 384)
        report("onnxruntime", args.seconds, steps, wall, in_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
