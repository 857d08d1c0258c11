"""Fair use: what one user may have at once and ask for (settings, "fair use").

Each check raises QuotaExceeded (403) or RateLimited (429) with a message that names the
limit, its value and the variable that sets it; the API answers it as {"error": ...} and
the console shows the same text. A limit of 0 turns the check off.

Counts come from the database, the source of truth; checks that are followed by a write
run under `per_user_lock` so two concurrent requests of one user cannot both pass.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum

from . import ratelimit
from .errors import QuotaExceeded
from .models import Artifact, CompileJob, JobState, UploadedModel
from .tuning_records import TUNING_MARGIN_SECONDS, tuning_seconds_cap

ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def per_user_lock(user) -> None:
    """Serialise one user's quota-checked writes (call inside transaction.atomic): the
    user's row is locked on PostgreSQL; SQLite takes its one write lock up front anyway."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).exists()


def check_active_jobs(user) -> None:
    limit = settings.MAX_ACTIVE_JOBS
    if limit <= 0:
        return
    active = CompileJob.objects.filter(owner=user, state__in=ACTIVE_STATES).count()
    if active >= limit:
        raise QuotaExceeded(
            f"active job limit reached: you have {active} queued or running jobs and the "
            f"limit is {limit} per user (TENSORFORGE_MAX_ACTIVE_JOBS); wait for one to "
            "finish or cancel one")


def stored_bytes(user) -> int:
    """The user's uploaded models and job artifacts, in bytes."""
    models = UploadedModel.objects.filter(owner=user).aggregate(n=Sum("size"))["n"] or 0
    artifacts = Artifact.objects.filter(job__owner=user).aggregate(n=Sum("size"))["n"] or 0
    return models + artifacts


def check_storage(user, adding: int = 0) -> None:
    """Refuse when the user's stored bytes plus `adding` would pass the quota (a job adds
    artifacts of a size unknown beforehand, so it is refused once the quota is full)."""
    limit = settings.MAX_STORED_BYTES
    if limit <= 0:
        return
    used = stored_bytes(user)
    if used + adding > limit or (adding == 0 and used >= limit):
        wanted = f" and this upload is {_mib(adding)}" if adding else ""
        raise QuotaExceeded(
            f"storage quota reached: your models and artifacts take {_mib(used)}{wanted}; "
            f"the limit is {_mib(limit)} per user (TENSORFORGE_MAX_STORED_BYTES = {limit}); "
            "an operator can delete old models or raise the limit")


def check_tuning(tuning) -> None:
    """Tuning runs inside the compile child: its budget must leave that child's time limit
    room to compile (webapp/jobs/tuning_records.py)."""
    cap = tuning_seconds_cap()
    seconds = tuning.seconds if tuning else None
    if seconds and seconds > cap:
        raise QuotaExceeded(
            f"tuning budget too large: tuning.seconds = {seconds}, the limit is {cap:.0f} s "
            f"per job: the compile time limit (TENSORFORGE_COMPILE_TIMEOUT = "
            f"{settings.SANDBOX_COMPILE_TIMEOUT} s) less {TUNING_MARGIN_SECONDS} s kept for "
            "compiling")


def take_upload(user) -> None:
    ratelimit.take("upload", user.pk, settings.UPLOADS_PER_MINUTE, 60, "uploads",
                   "TENSORFORGE_UPLOADS_PER_MINUTE")
