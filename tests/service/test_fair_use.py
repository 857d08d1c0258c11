"""Fair use: per-user caps on active jobs and stored bytes, the upload rate, the tuning
budget and sign-in throttling. Each refusal is a 403 (quota) or 429 (rate) whose JSON error
names the limit and its value, and matches the published schema."""
import subprocess
import sys

import pytest
from django.test import Client, override_settings

from tests.service import onnx_models
from tests.service.contract import response_schema, violations
from webapp.jobs.models import Artifact, CompileJob
from webapp.jobs.ratelimit import wait_seconds

SHAPES = {"x": [4, 256]}


def submit(api, model_id, **fields):
    return api.post_json("/api/v1/jobs", {"model": model_id, "input_shapes": SHAPES, **fields})


def assert_refusal(api, resp, status, method, path, *words):
    assert resp.status_code == status, resp.content
    error = resp.json()["error"]
    for word in words:
        assert word in error, error
    spec = api.client.get("/api/v1/openapi.json").json()
    assert not violations(spec, response_schema(spec, method, path, status), resp.json())
    return error


# ---------------------------------------------------------------- active jobs

def test_active_jobs_are_capped_per_user(api, other_api, uploaded, no_enqueue):
    with override_settings(MAX_ACTIVE_JOBS=2):
        first = submit(api, uploaded["id"]).json()
        assert submit(api, uploaded["id"]).status_code == 201
        assert_refusal(api, submit(api, uploaded["id"]), 403, "POST", "/jobs",
                       "active job limit", "2 queued or running", "limit is 2",
                       "TENSORFORGE_MAX_ACTIVE_JOBS")
        other = other_api.upload(onnx_models.elementwise(), "m.onnx").json()
        assert submit(other_api, other["id"]).status_code == 201  # another user's own cap
        api.post_json(f"/api/v1/jobs/{first['id']}/cancel")
        assert submit(api, uploaded["id"]).status_code == 201     # a finished job frees one
    assert CompileJob.objects.filter(owner__username="alice").count() == 3


# ---------------------------------------------------------------- stored bytes

def test_uploads_over_the_storage_quota_are_403(api, s3):
    data = onnx_models.elementwise()
    with override_settings(MAX_STORED_BYTES=len(data) * 3 // 2):
        assert api.upload(data, "a.onnx").status_code == 201
        error = assert_refusal(api, api.upload(data, "b.onnx"), 403, "POST", "/models",
                               "storage quota", f"this upload is {len(data) / 2**20:,.1f} MiB",
                               "TENSORFORGE_MAX_STORED_BYTES")
    assert f"= {len(data) * 3 // 2}" in error
    assert api.get("/api/v1/models").json()["count"] == 1


def test_a_full_storage_quota_refuses_new_jobs(user, api, uploaded, no_enqueue):
    job = CompileJob.objects.create(owner=user, model_id=uploaded["id"], state="succeeded")
    Artifact.objects.create(job=job, name="package.tar.gz", size=5 * 2**20, sha256="0" * 64,
                            storage_key="k")
    with override_settings(MAX_STORED_BYTES=5 * 2**20):
        assert_refusal(api, submit(api, uploaded["id"]), 403, "POST", "/jobs",
                       "storage quota", "limit is 5.0 MiB")
    with override_settings(MAX_STORED_BYTES=0):  # 0: no limit
        assert submit(api, uploaded["id"]).status_code == 201


# ---------------------------------------------------------------- tuning budget

def test_tuning_seconds_are_capped_by_the_compile_time_limit(api, uploaded, no_enqueue):
    with override_settings(SANDBOX_COMPILE_TIMEOUT=240):  # less 180 s to compile: 60 s
        assert_refusal(api, submit(api, uploaded["id"], tuning={"seconds": 61}), 403, "POST",
                       "/jobs", "tuning.seconds = 61", "limit is 60 s",
                       "TENSORFORGE_COMPILE_TIMEOUT = 240 s")
        assert submit(api, uploaded["id"], tuning={"seconds": 60}).status_code == 201
        assert submit(api, uploaded["id"], tuning={"trials": 500}).status_code == 201
    assert_refusal(api, submit(api, uploaded["id"], tuning={"seconds": 5000}), 403, "POST",
                   "/jobs", "limit is 720 s")


# ---------------------------------------------------------------- upload rate

def test_uploads_are_rate_limited_per_user(api, other_api, s3):
    with override_settings(UPLOADS_PER_MINUTE=2):
        for _ in range(2):  # refused uploads count too: inspecting them is the cost
            assert api.upload(b"not a model").status_code == 400
        resp = api.upload(onnx_models.elementwise())
        assert_refusal(api, resp, 429, "POST", "/models", "too many uploads",
                       "limit is 2 per 60 s", "TENSORFORGE_UPLOADS_PER_MINUTE")
        # at most 1.5 windows: the sliding window weighs the previous one conservatively
        assert 1 <= int(resp["Retry-After"]) <= 90
        assert other_api.upload(onnx_models.elementwise()).status_code == 201


def test_the_rate_limit_holds_across_processes(user):
    """Four processes take 10 each against a limit of 20: the shared counter lets exactly
    20 through."""
    code = ("import django; django.setup()\n"
            "from webapp.jobs import ratelimit\n"
            "from webapp.jobs.errors import RateLimited\n"
            "ok = 0\n"
            "for _ in range(10):\n"
            "    try:\n"
            f"        ratelimit.take('drill', {user.pk}, 20, 3600, 'drills', 'X'); ok += 1\n"
            "    except RateLimited:\n"
            "        pass\n"
            "print(ok)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    passed = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert sum(passed) == 20, passed


@pytest.mark.parametrize("previous, current, limit, elapsed, expected", [
    (0, 2, 2, 30, 60),   # this window is full: its 2 must weigh 1 in the next, half way in
    (4, 0, 4, 10, 5),    # the previous window's 4 must weigh 3: a quarter of the way in
    (2, 1, 2, 59, 1),    # almost gone
])
def test_wait_seconds(previous, current, limit, elapsed, expected):
    # per 60 s; the counts do not include the refused request
    assert wait_seconds(previous, current, limit, elapsed, 60) == expected


# ---------------------------------------------------------------- console

def test_the_console_form_shows_the_quota_message(user, api, uploaded, no_enqueue):
    client = Client()
    client.force_login(user)
    with override_settings(MAX_ACTIVE_JOBS=1):
        assert submit(api, uploaded["id"]).status_code == 201
        page = client.post(f"/models/{uploaded['id']}/", {"target": "native", "opt_level": "3",
                                                           "threads": "1", "dim__x__0": "4"})
    assert page.status_code == 403
    assert "active job limit reached" in page.content.decode()


def test_failed_sign_ins_are_throttled(user):
    client = Client(REMOTE_ADDR="10.0.0.7")
    for _ in range(4):
        resp = client.post("/login/", {"username": "alice", "password": "wrong"})
        assert resp.status_code == 200
    fifth = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert fifth.status_code == 429
    text = fifth.content.decode()
    assert "Too many failed sign-ins: 5" in text and "TENSORFORGE_LOGIN_FAILURE_LIMIT" in text
    # locked out: even the right password is refused until the cool-off ends
    right = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
    assert right.status_code == 429
    admin = client.post("/admin/login/", {"username": "alice", "password": "wrong"})
    assert admin.status_code == 429
    # the lockout is for this username from this address: alice elsewhere still signs in
    elsewhere = Client(REMOTE_ADDR="10.0.0.8").post(
        "/login/", {"username": "alice", "password": "correct-horse-battery"})
    assert elsewhere.status_code == 302
