"""The Celery app. Reliability settings live here, next to the reasons for them."""
from __future__ import annotations

import os

import django
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django.setup()

from django.conf import settings  # noqa: E402  needs django.setup()

app = Celery("tensorforge")
app.conf.update(
    broker_url=settings.CELERY_BROKER_URL,
    broker_connection_retry_on_startup=True,
    # The database holds job state and results; Celery only carries job ids.
    task_ignore_result=True,
    task_default_queue=settings.CELERY_QUEUE,
    result_backend=None,
    # A task is acknowledged after it finishes, and re-queued if its worker process dies,
    # so no job is lost with a crashed worker (stages are idempotent, see pipeline.py).
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    # One job at a time per worker process: jobs are long and CPU-bound.
    worker_prefetch_multiplier=1,
    task_soft_time_limit=settings.JOB_SOFT_TIME_LIMIT,
    task_time_limit=settings.JOB_HARD_TIME_LIMIT,
    # Redis re-delivers unacknowledged tasks after this long; it must exceed the longest job.
    broker_transport_options={"visibility_timeout": settings.JOB_HARD_TIME_LIMIT + 600},
    task_always_eager=settings.CELERY_TASK_ALWAYS_EAGER,
    worker_hijack_root_logger=False,
    beat_schedule={"reap-stale-jobs": {"task": "tensorforge.reap_stale_jobs",
                                       "schedule": settings.REAPER_INTERVAL}},
    imports=["workers.tasks"],
)
