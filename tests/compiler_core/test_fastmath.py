"""Measured error of the vectorised float32 transcendentals (kernels/fastmath.py), through
the whole compiler, against float64 numpy."""
import math
import platform

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import make_model

F = np.float32
N = 1 << 16
erf64 = np.vectorize(math.erf)


def run(op, x):
    m = make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, x.shape)], [("y", F, x.shape)])
    art = cc.compile(m)
    assert any(k["op"] in (op, "Fused") for k in art.meta["kernels"])
    return art.run({"x": x})["y"]


def sample(lo, hi, log_scale=False):
    rng = np.random.default_rng(0)
    if log_scale:
        return np.exp(rng.uniform(math.log(lo), math.log(hi), N)).astype(F)
    x = rng.uniform(lo, hi, N).astype(F)
    x[:2000] = np.linspace(-0.3, 0.3, 2000)  # the small-argument branches
    return x


@pytest.mark.parametrize("op,ref,lo,hi,log_scale,bound,relative", [
    ("Exp", np.exp, -87, 88, False, 1.2e-7, True),
    ("Log", np.log, 1e-30, 1e30, True, 3e-7, True),
    ("Tanh", np.tanh, -20, 20, False, 2e-7, False),
    ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)), -30, 30, False, 2e-7, False),
    ("Erf", erf64, -6, 6, False, 6e-7, False),
])
def test_error_bound(op, ref, lo, hi, log_scale, bound, relative):
    x = sample(lo, hi, log_scale)
    got, want = run(op, x).astype(np.float64), ref(x.astype(np.float64))
    err = np.abs(got - want) / (np.abs(want) if relative else 1)
    assert err.max() < bound, f"{op}: max {'rel' if relative else 'abs'} error {err.max():.3g}"


def test_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0, 1e-40], F)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run("Exp", x), np.exp(x), atol=1e-37)
        logs = run("Log", np.abs(x))
        np.testing.assert_array_equal(logs[:5], np.log(np.abs(x[:5])))
        assert np.isnan(run("Log", np.array([-1.0], F)))[0]
        if platform.machine() == "x86_64":  # a denormal reads as zero (codegen/denormals.py)
            assert logs[7] == -np.inf
        else:
            np.testing.assert_allclose(logs[7], np.log(np.float64(1e-40)), rtol=1e-3)
    np.testing.assert_array_equal(run("Tanh", x)[[2, 3, 5, 6]], [1, -1, 1, -1])
    np.testing.assert_array_equal(run("Sigmoid", x)[[2, 3]], [1, 0])
    assert np.isnan(run("Tanh", x)[4]) and np.isnan(run("Erf", x)[4])
