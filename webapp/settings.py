"""Django settings, all read from the environment (see .env.example at the repository root).

Without DATABASE_URL, REDIS_URL and S3_ENDPOINT_URL the embedded stack (`make run`) supplies
SQLite, a local Redis and a local SeaweedFS; with them the same code runs on PostgreSQL, an
external Redis and real S3/MinIO. Variables that are not set fall back to what the embedded
stack wrote to var/devstack.json (webapp/env.py), so `manage.py` works in a second shell.
"""
from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

from .env import (database_from_url, env_bool, env_float, env_int, env_list, env_str,
                  use_stack_file)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("TENSORFORGE_VAR_DIR", str(BASE_DIR / "var")))
use_stack_file(VAR_DIR)

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and not env_bool("DJANGO_ALLOW_INSECURE_KEY", False):
        raise RuntimeError("DJANGO_SECRET_KEY is not set (make run generates one under var/)")
    SECRET_KEY = "insecure-development-key-" + "x" * 40
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# HTTPS hardening: on by default outside DEBUG; the embedded stack serves plain HTTP on
# 127.0.0.1 and turns it off with DJANGO_HTTPS=0.
HTTPS = env_bool("DJANGO_HTTPS", not DEBUG)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

INSTALLED_APPS = [
    "django.contrib.admin",  # operators: users, stuck jobs, tokens
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "webapp.accounts",
    "webapp.jobs",
    "webapp.api",
    "webapp.console",
    "axes",  # throttles failed sign-ins (console and admin); see "fair use" below
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "webapp.api.middleware.JsonErrorsForApiMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"), VAR_DIR / "tensorforge.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# django-axes checks lockouts before any password is compared
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                           "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:models"
LOGOUT_REDIRECT_URL = "console:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# only for `collectstatic` (the docker image); the embedded stack serves static/ directly
STATIC_ROOT = env_str("DJANGO_STATIC_ROOT", "") or None
# Serve straight from static/ so the embedded stack needs no collectstatic step.
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# --- uploads
MAX_MODEL_BYTES = env_int("TENSORFORGE_MAX_MODEL_BYTES", 256 * 2**20)
# uploads are inspected in a sandboxed child with these limits
UPLOAD_INSPECT_MEMORY_MB = env_int("TENSORFORGE_UPLOAD_INSPECT_MEMORY_MB", 2048)
UPLOAD_INSPECT_TIMEOUT = env_int("TENSORFORGE_UPLOAD_INSPECT_TIMEOUT", 60)
FILE_UPLOAD_MAX_MEMORY_SIZE = 4 * 2**20   # larger uploads spool to a temporary file
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 2**20   # non-file bodies (JSON) stay small

# --- broker and workers
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
# one queue name per deployment (tests use their own so parallel runs never share tasks)
CELERY_QUEUE = env_str("TENSORFORGE_QUEUE", "tensorforge")
JOB_SOFT_TIME_LIMIT = env_int("TENSORFORGE_JOB_SOFT_TIME_LIMIT", 1800)
JOB_HARD_TIME_LIMIT = env_int("TENSORFORGE_JOB_HARD_TIME_LIMIT", 1900)
JOB_MAX_ATTEMPTS = env_int("TENSORFORGE_JOB_MAX_ATTEMPTS", 3)
# a running job whose worker has not written a heartbeat for this long is failed by the reaper
JOB_HEARTBEAT_TIMEOUT = env_int("TENSORFORGE_JOB_HEARTBEAT_TIMEOUT", 120)
REAPER_INTERVAL = env_float("TENSORFORGE_REAPER_INTERVAL", 30.0)
# a queued job whose message was sent this long ago and never started is sent again (a
# message lost with the broker); duplicates are harmless: the first delivery claims the job
QUEUED_RESEND_AFTER = env_int("TENSORFORGE_QUEUED_RESEND_AFTER", 300)
# a running job waits this long for storage to come back before it fails
JOB_STORAGE_PATIENCE = env_int("TENSORFORGE_JOB_STORAGE_PATIENCE", 600)
# workers announce the targets they benchmark on this often; silent for TTL means offline
WORKER_HEARTBEAT_SECONDS = env_float("TENSORFORGE_WORKER_HEARTBEAT_SECONDS", 15.0)
WORKER_HEARTBEAT_TTL = env_int("TENSORFORGE_WORKER_HEARTBEAT_TTL", 45)

# --- the sandboxed child processes (compile and benchmark)
SANDBOX_COMPILE_TIMEOUT = env_int("TENSORFORGE_COMPILE_TIMEOUT", 900)
SANDBOX_BENCH_TIMEOUT = env_int("TENSORFORGE_BENCH_TIMEOUT", 300)
SANDBOX_MEMORY_MB = env_int("TENSORFORGE_SANDBOX_MEMORY_MB", 8192)
SANDBOX_FILE_MB = env_int("TENSORFORGE_SANDBOX_FILE_MB", 4096)        # largest file a child writes
SANDBOX_WORKDIR_MB = env_int("TENSORFORGE_SANDBOX_WORKDIR_MB", 8192)  # a job's whole work dir
SANDBOX_PROCESSES = env_int("TENSORFORGE_SANDBOX_PROCESSES", 256)     # threads included
SANDBOX_OPEN_FILES = env_int("TENSORFORGE_SANDBOX_OPEN_FILES", 512)
SANDBOX_CHILD_MODULE = env_str("TENSORFORGE_SANDBOX_CHILD_MODULE", "sandbox.child")
SANDBOX_CHILD_ENV: dict = {}  # extra variables for the child (tests set fault switches here)
# Tuning spread over the workers (workers/measure_remote.py): a worker waits this long for
# another to start a batch, and a batch may take this long; the lock files live here (one
# per set of cores, shared by every worker of the host)
MEASURE_START_SECONDS = env_float("TENSORFORGE_MEASURE_START_SECONDS", 20.0)
MEASURE_TIMEOUT = env_int("TENSORFORGE_MEASURE_TIMEOUT", 300)
MEASURE_TASK_MB = env_int("TENSORFORGE_MEASURE_TASK_MB", 64)
MEASURE_LOCK_DIR = env_str("TENSORFORGE_MEASURE_LOCK_DIR",
                           os.path.join(tempfile.gettempdir(), "tensorforge-measure-locks"))
BENCH_MAX_SECONDS = env_float("TENSORFORGE_BENCH_MAX_SECONDS", 10.0)
BENCH_MIN_RUNS = env_int("TENSORFORGE_BENCH_MIN_RUNS", 10)
WORK_DIR = Path(env_str("TENSORFORGE_WORK_DIR", str(VAR_DIR / "work")))

# --- object storage (always through boto3's S3 API)
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL", "http://127.0.0.1:8333")
S3_PUBLIC_ENDPOINT_URL = env_str("S3_PUBLIC_ENDPOINT_URL", "")  # what browsers can reach
S3_BUCKET = env_str("S3_BUCKET", "tensorforge")
S3_REGION = env_str("S3_REGION", "us-east-1")
S3_ACCESS_KEY_ID = env_str("S3_ACCESS_KEY_ID", env_str("AWS_ACCESS_KEY_ID", "tensorforge"))
S3_SECRET_ACCESS_KEY = env_str("S3_SECRET_ACCESS_KEY",
                               env_str("AWS_SECRET_ACCESS_KEY", "tensorforge-secret"))
S3_PRESIGN_SECONDS = env_int("S3_PRESIGN_SECONDS", 300)
S3_RETRIES = env_int("S3_RETRIES", 4)
S3_RETRY_BACKOFF = env_float("S3_RETRY_BACKOFF", 0.5)
S3_CONNECT_TIMEOUT = env_float("S3_CONNECT_TIMEOUT", 5.0)

API_PAGE_SIZE = env_int("API_PAGE_SIZE", 20)

# --- cache: Redis, the broker's server, so counters are shared by every web process
CACHES = {"default": {
    "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
    "KEY_PREFIX": CELERY_QUEUE,  # deployments (and parallel test runs) never share counters
    "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
}}

# --- fair use, per user (webapp/jobs/quotas.py); 0 turns a limit off. Refusals are 403
# (quota) or 429 (rate) with a message naming the limit and the variable that sets it.
MAX_ACTIVE_JOBS = env_int("TENSORFORGE_MAX_ACTIVE_JOBS", 8)             # queued + running
MAX_STORED_BYTES = env_int("TENSORFORGE_MAX_STORED_BYTES", 20 * 2**30)  # models + artifacts
UPLOADS_PER_MINUTE = env_int("TENSORFORGE_UPLOADS_PER_MINUTE", 20)
# sign-ins: after this many failures for one username from one address, that pair is
# locked out for the cool-off (django-axes, counted in the database)
LOGIN_FAILURE_LIMIT = env_int("TENSORFORGE_LOGIN_FAILURE_LIMIT", 5)
LOGIN_COOLOFF_MINUTES = env_int("TENSORFORGE_LOGIN_COOLOFF_MINUTES", 15)
AXES_ENABLED = LOGIN_FAILURE_LIMIT > 0
AXES_FAILURE_LIMIT = max(LOGIN_FAILURE_LIMIT, 1)
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # one attacker cannot lock you out
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "webapp.console.views.locked_out"
