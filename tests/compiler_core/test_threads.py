"""Parallel loops: the same results with any thread count."""
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


def _needs_libgomp(directory) -> bool:
    import subprocess
    deps = subprocess.run(["ldd", str(directory / "model.so")], capture_output=True, text=True)
    return "libgomp" in deps.stdout


def test_library_links_openmp_only_when_used(artifact, tmp_path):
    assert _needs_libgomp(artifact)
    small = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, (8,))], [("y", F, (8,))])
    cc.compile(small).save(tmp_path)
    assert not _needs_libgomp(tmp_path)
