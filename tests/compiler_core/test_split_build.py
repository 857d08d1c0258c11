"""A model's code built on two cores (codegen/split_build.py): two objects, one library that
computes what one module did, one thread count for both."""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core import driver
from compiler_core.codegen import split_build
from compiler_core.codegen.split_build import build_objects, half_by_size, share_module
from compiler_core.ir.loops import KernelBuilder

from .helpers import make_model, rand


def _kernel(name: str, statements: int):
    kb = KernelBuilder(name)
    out = kb.buf("out", np.float32, (statements,))
    for k in range(statements):
        kb.store_flat(out, k, 1.0)
    return kb.build()


def test_the_shares_are_about_even_by_statements():
    kernels = [_kernel(f"k{n}", n) for n in (40, 30, 20, 10, 10, 5, 5)]
    apart = half_by_size(kernels)
    moved = sum(len(k.body) for k in apart)
    assert abs(2 * moved - 120) <= 40  # within the biggest kernel of even
    assert 0 < len(apart) < len(kernels)


def test_a_share_reads_the_thread_count_the_entry_points_define():
    kb = KernelBuilder("tiles")
    out = kb.buf("out", np.float32, (64,))
    with kb.loop(64, kind="parallel") as i:
        kb.store_flat(out, i, 2.0)
    text = str(share_module("m", "x86_64-unknown-linux-gnu", [kb.build()]))
    assert '@"tf_num_threads" = external hidden global i32' in text
    assert 'define hidden void @"tiles"' in text


def _two_conv_model():
    c = 32
    return make_model(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Conv", ["r", "w2", "b2"], ["s"], pads=[1, 1, 1, 1]),
         helper.make_node("Sigmoid", ["s"], ["g"]),
         helper.make_node("GlobalAveragePool", ["g"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1),
         helper.make_node("Softmax", ["y"], ["z"])],
        [("x", np.float32, [1, c, 28, 28])], [("z", np.float32, None)],
        [("w1", rand(c, c, 3, 3, seed=1)), ("b1", rand(c, seed=2)),
         ("w2", rand(c, c, 3, 3, seed=3)), ("b2", rand(c, seed=4)),
         ("wd", rand(10, c, seed=5)), ("bd", rand(10, seed=6))])


def _onnx_runtime(model, x):
    import onnxruntime as ort
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: one module")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_model_built_in_two_objects_computes_what_onnx_runtime_does(monkeypatch, threads):
    built = []
    monkeypatch.setattr(driver, "build_objects",
                        lambda *args: built.append(build_objects(*args)) or built[-1])
    model, x = _two_conv_model(), rand(1, 32, 28, 28, seed=7)
    loaded = cc.compile(model).load(threads=threads)
    assert len(built[0][0]) == 2
    np.testing.assert_allclose(loaded.run({"x": x})["z"], _onnx_runtime(model, x), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: one module")
def test_without_a_process_to_spare_both_shares_are_built_here(monkeypatch):
    def no_fork(build):
        raise OSError("Resource temporarily unavailable")
    monkeypatch.setattr(split_build, "fork_and_run", no_fork)
    model, x = _two_conv_model(), rand(1, 32, 28, 28, seed=7)
    got = cc.compile(model).load().run({"x": x})["z"]
    np.testing.assert_allclose(got, _onnx_runtime(model, x), rtol=1e-4, atol=1e-5)
