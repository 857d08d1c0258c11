"""The cost of one parallel region: `python -m bench.fork_join` (part of `make bench`).

A chain of KERNELS tiny Softmax kernels, each forced to be a parallel loop, is timed at one
thread (the kernel calls its loop body directly) and at two (the thread pool,
codegen/thread_pool.c, forks and joins); the difference per kernel is what a parallel region
costs. The kernels are tiny so that the work itself is nothing next to the fork/join. ONNX
Runtime runs the same chain at the same thread counts for comparison: its per-operator
cost, including its own thread pool's.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
from onnx import TensorProto, helper

import compiler_core as cc
from compiler_core.kernels import elementwise
from compiler_core.runtime.benchmark import SETTLE_MS, interleave
from compiler_core.runtime.loaded_model import load

from .baselines import ort_runner
from .machine import describe, header_line

KERNELS = 200
SHAPE = (8, 64)


def softmax_chain(kernels: int = KERNELS) -> onnx.ModelProto:
    names = ["x"] + [f"s{i}" for i in range(kernels)]
    nodes = [helper.make_node("Softmax", [a], [b], axis=-1) for a, b in zip(names, names[1:])]
    graph = helper.make_graph(nodes, "fork_join",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, SHAPE)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def per_kernel_us(seconds: float) -> dict:
    """Microseconds per kernel: ours at 1 and 2 threads, ONNX Runtime's at 1 and 2."""
    model = softmax_chain()
    feeds = {"x": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}
    with mock.patch.object(elementwise, "PARALLEL_MIN_ELEMENTS", 1):
        artifact = cc.compile(model)
    with tempfile.TemporaryDirectory(prefix="tf-forkjoin-") as tmp:
        path = Path(tmp) / "chain.onnx"
        onnx.save(model, path)
        runners = {}
        for t in (1, 2):
            runners[("ours", t)] = load(artifact.save(Path(tmp) / f"t{t}"), threads=t).bind_feeds(feeds)
            runners[("ort", t)] = ort_runner(path, t, feeds)
        samples = interleave(runners, warmup=3, min_runs=20, max_seconds=seconds, settle=True,
                             settle_ms=SETTLE_MS)
    return {key: float(np.median(v)) * 1000 / KERNELS for key, v in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    print(header_line(describe()))
    us = per_kernel_us(args.seconds)
    cost = us[("ours", 2)] - us[("ours", 1)]
    print(f"per kernel, {KERNELS} tiny kernels in a chain: ours {us[('ours', 1)]:.2f} us at 1 thread, "
          f"{us[('ours', 2)]:.2f} us at 2; ONNX Runtime {us[('ort', 1)]:.2f} / {us[('ort', 2)]:.2f} us")
    print(f"fork/join of one parallel region at 2 threads: {cost:.2f} us "
          f"(per tiny operator at 2 threads, ONNX Runtime/ours = {us[('ort', 2)] / us[('ours', 2)]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
