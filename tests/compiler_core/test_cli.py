import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from .helpers import make_model

F = np.float32
ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "compiler_core", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    m = make_model([helper.make_node("Mul", ["x", "x"], ["y"])], [("x", F, ("n", 8))],
                   [("y", F, None)])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    np.savez(d / "feeds.npz", x=np.arange(24, dtype=F).reshape(3, 8))
    return d


def test_compile_run_bench(workdir):
    r = cli("compile", "m.onnx", "-o", "out", "--input", "x=3x8", cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (workdir / "out").iterdir()} >= {"model.so", "model.h", "meta.json",
                                                             "README.txt"}
    r = cli("run", "out", "--inputs", "feeds.npz", "--out", "o.npz", cwd=workdir)
    assert r.returncode == 0, r.stderr
    x = np.arange(24, dtype=F).reshape(3, 8)
    np.testing.assert_array_equal(np.load(workdir / "o.npz")["y"], x * x)
    r = cli("bench", "out", "--model", "m.onnx", "--inputs", "feeds.npz", "--json", "--runs", "5",
            "--seconds", "0.2", cwd=workdir)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    for side in ("compiled", "onnxruntime"):
        assert set(result[side]) == {"median_ms", "mean_ms", "p90_ms", "p99_ms", "min_ms",
                                     "max_ms", "std_ms", "runs"}
        assert result[side]["runs"] >= 5
    assert result["allclose"] is True and result["max_abs_err"] == 0
    assert result["speedup"] > 0


def test_inspect(workdir):
    r = cli("inspect", "m.onnx", "--json", cwd=workdir)
    info = json.loads(r.stdout)
    assert info["inputs"][0]["symbolic_dims"] == ["n"] and info["ops"] == {"Mul": 1}


@pytest.mark.parametrize("args,needle", [
    (("compile", "m.onnx", "-o", "o2"), "symbolic dimensions ['n']"),
    (("compile", "m.onnx", "-o", "o2", "--input", "x=3by8"), "expected NAME=DIMS"),
    (("compile", "missing.onnx", "-o", "o2"), "does not exist"),
    (("run", "nowhere", "--inputs", "feeds.npz", "--out", "o.npz"), "not a Tensorforge artifact"),
])
def test_bad_input_exits_2_with_one_line(workdir, args, needle):
    r = cli(*args, cwd=workdir)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr and "Traceback" not in r.stderr
