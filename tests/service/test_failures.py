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

def faulty(fault: str) -> dict:
    """Settings that make the sandboxed benchmark child misbehave (tests/service/fault_child.py)."""
    return {"SANDBOX_CHILD_MODULE": "tests.service.fault_child",
            "SANDBOX_CHILD_ENV": {"TF_FAULT": fault}}


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


def test_benchmark_child_crash_fails_the_job_and_not_the_worker(submit):
    with override_settings(**faulty("crash")):
        job = run(submit())
    assert_failed(job, "benchmark", "SIGSEGV", "segmentation fault")
    assert "benchmark output" in job.log or "SIGSEGV" in job.log


def test_benchmark_child_hang_hits_the_wall_time_limit(submit):
    started = time.monotonic()
    with override_settings(SANDBOX_BENCH_TIMEOUT=2, **faulty("hang")):
        job = run(submit())
    assert_failed(job, "wall-time limit of 2 s")
    assert time.monotonic() - started < 60


def test_benchmark_child_over_memory_limit(submit):
    with override_settings(SANDBOX_MEMORY_MB=1200, **faulty("oom")):
        job = run(submit())
    assert_failed(job, "memory")


def test_storage_down_during_upload_past_the_patience(submit, monkeypatch):
    real_package = pipeline.package
    dead = override_settings(S3_ENDPOINT_URL="http://127.0.0.1:9")

    def package_then_lose_storage(*args):
        files = real_package(*args)
        dead.enable()  # storage goes away between packaging and uploading
        return files
    monkeypatch.setattr(pipeline, "package", package_then_lose_storage)
    job_id = submit()
    with override_settings(JOB_STORAGE_PATIENCE=2):  # enclosing `dead`, which it outlives
        try:
            job = run(job_id)
        finally:
            dead.disable()
    assert_failed(job, "upload failed", "after 2 attempt(s)", "submitted again")
    assert job.stage == "upload"
    assert not Artifact.objects.filter(job=job).exists()


def test_storage_outage_during_upload_is_waited_out(submit, monkeypatch):
    job_id = submit()
    real_put = pipeline.storage.put_file
    outage = {"calls": 0}

    def flaky_put(*args, **kwargs):
        outage["calls"] += 1
        if outage["calls"] <= 3:  # storage down for the first few tries
            raise pipeline.StorageError("object storage is unreachable")
        return real_put(*args, **kwargs)
    monkeypatch.setattr(pipeline.storage, "put_file", flaky_put)
    job = run(job_id)
    assert job.state == "succeeded", job.log
    assert "storage unavailable during the upload" in job.log
    assert Artifact.objects.filter(job=job).count() >= 5


def test_cancel_stops_a_running_job(submit, api, monkeypatch):
    job_id = submit()
    with override_settings(SANDBOX_BENCH_TIMEOUT=120, **faulty("hang")):
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


def test_reaper_requeues_jobs_whose_worker_died(submit, monkeypatch):
    sent = []
    monkeypatch.setattr("webapp.jobs.services.send", sent.append)
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(
        state="running", stage="build", worker="gone@host", attempts=1,
        heartbeat_at=timezone.now() - timedelta(hours=1))
    fresh = submit()
    CompileJob.objects.filter(pk=fresh).update(state="running", heartbeat_at=timezone.now())
    assert reaper.reap() == 1
    job = CompileJob.objects.get(pk=job_id)
    assert job.state == "queued" and [j.pk for j in sent] == [job.pk]
    assert "stopped responding during the build stage" in job.log and "re-queued" in job.log
    assert CompileJob.objects.get(pk=fresh).state == "running"
    assert run(job_id).state == "succeeded"  # the re-sent task runs it to the end


def test_reaper_fails_a_job_whose_attempts_are_used_up(submit, monkeypatch):
    monkeypatch.setattr("webapp.jobs.services.send", lambda job: None)
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(
        state="running", stage="benchmark", worker="gone@host", attempts=3,
        heartbeat_at=timezone.now() - timedelta(hours=1))
    assert reaper.reap() == 1
    assert_failed(CompileJob.objects.get(pk=job_id), "stopped responding", "benchmark",
                  "attempt 3 of 3")


def test_reaper_resends_queued_jobs_whose_message_was_lost(submit, monkeypatch):
    sent = []
    monkeypatch.setattr("webapp.jobs.services.send", sent.append)
    old, recent = submit(), submit()
    CompileJob.objects.filter(pk=old).update(sent_at=timezone.now() - timedelta(hours=1))
    CompileJob.objects.filter(pk=recent).update(sent_at=timezone.now())
    reaper.reap()
    assert [str(j.pk) for j in sent] == [old]
    assert "no worker started it" in CompileJob.objects.get(pk=old).log


def test_repeated_worker_deaths_end_the_job(submit):
    job_id = submit()
    CompileJob.objects.filter(pk=job_id).update(state="running", attempts=3, stage="benchmark",
                                                heartbeat_at=timezone.now() - timedelta(hours=1))
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

    from webapp.celery import app

    def refuse(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(app, "send_task", refuse)
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


def test_a_bucket_someone_made_meanwhile_is_ours(monkeypatch):
    """HeadBucket 404, then CreateBucket BucketAlreadyOwnedByYou (SeaweedFS on a loaded
    host): the bucket is there and ours, so ensure_bucket succeeds."""
    from botocore.stub import Stubber
    from django.conf import settings

    from webapp.jobs import storage
    fresh = storage._client(settings.S3_ENDPOINT_URL)
    monkeypatch.setattr(storage, "client", lambda: fresh)
    with Stubber(fresh) as stub:
        stub.add_client_error("head_bucket", "404", http_status_code=404)
        stub.add_client_error("create_bucket", "BucketAlreadyOwnedByYou", http_status_code=409)
        storage.ensure_bucket()
        stub.assert_no_pending_responses()
        stub.add_client_error("head_bucket", "404", http_status_code=404)
        stub.add_client_error("create_bucket", "AccessDenied", http_status_code=403)
        with pytest.raises(storage.StorageError, match="AccessDenied"):
            storage.ensure_bucket()
