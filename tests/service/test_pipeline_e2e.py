"""The whole pipeline against real parts: a Celery worker process, SeaweedFS over S3,
PostgreSQL and Redis when they answer, a real compile; then the package runs with cc.load."""
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import urllib.request
from datetime import timedelta

import numpy as np
import onnxruntime as ort
import pytest

from django.utils import timezone

import compiler_core as cc
from tests.service import onnx_models
from webapp.jobs.models import Artifact, BenchmarkResult


def wait_for(api, job_id, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job still {job['state']} after {timeout} s: {job}")


def test_upload_compile_benchmark_download_run(api, worker, tmp_path):
    data = onnx_models.elementwise()
    model = api.upload(data, "elementwise.onnx").json()
    resp = api.post_json("/api/v1/jobs", {"model": model["id"], "input_shapes": {"x": [8, 256]}})
    assert resp.status_code == 201
    job = wait_for(api, resp.json()["id"])
    assert job["state"] == "succeeded", job["error"]
    assert job["progress"] == 1 and job["attempts"] == 1 and job["error"] is None

    results = job["results"]
    for runtime in ("compiled", "onnxruntime"):
        for key in ("median_ms", "mean_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms"):
            assert results[runtime][key] > 0, (runtime, key)
        assert results[runtime]["runs"] >= 10
    assert results["speedup"] > 0 and results["allclose"] is True
    report = results["layer_report"]
    assert report["layers"] and report["peak_gflops"] > 0 and report["bandwidth_gbps"] > 0
    assert sum(r["ms"] for r in report["layers"]) == pytest.approx(report["total_ms"])
    assert report["total_ms"] == pytest.approx(sum(k["mean_ms"] for k in results["kernels"]))
    assert BenchmarkResult.objects.filter(job_id=job["id"]).count() == 2
    assert len(BenchmarkResult.objects.get(job_id=job["id"], runtime="compiled").samples_ms) >= 10

    names = {a["name"] for a in job["artifacts"]}
    assert {"package.tar.gz", "model.so", "model.h", "meta.json", "README.txt"} <= names
    package = next(a for a in job["artifacts"] if a["name"] == "package.tar.gz")
    location = api.get(f"/api/v1/jobs/{job['id']}/artifacts/package.tar.gz")["Location"]
    with urllib.request.urlopen(location, timeout=30) as r:  # presigned: no credentials
        blob = r.read()
    assert hashlib.sha256(blob).hexdigest() == package["sha256"]
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(tmp_path, filter="data")

    x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    got = cc.load(tmp_path).run({"x": x})["y"]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["inputs"][0]["shape"] == [8, 256]


def test_cli_client_against_the_live_server(live_server, worker, token, tmp_path):
    model_path = tmp_path / "m.onnx"
    model_path.write_bytes(onnx_models.elementwise())
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "webapp.client", "--url", live_server, "--token", token,
           "submit", str(model_path), "--input", "x=2x256", "--wait", "--download", str(out),
           "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "speedup" in done.stderr
    x = np.ones((2, 256), np.float32)
    assert cc.load(out).run({"x": x})["y"].shape == (2, 256)

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(onnx_models.unsupported())
    failed = subprocess.run(cmd[:7] + ["submit", str(bad), "--wait", "--quiet"],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1, failed.stderr
    assert "TfIdfVectorizer" in failed.stderr


def test_int8_weights_report_their_error_in_the_results(api, worker):
    model = api.upload(onnx_models.dense(), "dense.onnx").json()
    resp = api.post_json("/api/v1/jobs", {"model": model["id"], "weight_dtype": "int8"})
    assert resp.status_code == 201 and resp.json()["weight_dtype"] == "int8"
    job = wait_for(api, resp.json()["id"])
    assert job["state"] == "succeeded", job["error"]
    precision = job["results"]["weight_precision"]
    assert precision["weight_dtype"] == "int8" and precision["layers"][0]["weights"] == 64 * 32
    error = precision["accuracy"]["outputs"]["y"]
    assert 0 < error["max_abs_err"] and 0 < error["max_rel_err"] < 0.02
    assert precision["accuracy"]["inputs"] == "random (seed 0)"


def test_artifacts_not_duplicated_when_a_job_is_delivered_again(api, worker):
    """A worker that dies after uploading makes Celery redeliver; stages overwrite."""
    from webapp.jobs.models import CompileJob
    from workers import pipeline
    model = api.upload(onnx_models.elementwise(symbolic=False)).json()
    job_id = api.post_json("/api/v1/jobs", {"model": model["id"]}).json()["id"]
    assert wait_for(api, job_id)["state"] == "succeeded"
    first = dict(Artifact.objects.filter(job_id=job_id).values_list("name", "sha256"))
    # as if its worker died after uploading: still "running", heartbeat gone quiet
    CompileJob.objects.filter(pk=job_id).update(
        state="running", heartbeat_at=timezone.now() - timedelta(minutes=10))
    pipeline.run_job(job_id, worker="redelivered")
    job = CompileJob.objects.get(pk=job_id)
    assert job.state == "succeeded" and job.attempts == 2
    again = dict(Artifact.objects.filter(job_id=job_id).values_list("name", "sha256"))
    assert again.keys() == first.keys()
    assert again["model.so"] == first["model.so"]
    assert BenchmarkResult.objects.filter(job_id=job_id).count() == 2
    pipeline.run_job(job_id, worker="late")  # a terminal job is left alone
    assert CompileJob.objects.get(pk=job_id).attempts == 2


def test_tuning_job_shares_its_records_with_the_next_job(api, worker):
    from webapp.jobs.models import CompileJob, TuningRecord
    model = api.upload(onnx_models.dense(rows=16, inputs=64, units=40), "dense.onnx").json()

    def tuned_job():
        resp = api.post_json("/api/v1/jobs", {"model": model["id"], "tuning": {"trials": 9}})
        assert resp.status_code == 201, resp.json()
        job = wait_for(api, resp.json()["id"])
        assert job["state"] == "succeeded", job["error"]
        return CompileJob.objects.get(pk=job["id"])

    first = tuned_job()
    shared = TuningRecord.objects.filter(job=first).count()
    # the budget, the best timed again against the default, the model check
    assert 9 <= shared <= 17
    assert first.tuning_progress["trials"] == shared and len(first.tuning_progress["curve"]) >= 2
    assert f"{shared} new records shared" in first.log
    second = tuned_job()  # the same kernel: its records are reused, nothing is measured
    assert TuningRecord.objects.filter(job=second).count() == 0
    assert "0 new records shared" in second.log and second.tuning_progress is None
