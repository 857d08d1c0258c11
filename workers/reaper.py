"""Fail running jobs whose worker died: no heartbeat for JOB_HEARTBEAT_TIMEOUT seconds."""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from webapp.jobs.models import CompileJob, JobState

log = logging.getLogger(__name__)


def reap(now=None) -> int:
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT)
    stale = CompileJob.objects.filter(state=JobState.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff))
    count = 0
    for job in stale:
        count += CompileJob.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
            state=JobState.FAILED, finished_at=now,
            error=(f"the worker running this job ({job.worker or 'unknown'}) stopped responding "
                   f"during the {job.stage or 'first'} stage: no heartbeat for "
                   f"{settings.JOB_HEARTBEAT_TIMEOUT} s. It was probably killed or ran out of "
                   "memory; submit the job again"))
    if count:
        log.warning("reaper failed %d stale job(s)", count)
    return count
