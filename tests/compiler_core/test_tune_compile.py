"""cc.compile(..., tuning=...) and the CLI: meta.json's tuning summary, records reused by a
second compile (0 measurements) and by another model with the same kernel, outputs unchanged,
and `records export|import|merge`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import make_model, rand

ROOT = Path(__file__).resolve().parents[2]


def dense_model(extra_relu: bool = False):
    nodes = [helper.make_node("MatMul", ["a", "w"], ["y" if not extra_relu else "m"])]
    if extra_relu:
        nodes.append(helper.make_node("Relu", ["m"], ["y"]))
    return make_model(nodes, [("a", np.float32, [24, 96])], [("y", np.float32, [24, 80])],
                      [("w", rand(96, 80, seed=1))])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    records = tmp_path_factory.mktemp("tune") / "records.jsonl"
    art = cc.compile(dense_model(), tuning={"trials": 12, "records": str(records)})
    return art, records


def test_meta_reports_the_tuning(tuned):
    art, records = tuned
    t = art.meta["tuning"]
    # 12, up to 3 head-to-heads of the best against the default, and the model check
    assert t["enabled"] and 12 <= t["trials"] <= 20 and t["trials"] % 2 == 0
    assert t["model_check"] is None or t["model_check"]["checked"]
    assert t["tuned_kernels"] == 1 and t["reused"] == 0
    (k,) = t["kernels"]
    assert k["op"] == "PackedGemm" and k["default_ms"] > 0 and k["chosen_ms"] <= k["default_ms"]
    assert len(records.read_text().splitlines()) == t["trials"]
    a = rand(24, 96)
    untuned = cc.compile(dense_model()).run({"a": a})["y"]
    np.testing.assert_allclose(art.run({"a": a})["y"], untuned, rtol=1e-4, atol=1e-4)


def test_same_records_make_no_new_measurements(tuned):
    art, records = tuned
    again = cc.compile(dense_model(), tuning={"trials": 12, "records": str(records)})
    t = again.meta["tuning"]
    assert t["trials"] == 0 and t["reused"] == 1
    assert t["kernels"][0]["schedule"] == art.meta["tuning"]["kernels"][0]["schedule"]


def test_another_model_with_the_same_kernel_starts_from_the_records(tuned):
    _, records = tuned
    other = cc.compile(dense_model(extra_relu=True), tuning={"records": str(records)})
    assert other.meta["tuning"]["reused"] == 0  # the fused ReLU makes it another kernel
    same = cc.compile(dense_model(), opt_level=2, tuning={"records": str(records)})
    assert same.meta["tuning"]["reused"] == 1


def test_bad_requests_say_what_to_fix(tmp_path):
    with pytest.raises(cc.CompileError, match="unknown tuning keys"):
        cc.compile(dense_model(), tuning={"trails": 3})
    with pytest.raises(cc.CompileError, match="trials must be"):
        cc.compile(dense_model(), tuning={"trials": -1})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workload": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: record lacks"):
        cc.compile(dense_model(), tuning={"records": str(bad)})


def cli(*args):
    return subprocess.run([sys.executable, "-m", "compiler_core", *map(str, args)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_records_export_import_merge_round_trip(tuned, tmp_path):
    _, records = tuned
    original = records.read_text().splitlines()
    target = json.loads(original[0])["target"]
    out = cli("records", "export", records, "-o", tmp_path / "x.jsonl", "--target", target)
    assert out.returncode == 0, out.stderr
    assert sorted((tmp_path / "x.jsonl").read_text().splitlines()) == sorted(original)
    assert "exported 0" in cli("records", "export", records, "-o", tmp_path / "none.jsonl",
                               "--target", "aarch64").stdout
    out = cli("records", "import", tmp_path / "store.jsonl", tmp_path / "x.jsonl", records)
    assert f"imported {len(original)} new records" in out.stdout
    out = cli("records", "merge", records, tmp_path / "store.jsonl", "-o", tmp_path / "m.jsonl")
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == len(original)
    (tmp_path / "broken.jsonl").write_text("not json\n")
    out = cli("records", "import", tmp_path / "store.jsonl", tmp_path / "broken.jsonl")
    assert out.returncode == 2 and "broken.jsonl:1: not JSON" in out.stderr


def test_cli_compile_tunes_and_reports(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(dense_model().SerializeToString())
    out = cli("compile", model, "-o", tmp_path / "art", "--tune-trials", 9,
              "--records", tmp_path / "r.jsonl")
    assert out.returncode == 0, out.stderr
    assert "1 kernels tuned" in out.stdout
    meta = json.loads((tmp_path / "art" / "meta.json").read_text())
    assert 9 <= meta["tuning"]["trials"] <= 17  # as in test_meta_reports_the_tuning
    assert f"tuning: {meta['tuning']['trials']} trials" in out.stdout
