"""Two dense kernels against numpy's sgemm on the same FLOPs: `python -m bench.kernel_peaks`
(part of `make bench`).

* a MatMul of a 512x1024 input by a constant 1024x1024 weight;
* a 3x3 convolution, 128 to 128 channels, on a 56x56 plane (padding 1), whose FLOPs are
  those of a 128 x 3136 x 1152 GEMM.

Each is compiled alone and timed at one thread, interleaved with numpy multiplying
matrices of the GEMM's shape on one thread (OpenBLAS reads its thread count when it
loads, so the bench re-runs itself with OPENBLAS_NUM_THREADS=1). A convolution that does
fewer multiplications than its GEMM (Winograd) shows more than 100%: the figure is the
effective rate on the direct FLOPs.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import compiler_core as cc
from compiler_core.runtime.benchmark import interleave, numerical_check, ort_outputs
from compiler_core.runtime.loaded_model import load

from .machine import describe, header_line

SINGLE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Case:
    name: str
    model: onnx.ModelProto
    feeds: dict
    gemm: tuple[int, int, int]  # M, N, K of the GEMM with the same FLOPs

    @property
    def flops(self) -> int:
        m, n, k = self.gemm
        return 2 * m * n * k


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "kernel_peak", inputs, outputs,
                              [numpy_helper.from_array(w, name) for name, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def matmul_case(rng) -> Case:
    m, k, n = 512, 1024, 1024
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (m, k))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (m, n))],
                   {"w": rng.standard_normal((k, n), np.float32)})
    return Case(f"MatMul {m}x{k} by constant {k}x{n}", model,
                {"x": rng.standard_normal((m, k), np.float32)}, (m, n, k))


def conv_case(rng) -> Case:
    c, hw = 128, 56
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3],
                                     pads=[1, 1, 1, 1])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c, hw, hw))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, c, hw, hw))],
                   {"w": (rng.standard_normal((c, c, 3, 3)) / 30).astype(np.float32)})
    return Case(f"Conv 3x3 {c}->{c} channels, {hw}x{hw}", model,
                {"x": rng.standard_normal((1, c, hw, hw), np.float32)}, (c, hw * hw, c * 9))


def measure(case: Case, seconds: float, workdir: str) -> dict:
    compiled = load(cc.compile(case.model).save(os.path.join(workdir, case.name[:6].strip())),
                    threads=1)
    ours = compiled.bind_feeds(case.feeds)
    m, n, k = case.gemm
    rng = np.random.default_rng(1)
    a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    c = np.empty((m, n), np.float32)
    samples = interleave({"ours": ours, "numpy": lambda: np.matmul(a, b, out=c)},
                         warmup=3, min_runs=10, max_seconds=seconds)
    ms = {name: float(np.median(v)) for name, v in samples.items()}
    gflops = {name: case.flops / t / 1e6 for name, t in ms.items()}
    check = numerical_check(compiled.outputs_of(ours), ort_outputs(case.model, case.feeds))
    return {"case": case.name, "ours_gflops": gflops["ours"], "numpy_gflops": gflops["numpy"],
            "ratio": gflops["ours"] / gflops["numpy"], "allclose": check["allclose"]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(os.environ.get(k) != v for k, v in SINGLE_THREAD_ENV.items()):
        os.execve(sys.executable, [sys.executable, "-m", "bench.kernel_peaks", *argv],
                  {**os.environ, **SINGLE_THREAD_ENV})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timing per kernel")
    args = parser.parse_args(argv)
    print(header_line(describe()))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="tf-peaks-") as tmp:
        for case in (matmul_case(rng), conv_case(rng)):
            r = measure(case, args.seconds, tmp)
            print(f"{r['case']}: ours {r['ours_gflops']:.1f} GFLOP/s, numpy sgemm "
                  f"{r['numpy_gflops']:.1f} GFLOP/s on the same shape, one thread: "
                  f"{100 * r['ratio']:.0f}%" + ("" if r["allclose"] else " (OUTPUTS DIFFER FROM ORT)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
