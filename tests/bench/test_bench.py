"""`make bench` end to end on the two small sampling nets, and its table arithmetic."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench import baselines, kernel_peaks, kernel_report, machine, table
from bench.machine import describe, header_line, vector_isa
from bench.models import main, parse_args
from tests.models import catalog


def test_bench_runs_both_thread_counts_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["--filter", "wavernn", "--threads", "2,1", "--seconds", "0.2", "--kernels",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [(r["model"], r["threads"]) for r in rows] == [
        ("wavernn", 1), ("wavernn", 2), ("wavernn_sparse80", 1), ("wavernn_sparse80", 2)]
    assert all(r["allclose"] and r["speedup_ort"] > 0 and r["compile_s"] > 0 for r in rows)
    assert rows[0]["scaling"] is None and rows[1]["scaling"] == pytest.approx(
        rows[0]["ours_ms"] / rows[1]["ours_ms"])
    # the one-step GRU runs as products (PackedGemm) and a gates kernel
    top = max(rows[0]["kernels"], key=lambda k: k["flops"])
    assert top["gflops"] > 0 and any("gru" in name for name in top["onnx_nodes"]), top
    sparse = max(rows[2]["kernels"], key=lambda k: k["flops"])
    assert sparse["op"] == "SparseGemm" and sparse["gflops"] > 1, sparse
    assert report["machine"]["isa"] in ("AVX2", "AVX-512") and report["sgemm_peak_gflops"] > 1
    assert [(m["group"], m["threads"]) for m in report["geomeans"]] == [("own models", 1),
                                                                       ("own models", 2)]
    printed = capsys.readouterr().out
    assert "PackedGemm" in printed and "geomean own models (2)" in printed


def test_geometric_means_per_group_and_thread_count():
    rows = [{"group": "g", "threads": 1, "speedup_ort": 2.0, "speedup_openvino": None,
             "speedup_best": 2.0, "scaling": None},
            {"group": "g", "threads": 1, "speedup_ort": 0.5, "speedup_openvino": None,
             "speedup_best": 0.5, "scaling": None}]
    [mean] = table.group_means(rows, ["g", "h"], [1, 2])
    assert mean["speedup_ort"] == pytest.approx(1.0) and mean["speedup_openvino"] is None
    assert "geomean g (2)" in table.format_mean(mean)


def test_bad_thread_list_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--threads", "one"])


def test_vector_isa_names():
    assert vector_isa("+avx,+avx2,+fma") == "AVX2"
    assert vector_isa("+avx2,+avx512f") == "AVX-512"
    assert vector_isa("-avx2,-avx512f") == "SSE"


def test_bench_with_reduced_weights_names_them(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--filter", "wavernn_sparse", "--threads", "1", "--seconds", "0.2",
                 "--weight-dtype", "float16", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["model"] == "wavernn_sparse80[float16]" and 0 < row["max_abs_err"] < 1e-2
    with pytest.raises(SystemExit):
        parse_args(["--weight-dtype", "bfloat16"])


def test_kernel_peaks_time_correct_kernels_against_numpy(tmp_path):
    rng = np.random.default_rng(0)
    for case in (kernel_peaks.matmul_case(rng), kernel_peaks.conv_case(rng)):
        r = kernel_peaks.measure(case, 0.1, str(tmp_path))
        assert r["allclose"] and r["ours_gflops"] > 0 and r["numpy_gflops"] > 0


def test_tuning_bench_times_tuned_untuned_and_onnxruntime(tmp_path, capsys, monkeypatch):
    from bench import suite, tuning

    # the dense model alone (the filter also takes its sparse twin): 41.7 -> 23.2 s on Zen 5
    monkeypatch.setattr(tuning, "bench_models", lambda words: suite.bench_models(words)[:1])
    records, out = tmp_path / "records.jsonl", tmp_path / "tuning.json"
    args = ["--filter", "wavernn", "--tune-seconds", "2", "--seconds", "0.3",
            "--records", str(records), "--json", str(out)]
    assert tuning.main(args + ["--curve"]) == 0
    dense = json.loads(out.read_text())[0]
    assert dense["model"] == "wavernn" and dense["trials"] > 0 and dense["same_outputs"]
    assert dense["untuned_ms"] > 0 and dense["tuned_ms"] > 0 and dense["ort_ms"] > 0
    assert 0 < dense["tuner_s"] <= dense["tune_s"]  # the tuner's share of the compile
    printed = capsys.readouterr().out
    assert "estimate" in printed and "wavernn_sparse80" not in printed
    assert tuning.main(args) == 0  # again with its records: what was tuned is reused
    again = json.loads(out.read_text())[0]
    assert again["reused"] >= dense["tuned_kernels"] > 0
    assert tuning.main(args + ["--reuse"]) == 0  # the records alone: nothing is measured
    reused = json.loads(out.read_text())[0]
    assert reused["trials"] == 0 and reused["reused"] >= again["reused"]
    assert reused["same_outputs"] and reused["tuned_ms"] > 0


def test_tuning_bench_reuse_needs_records(capsys):
    from bench import tuning

    with pytest.raises(SystemExit):
        tuning.parse_args(["--reuse"])
    assert "--reuse needs the --records" in capsys.readouterr().err


def test_every_bench_header_names_the_openvino_installed(monkeypatch):
    """fork_join, kernel_peaks and tuning said "OpenVINO not installed" beside an install."""
    monkeypatch.setattr(machine, "openvino_version", lambda: "2026.4.1")
    assert header_line(describe()).endswith("OpenVINO 2026.4.1")


def test_a_model_openvino_cannot_convert_keeps_the_other_baselines(monkeypatch, capsys):
    def refuse(path, threads, feeds):
        raise RuntimeError("Exception from core.cpp:84:\nOpConversionFailure: If")
    monkeypatch.setattr(baselines, "openvino_version", lambda: "2026.4.1")
    monkeypatch.setattr(baselines, "openvino_runner", refuse)
    model = catalog.model_path("wavernn")
    runners = baselines.baseline_runners(model, 1, catalog.feeds("wavernn"))
    assert set(runners) == {"ort"}
    runners["ort"]()
    assert f"OpenVINO cannot run {model.name}: Exception from core.cpp:84:" in \
        capsys.readouterr().err


def test_kernel_report_takes_each_kernels_median_run_after_calls_settle():
    """One disturbed run must not put a kernel at the top of the report; the profile waits
    for the model's calls to run at their usual speed (the last runtime timed may still
    spin its threads)."""
    class Loaded:
        meta = {"kernels": [{"name": "k0_Conv", "op": "Conv", "flops": 2e6},
                            {"name": "k1_Conv", "op": "Conv", "flops": 2e6}]}
        events = []

        def bind_feeds(self, feeds):
            return lambda: self.events.append("call")

        def profile_runs(self, feeds, runs):
            self.events.append(("profile", runs))
            times = np.array([[0.2, 0.1]] * runs)
            times[2, 1] = 3.0  # one run in which k1 was disturbed
            return times

    rows = kernel_report.kernel_rows(Loaded(), {})
    assert [r["ms"] for r in rows] == [0.2, 0.1] and rows[1]["gflops"] == pytest.approx(20)
    assert Loaded.events[-1] == ("profile", kernel_report.PROFILE_RUNS)
    assert Loaded.events[:-1] and set(Loaded.events[:-1]) == {"call"}
