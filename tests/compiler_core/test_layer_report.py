"""The per-ONNX-node report: attribution of kernel time, the roofline and the what-if math."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.analysis import machine_limits as ml
from compiler_core.analysis.layer_report import (attribute, format_layers, layer_report,
                                                 time_scale, ceilings)
from compiler_core.analysis.machine_limits import MachineLimits

from .helpers import make_model

ROOT = Path(__file__).resolve().parents[2]
MiB = 2 ** 20
# round figures so the expected speedups can be worked out by hand
LIMITS = MachineLimits("znver3", "AMD EPYC", peak_gflops=100.0,
                       bandwidth_gbps={"L2": 80.0, "L3": 40.0, "memory": 20.0},
                       cache_bytes={"L2": 512 * 1024, "L3": 32 * MiB})


def kernel(nodes, flops=0, weights=0, read=0, written=0):
    return {"name": "k", "op": "X", "onnx_nodes": nodes, "flops": flops, "bytes": weights + read + written,
            "weight_bytes": weights, "read_bytes": read, "written_bytes": written}


def layer(name, flops=0, weights=0, activations=0):
    return {"onnx_node": name, "flops": flops, "bytes": weights + activations,
            "weight_bytes": weights, "read_bytes": activations, "written_bytes": 0}


def fused_meta():
    """conv+relu fused in one kernel, a gemm split over two kernels, a pure copy."""
    return {"kernels": [kernel(["conv", "relu"], 1000, 400, 100, 100),
                        kernel(["gemm"], 600, 300, 10, 10), kernel(["gemm"], 400, 200, 10, 10),
                        kernel(["reshape_copy"], 0, 0, 50, 50)],
            "layers": [layer("conv", 990, 400, 200), layer("relu", 10, 0, 200),
                       layer("gemm", 1000, 500, 40), layer("reshape_copy", 0, 0, 100)],
            "stats": {"weights_bytes": 900, "arena_bytes": 1000}}


def test_attributed_times_sum_to_the_kernels_total():
    meta = fused_meta()
    times = [3.0, 1.0, 0.5, 0.25]
    nodes = attribute(meta, times)
    assert sum(n["ms"] for n in nodes.values()) == pytest.approx(sum(times))
    assert nodes["conv"]["ms"] == pytest.approx(3.0 * 0.99)  # split by FLOP share
    assert nodes["relu"]["ms"] == pytest.approx(3.0 * 0.01)
    assert nodes["gemm"]["ms"] == pytest.approx(1.5) and nodes["gemm"]["kernels"] == 2
    assert nodes["reshape_copy"]["ms"] == pytest.approx(0.25)  # no FLOPs: bytes decide
    assert nodes["conv"]["weight_bytes"] == 400 and nodes["relu"]["weight_bytes"] == 0
    report = layer_report(meta, [{"mean_ms": t} for t in times], LIMITS)
    assert report["total_ms"] == pytest.approx(4.75)
    assert sum(r["share"] for r in report["layers"]) == pytest.approx(1.0)
    assert [r["onnx_node"] for r in report["layers"]] == ["conv", "gemm", "reshape_copy", "relu"]


def test_timings_from_another_artifact_are_refused():
    with pytest.raises(ValueError, match="another artifact"):
        attribute(fused_meta(), [1.0])


def node(flops, weights, activations, ms=1.0):
    return {"onnx_node": "n", "ms": ms, "flops": flops, "weight_bytes": weights,
            "activation_bytes": activations}


def test_memory_bound_layer_gains_by_bytes():
    now = ceilings({"stats": {}}, LIMITS, 1)  # an empty footprint: L2, 80 GB/s
    row = node(flops=2e6, weights=4e6, activations=0)  # 20 us compute, 50 us memory
    assert 1 / time_scale(row, "float16", now, now) == pytest.approx(2.0)
    assert 1 / time_scale(row, "int8", now, now) == pytest.approx(50 / 20)  # now compute-bound
    # 80% sparse: 0.2 * 1.125 of the bytes (10 us... 11.25 us) vs 4 us of compute
    assert 1 / time_scale(row, "sparse80", now, now) == pytest.approx(1 / (0.2 * 1.125))


def test_compute_bound_layer_gains_only_by_skipped_flops():
    now = ceilings({"stats": {}}, LIMITS, 1)
    row = node(flops=1e9, weights=1e6, activations=1e6)  # 10 ms compute, 25 us memory
    assert time_scale(row, "float16", now, now) == pytest.approx(1.0)
    assert time_scale(row, "int8", now, now) == pytest.approx(1.0)
    assert 1 / time_scale(row, "sparse90", now, now) == pytest.approx(10.0)
    assert time_scale(node(1e9, 0, 1e6), "int8", now, now) is None  # no weights: no what-if


def test_model_speedup_and_roofline_position():
    meta = {"kernels": [kernel(["fc"], 2_000_000, 4_000_000), kernel(["softmax"], 1000, 0, 8, 8)],
            "layers": [layer("fc", 2_000_000, 4_000_000), layer("softmax", 1000, 0, 16)],
            "stats": {"weights_bytes": 4_000_000, "arena_bytes": 0}}
    report = layer_report(meta, [{"mean_ms": 0.2}, {"mean_ms": 0.05}], LIMITS)
    assert report["bandwidth_level"] == "L3" and report["bandwidth_gbps"] == 40.0
    fc = report["layers"][0]
    assert fc["bound"] == "memory" and fc["gflops"] == pytest.approx(10.0)
    assert fc["roofline_pct"] == pytest.approx(100 * 0.1 / 0.2)  # 4 MB at 40 GB/s = 0.1 ms
    assert fc["what_if"]["float16"] == pytest.approx(2.0)
    assert fc["model_what_if"]["float16"] == pytest.approx(0.25 / (0.25 - 0.1))
    # int8 everywhere: 1 MB of weights fits L3 still; 90% sparse: 0.45 MB fits L2
    assert report["all_layers"]["int8"]["bandwidth_level"] == "L3"
    assert report["all_layers"]["sparse90"]["bandwidth_level"] == "L2"
    assert report["all_layers"]["sparse90"]["speedup"] > fc["model_what_if"]["sparse90"]


def test_two_threads_double_the_peak_and_private_cache_bandwidth():
    one, two = (ceilings({"stats": {"weights_bytes": 1000}}, LIMITS, t) for t in (1, 2))
    assert two["peak_flops"] == 2 * one["peak_flops"] and two["bandwidth"] == 2 * one["bandwidth"]
    big = {"stats": {"weights_bytes": 100 * MiB}}
    assert ceilings(big, LIMITS, 2)["bandwidth"] == ceilings(big, LIMITS, 1)["bandwidth"]


def test_cache_sizes_read_from_sysfs(tmp_path):
    for k, (level, kind, size) in enumerate([(1, "Data", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{k}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert ml.cache_sizes(tmp_path) == {"L2": MiB, "L3": 32 * MiB}


def test_limits_are_cached(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ml, "measure", lambda: calls.append(1) or LIMITS)
    assert ml.machine_limits(tmp_path) == LIMITS
    assert ml.machine_limits(tmp_path) == LIMITS and len(calls) == 1
    ml.machine_limits(tmp_path, remeasure=True)
    assert len(calls) == 2


@pytest.mark.slow
def test_measured_limits_are_plausible():
    limits = ml.measure()
    assert 5 < limits.peak_gflops < 2000
    assert limits.bandwidth_gbps["L2"] > limits.bandwidth_gbps["memory"] > 1


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("layers")
    rng = np.random.default_rng(0)
    m = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="fc", transB=1),
                    helper.make_node("Relu", ["g"], ["r"], name="relu"),
                    helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)],
                   [("x", np.float32, (1, 64))], [("y", np.float32, None)],
                   [("w", rng.standard_normal((128, 64)).astype(np.float32)),
                    ("b", np.zeros(128, np.float32))])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    cc.compile(m).save(d / "out")
    return d


def test_unnamed_onnx_nodes_are_reported_apart(tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                    helper.make_node("Relu", ["b"], ["y"])],
                   [("x", np.float32, (4, 8))], [("y", np.float32, None)])
    layers = cc.compile(m, opt_level=0).meta["layers"]
    assert [(layer["onnx_node"], layer["op"]) for layer in layers] == [
        ("Relu#1", "Relu"), ("Neg#1", "Neg"), ("Relu#2", "Relu")]


def test_cli_bench_layers_prints_a_sorted_table(artifact, tmp_path):
    # limits cached beforehand, as a second run on this machine finds them
    path = ml.machine_limits_path(tmp_path)
    path.write_text(json.dumps(LIMITS.as_dict()))
    r = subprocess.run([sys.executable, "-m", "compiler_core", "bench", "out", "--model", "m.onnx",
                        "--layers", "--runs", "3", "--seconds", "0.1"], cwd=artifact,
                       capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TENSORFORGE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "peak 100.0 GFLOP/s" in lines[0] and "L2" in lines[0]
    header = next(k for k, line in enumerate(lines) if line.startswith("onnx node"))
    rows = [line.split() for line in lines[header + 1:header + 4]]
    assert {(row[0], row[1]) for row in rows} == {("fc", "Gemm"), ("relu", "Relu"),
                                                  ("softmax", "Softmax")}
    times = [float(row[2]) for row in rows]
    assert times == sorted(times, reverse=True)
    assert "int8" in lines[header] and lines[-1].startswith("speedup")


def test_format_layers_lists_the_top_and_the_rest():
    meta = fused_meta()
    report = layer_report(meta, [{"mean_ms": t} for t in (3.0, 1.0, 0.5, 0.25)], LIMITS)
    text = format_layers(report, top=2)
    assert text.splitlines()[3].split()[:2] == ["conv", "?"]  # no op in this meta
    assert "... 2 more nodes, 0.2800 ms" in text
    assert "all layers at once: sparse80" in text
