"""The Celery app, in Celery's documented Django layout: configured from Django's settings,
with no `django.setup()` on import (Celery's Django fix-up sets Django up when a worker
starts; the web process already has it).

The web side only sends messages: tasks are sent by name (`TASKS`), so `webapp` never
imports `workers`. The worker side (`workers/celery_app.py`) adds its task modules and the
periodic reaper to this same app. The reliability settings live here, next to the reasons
for them, because producer and consumer must agree on them.
"""
from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

# the names the worker registers its tasks under (workers/tasks.py)
COMPILE_JOB = "tensorforge.compile_job"
REAP_STALE_JOBS = "tensorforge.reap_stale_jobs"
MEASURE_BATCH = "tensorforge.measure_batch"  # a batch of another worker's tuning

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
    worker_hijack_root_logger=False,
)
