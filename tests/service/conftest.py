"""Fixtures for the service tests.

Real parts wherever they answer: PostgreSQL at 127.0.0.1:5432 (db `test`, user `postgres`)
and Redis at 127.0.0.1:6379; otherwise SQLite and a Redis started here. SeaweedFS (S3), the
Celery worker and the web server are started by fixtures, on free ports, with data in a
temporary directory, and stopped at the end.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

from webapp import devstack

RUN_ID = uuid.uuid4().hex[:8]
TMP = Path(tempfile.mkdtemp(prefix=f"tf-service-tests-{RUN_ID}-"))
PG = ("127.0.0.1", 5432)
SYSTEM_REDIS = ("127.0.0.1", 6379)


def _answers(addr) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(addr) == 0


def _postgres_usable() -> bool:
    if os.environ.get("TF_TEST_SQLITE") or not _answers(PG):
        return False
    try:
        import psycopg
        psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres",
                        connect_timeout=3).close()
        return True
    except Exception:  # noqa: BLE001  any failure means: use SQLite
        return False


USE_POSTGRES = _postgres_usable()
TEST_DB_NAME = f"tf_test_{RUN_ID}"
S3_PORT = devstack.free_port()
LOGS = TMP / "log"

os.environ.update({
    "DJANGO_SETTINGS_MODULE": "webapp.settings",
    "DJANGO_SECRET_KEY": "test-secret-" + uuid.uuid4().hex * 2,
    "DJANGO_HTTPS": "0",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
    "TENSORFORGE_VAR_DIR": str(TMP / "var"),
    "TENSORFORGE_QUEUE": f"tf-test-{RUN_ID}",
    "S3_ENDPOINT_URL": f"http://127.0.0.1:{S3_PORT}",
    "S3_BUCKET": f"tf-test-{RUN_ID}",
    "S3_RETRIES": "2",
    "S3_RETRY_BACKOFF": "0.05",
    "S3_CONNECT_TIMEOUT": "2",
    "TENSORFORGE_BENCH_MAX_SECONDS": "0.5",
    "DATABASE_URL": (f"postgres://postgres@127.0.0.1:5432/{TEST_DB_NAME}" if USE_POSTGRES
                     else f"sqlite:///{TMP / 'test.sqlite3'}"),
})

# the system Redis when it answers; otherwise one started by the `database` fixture
OWN_REDIS_PORT = (None if _answers(SYSTEM_REDIS) and not os.environ.get("TF_TEST_OWN_REDIS")
                  else devstack.free_port())
os.environ["REDIS_URL"] = f"redis://127.0.0.1:{OWN_REDIS_PORT or 6379}/0"

import django  # noqa: E402  after the environment is set

django.setup()


def _create_database() -> None:
    from django.core.management import call_command
    if USE_POSTGRES:
        import psycopg
        with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{TEST_DB_NAME}"')
    call_command("migrate", verbosity=0, interactive=False)


def _drop_database() -> None:
    from django.db import connections
    connections.close_all()
    if USE_POSTGRES:
        import psycopg
        with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres",
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{TEST_DB_NAME}" WITH (FORCE)')


@pytest.fixture(scope="session", autouse=True)
def database():
    redis = devstack.start_redis(TMP / "redis", OWN_REDIS_PORT, LOGS) if OWN_REDIS_PORT else None
    _create_database()
    yield
    _drop_database()
    if redis is not None:
        redis.stop()
    shutil.rmtree(TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def clean_tables(database):
    """Committed data (the worker is another process), removed after each test."""
    yield
    from axes.models import AccessAttempt
    from django.contrib.auth import get_user_model

    from webapp.jobs.models import CompileJob, TuningRecord, UploadedModel
    TuningRecord.objects.all().delete()  # shared by every job: outlives them in a deployment
    AccessAttempt.objects.all().delete()
    CompileJob.objects.all().delete()
    UploadedModel.objects.all().delete()
    get_user_model().objects.all().delete()


@pytest.fixture(scope="session")
def s3():
    """A SeaweedFS server with the test bucket."""
    proc = devstack.start_seaweedfs(TMP / "seaweedfs", S3_PORT, os.environ["S3_BUCKET"], LOGS)
    from webapp.jobs import storage
    storage.ensure_bucket()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def worker(s3, database):
    """One real Celery worker process on this run's own queue."""
    proc = devstack.start("worker", devstack.celery_worker_cmd(beat=False, hostname=RUN_ID),
                          LOGS)
    devstack.wait_until(lambda: "ready" in proc.log_path.read_text(), "the celery worker",
                        proc, timeout=60)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def live_server(s3, database):
    """The web app under gunicorn on a free port."""
    port = devstack.free_port()
    proc = devstack.start("web", devstack.web_cmd(port), LOGS)
    devstack.wait_until(lambda: devstack.port_open(port), "the web server", proc, timeout=60)
    yield f"http://127.0.0.1:{port}"
    proc.stop()


# ---------------------------------------------------------------- users and clients

@pytest.fixture
def make_user():
    from django.contrib.auth import get_user_model

    def make(username: str = "alice", password: str = "correct-horse-battery"):
        return get_user_model().objects.create_user(username, password=password)
    return make


@pytest.fixture
def user(make_user):
    return make_user("alice")


@pytest.fixture
def token(user):
    from webapp.accounts.models import ApiToken
    return ApiToken.issue(user, "test")[1]


@pytest.fixture
def api(token):
    return ApiClient(token)


@pytest.fixture
def other_api(make_user):
    from webapp.accounts.models import ApiToken
    return ApiClient(ApiToken.issue(make_user("mallory"), "other")[1])


class ApiClient:
    """Django's test client with a bearer token and JSON helpers."""

    def __init__(self, token: str | None):
        from django.test import Client
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path, **params):
        return self.client.get(path, params, headers=self.headers)

    def post_json(self, path, data=None, raw: str | None = None):
        import json
        body = raw if raw is not None else json.dumps(data or {})
        return self.client.post(path, body, content_type="application/json",
                                headers=self.headers)

    def upload(self, data: bytes, name: str = "model.onnx"):
        from django.core.files.uploadedfile import SimpleUploadedFile
        return self.client.post("/api/v1/models", {"file": SimpleUploadedFile(name, data)},
                                headers=self.headers)


@pytest.fixture
def no_enqueue(monkeypatch):
    """Submit jobs without sending them to a broker (API and console tests)."""
    sent = []
    monkeypatch.setattr("webapp.jobs.services.enqueue", sent.append)
    return sent


@pytest.fixture
def uploaded(api, s3):
    from tests.service import onnx_models
    resp = api.upload(onnx_models.elementwise(), "elementwise.onnx")
    assert resp.status_code == 201, resp.content
    return resp.json()
