"""Parallel loops: the same results with any thread count."""
import platform

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import make_model, rand

F = np.float32


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    nodes = [helper.make_node("Mul", ["x", "y"], ["a"]), helper.make_node("Tanh", ["a"], ["z"])]
    m = make_model(nodes, [("x", F, (4, 64, 513)), ("y", F, (513,))], [("z", F, (4, 64, 513))])
    d = tmp_path_factory.mktemp("threads")
    cc.compile(m).save(d)
    return d


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_elementwise_matches(artifact, threads):
    x, y = rand(4, 64, 513), rand(513, seed=1)
    out = cc.load(artifact, threads=threads).run({"x": x, "y": y})["z"]
    np.testing.assert_allclose(out, np.tanh(x * y), rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="MXCSR is x86's")
@pytest.mark.parametrize("threads", [1, 2])
def test_denormals_are_zero_while_the_model_runs_and_only_then(artifact, threads):
    x, y = np.full((4, 64, 513), 1e-20, F), np.full(513, 1e-20, F)  # products of 1e-40
    out = cc.load(artifact, threads=threads).run({"x": x, "y": y})["z"]
    assert not out.any()  # IEEE arithmetic: tanh(1e-40) = 1e-40
    assert (x * y).all()  # the caller's own arithmetic keeps its denormals


def _has_thread_pool(directory) -> bool:
    import subprocess
    symbols = subprocess.run(["nm", str(directory / "model.so")], capture_output=True,
                             text=True, check=True).stdout
    return " tf_parallel_for" in symbols


def test_library_has_the_thread_pool_only_when_used(artifact, tmp_path):
    assert _has_thread_pool(artifact)
    small = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, (8,))], [("y", F, (8,))])
    cc.compile(small).save(tmp_path)
    assert not _has_thread_pool(tmp_path)


def test_the_thread_count_can_change_between_runs(artifact):
    x, y = rand(4, 64, 513), rand(513, seed=1)
    for threads in (2, 3, 1, 4, 2):  # one library: its pool stops and starts its workers
        out = cc.load(artifact, threads=threads).run({"x": x, "y": y})["z"]
        np.testing.assert_allclose(out, np.tanh(x * y), rtol=1e-6, atol=1e-6)


# Run in a child: what it does to its threads (affinity, fork) must not reach pytest's.
CHILD = """
import os
import numpy as np
import compiler_core as cc
x = np.random.default_rng(0).random((4, 64, 513), dtype=np.float32)
y = np.random.default_rng(1).random(513, dtype=np.float32)
def check(model):
    assert np.allclose(model.run({"x": x, "y": y})["z"], np.tanh(x * y), rtol=1e-6, atol=1e-6)
"""


def _child(code: str):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", CHILD + code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_more_threads_than_cpus_share_them(artifact):
    """Every thread on one CPU: a worker runs only when the caller is off it, and a region
    must not wait for one that has not started (the caller takes its items)."""
    _child(f"""
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
model = cc.load({str(artifact)!r}, threads=4)
for _ in range(20):
    check(model)
""")


def test_a_forked_child_runs_the_parallel_loops_without_the_parents_workers(artifact):
    _child(f"""
model = cc.load({str(artifact)!r}, threads=2)
check(model)  # the workers are running
pid = os.fork()
if pid == 0:
    try:
        check(model)
        check(cc.load({str(artifact)!r}, threads=3))
    except BaseException:
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
check(model)
""")


def _one(op, inputs, out_shape, consts=(), **attrs):
    names = [n for n, _ in inputs] + [n for n, _ in consts]
    node = helper.make_node(op, names, ["out"], **attrs)
    return make_model([node], [(n, F, a.shape) for n, a in inputs], [("out", F, out_shape)],
                      consts)


ROW_KERNELS = {
    "softmax": lambda: _one("Softmax", [("x", rand(2, 12, 64, 64))], (2, 12, 64, 64), axis=-1),
    "layer norm": lambda: _one("LayerNormalization", [("x", rand(4, 128, 96))], (4, 128, 96),
                               [("g", rand(96, seed=1)), ("b", rand(96, seed=2))], axis=-1),
    "max pool, batch 2, wide rows": lambda: _one(
        "MaxPool", [("x", rand(2, 16, 40, 40))], (2, 16, 20, 20), kernel_shape=[3, 3],
        strides=[2, 2], pads=[1, 1, 1, 1]),
    "average pool": lambda: _one("AveragePool", [("x", rand(2, 16, 40, 40))], (2, 16, 38, 38),
                                 kernel_shape=[3, 3]),
    "global pool": lambda: _one("GlobalAveragePool", [("x", rand(2, 64, 30, 30))], (2, 64, 1, 1)),
    "local response norm": lambda: _one("LRN", [("x", rand(1, 64, 28, 28))], (1, 64, 28, 28),
                                        size=5, alpha=1e-4, beta=0.75, bias=1.0),
    "reduce": lambda: _one("ReduceMean", [("x", rand(8, 64, 100))], (8, 64, 1), axes=[2]),
    "transpose 2d, tiled": lambda: _one("Transpose", [("x", rand(300, 257))], (257, 300),
                                        perm=[1, 0]),
    "transpose 4d": lambda: _one("Transpose", [("x", rand(2, 64, 12, 32))], (2, 12, 64, 32),
                                 perm=[0, 2, 1, 3]),
    "depthwise 5x5 on 7x7 planes": lambda: _one(
        "Conv", [("x", rand(1, 672, 7, 7))], (1, 672, 7, 7), [("w", rand(672, 1, 5, 5, seed=1))],
        group=672, kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
    "batched matmul": lambda: _one("MatMul", [("a", rand(2, 12, 64, 32)),
                                              ("b", rand(2, 12, 32, 64, seed=1))], (2, 12, 64, 64)),
}


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_row_parallel_kernels_match_onnxruntime_at_two_threads(kernel, tmp_path):
    from .helpers import ort_run
    model = ROW_KERNELS[kernel]()
    feeds = {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=7)
             for i in model.graph.input}
    cc.compile(model).save(tmp_path)
    assert _has_thread_pool(tmp_path), "big enough to run on several threads"
    one, two = (cc.load(tmp_path, threads=t).run(feeds)["out"] for t in (1, 2))
    expected = ort_run(model, feeds)["out"]
    np.testing.assert_allclose(two, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(one, two)


def test_a_bound_call_keeps_its_model_alive(artifact):
    """The benchmark path: the call alone must keep the library and the arena alive."""
    import gc
    import weakref
    model = cc.load(artifact, threads=2)
    call = model.bind_feeds({"x": rand(4, 64, 513), "y": rand(513, seed=1)})
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is not None
    call()
    x, y = call.buffers[0]
    np.testing.assert_allclose(call.buffers[1][0], np.tanh(x * y), rtol=1e-6, atol=1e-6)
