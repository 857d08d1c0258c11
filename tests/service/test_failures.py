"""Failure paths end with a clear reason and nothing left running; the worker survives."""
import threading
import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.service import onnx_models
from webapp.jobs.models import Artifact, CompileJob
from workers import pipeline, reaper

FAULTY = {"SANDBOX_CHILD_MODULE": "tests.service.fault_child"}


@pytest.fixture
def submit(api, s3, no_enqueue):
    def make(data=None, **fields):
        model = api.upload(data or onnx_models.elementwise(symbolic=False)).json()
        resp = api.post_json("/api/v1/jobs", {"model": model["id"], **fields})
        assert resp.status_code == 201, resp.content
        return resp.json()["id"]
    return make


def run(job_id) -> CompileJob:
    pipeline.run_job(job_id, worker="test-worker")
    return CompileJob.objects.get(pk=job_id)


def assert_failed(job, *words):
    assert job.state == "failed", (job.state, job.error)
    assert job.finished_at is not None
    for word in words:
        assert word in job.error, job.error
    assert not Artifact.objects.filter(job=job).exists()


def test_unsupported_ops_fail_validation_with_the_op_list(submit):
    job = run(submit(onnx_models.unsupported()))
    assert_failed(job, "cannot be compiled", "TfIdfVectorizer")
    assert job.stage == "validate"


def test_benchmark_child_crash_fails_the_job_and_not_the_worker(submit, monkeypatch):
    monkeypatch.setenv("TF_FAULT", "crash")
    with override_settings(**FAULTY):
        job = run(submit())
    assert_failed(job, "benchmark", "SIGSEGV", "segmentation fault")
    assert "benchmark output" in job.log or "SIGSEGV" in job.log


def test_benchmark_child_hang_hits_the_wall_time_limit(submit, monkeypatch):
    monkeypatch.setenv("TF_FAULT", "hang")
    started = time.monotonic()
    with override_settings(SANDBOX_BENCH_TIMEOUT=2, **FAULTY):
        job = run(submit())
    assert_failed(job, "wall-time limit of 2 s")
    assert time.monotonic() - started < 60


def test_benchmark_child_over_memory_limit(submit, monkeypatch):
    monkeypatch.setenv("TF_FAULT", "oom")
    with override_settings(SANDBOX_MEMORY_MB=1200, **FAULTY):
        job = run(submit())
    assert_failed(job, "memory")


def test_storage_down_during_upload(submit, monkeypatch):
    real_package = pipeline.package
    dead = override_settings(S3_ENDPOINT_URL="http://127.0.0.1:9")

    def package_then_lose_storage(*args):
        files = real_package(*args)
        dead.enable()  # storage goes away between packaging and uploading
        return files
    monkeypatch.setattr(pipeline, "package", package_then_lose_storage)
    try:
        job = run(submit())
    finally:
        dead.disable()
    assert_failed(job, "upload failed", "after 2 attempt(s)", "submitted again")
    assert job.stage == "upload"


def test_cancel_stops_a_running_job(submit, api, monkeypatch):
    monkeypatch.setenv("TF_FAULT", "hang")
    job_id = submit()
    with override_settings(SANDBOX_BENCH_TIMEOUT=120, **FAULTY):
        thread = threading.Thread(target=pipeline.run_job, args=(job_id, "test-worker"))
        thread.start()
        deadline = time.monotonic() + 60
        while CompileJob.objects.get(pk=job_id).stage != "benchmark":
            assert time.monotonic() < deadline, "the job never reached the benchmark"
            time.sleep(0.2)
        assert api.post_json(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
        thread.join(30)
    assert not thread.is_alive()
    job = CompileJob.objects.get(pk=job_id)
    assert job.state == "cancelled" and "cancelled" in job.error


def test_reaper_fails_jobs_whose_worker_died(submit):
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(
        state="running", stage="build", worker="gone@host",
        heartbeat_at=timezone.now() - timedelta(hours=1))
    fresh = submit()
    CompileJob.objects.filter(pk=fresh).update(state="running", heartbeat_at=timezone.now())
    assert reaper.reap() == 1
    job = CompileJob.objects.get(pk=job_id)
    assert_failed(job, "stopped responding", "build", "submit the job again")
    assert CompileJob.objects.get(pk=fresh).state == "running"


def test_repeated_worker_deaths_end_the_job(submit):
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(state="running", attempts=3, stage="benchmark")
    job = run(job_id)
    assert_failed(job, "started 3 times", "benchmark")


def test_duplicate_delivery_leaves_a_live_job_alone(submit):
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(state="running", worker="a@host", attempts=1,
                                                stage="build", heartbeat_at=timezone.now())
    job = run(job_id)  # another worker ("test-worker") receives the same task
    assert job.state == "running" and job.worker == "a@host" and job.attempts == 1


def test_broker_down_at_submit_is_503_and_the_job_fails(api, uploaded, monkeypatch):
    from kombu.exceptions import OperationalError

    from workers.tasks import compile_job

    def refuse(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(compile_job, "apply_async", refuse)
    resp = api.post_json("/api/v1/jobs", {"model": uploaded["id"], "input_shapes": {"x": [1, 256]}})
    assert resp.status_code == 503 and "queue" in resp.json()["error"]
    job = CompileJob.objects.get()
    assert job.state == "failed" and "submit the job again" in job.error


def test_soft_time_limit_fails_the_job_with_the_limit(submit, monkeypatch):
    from celery.exceptions import SoftTimeLimitExceeded

    def too_slow(run, *args):
        run.enter("optimize")
        raise SoftTimeLimitExceeded()
    monkeypatch.setattr(pipeline, "compile_stage", too_slow)
    job = run(submit())
    assert_failed(job, "time limit", "optimize")
