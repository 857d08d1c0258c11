"""The periodic reaper (Celery beat): no job is lost to a dead worker or a lost message.

* A running job whose heartbeat stopped for JOB_HEARTBEAT_TIMEOUT seconds lost its worker
  (the heartbeat thread beats for the whole attempt, storage transfers included). While it has
  attempts left it goes back to `queued` and its task is sent again; after JOB_MAX_ATTEMPTS
  it fails with the reason.
* A queued job whose task was sent QUEUED_RESEND_AFTER seconds ago and never started may have
  lost its message with the broker: it is sent again. A duplicate message is harmless, the
  first delivery claims the job and the others find it taken (pipeline.claim).
"""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from webapp.jobs import services
from webapp.jobs.models import CompileJob, JobState

from .pipeline import append_log, discard_uploads

log = logging.getLogger(__name__)


def reap(now=None) -> int:
    """Recover jobs of dead workers and re-send lost messages; returns jobs recovered."""
    now = now or timezone.now()
    recovered = sum(recover(job, now) for job in stale_running(now))
    for job in stale_queued(now):
        resend(job, "its message was sent "
                    f"{settings.QUEUED_RESEND_AFTER} s ago and no worker started it")
    if recovered:
        log.warning("reaper recovered %d job(s) whose worker died", recovered)
    return recovered


def stale_running(now):
    cutoff = now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT)
    return CompileJob.objects.filter(state=JobState.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff))


def stale_queued(now):
    cutoff = now - timedelta(seconds=settings.QUEUED_RESEND_AFTER)
    return CompileJob.objects.filter(state=JobState.QUEUED).filter(
        Q(sent_at__lt=cutoff) | Q(sent_at__isnull=True, created_at__lt=cutoff))


def _died(job: CompileJob) -> str:
    return (f"the worker running this job ({job.worker or 'unknown'}) stopped responding "
            f"during the {job.stage or 'first'} stage (no heartbeat for "
            f"{settings.JOB_HEARTBEAT_TIMEOUT} s: it was killed or its machine went away)")


def recover(job: CompileJob, now) -> int:
    """Re-queue a job whose worker died, or fail it when its attempts are used up."""
    running = CompileJob.objects.filter(pk=job.pk, state=JobState.RUNNING,
                                        heartbeat_at=job.heartbeat_at)
    if job.attempts >= settings.JOB_MAX_ATTEMPTS:
        reason = (f"{_died(job)}; this was attempt {job.attempts} of "
                  f"{settings.JOB_MAX_ATTEMPTS}, so the job is failed. A model that kills its "
                  "worker every time may need more memory than the worker has")
        if running.update(state=JobState.FAILED, finished_at=now, error=reason[:4000]):
            append_log(job, f"failed: {reason}")
            discard_uploads(job)
            return 1
        return 0
    if not running.update(state=JobState.QUEUED, worker="", stage="", progress=0.0):
        return 0  # it beat or finished in the meantime
    resend(job, f"{_died(job)}; re-queued (attempt {job.attempts} of "
                f"{settings.JOB_MAX_ATTEMPTS} used)")
    return 1


def resend(job: CompileJob, why: str) -> None:
    append_log(job, why)
    try:
        services.send(job)
    except Exception as exc:  # noqa: BLE001  the broker may be down: the next round retries
        log.warning("could not re-send job %s (%s); will retry", job.id, exc)
