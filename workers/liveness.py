"""What keeps a live job from being taken for a dead one, and a storage outage from ending it.

* `Heartbeat`: a thread that stamps the job's heartbeat every HEARTBEAT_EVERY seconds for the
  whole attempt (downloads, compile, benchmark, uploads alike), so the reaper only ever sees a
  quiet job when its worker process is gone.
* `patiently`: storage calls already retry transient errors a few times (storage.py); a job
  also waits out a longer outage (JOB_STORAGE_PATIENCE seconds) instead of failing, checking
  for a cancel while it waits.
"""
from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from webapp.jobs.models import CompileJob, JobState
from webapp.jobs.storage import StorageError

log = logging.getLogger(__name__)
HEARTBEAT_EVERY = 5.0


class Cancelled(Exception):
    """The job was cancelled while it ran."""


class Heartbeat:
    """`with Heartbeat(job_id):` stamps heartbeat_at while the block runs."""

    def __init__(self, job_id, every: float = HEARTBEAT_EVERY):
        self.job_id, self.every = job_id, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}",
                                        daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every):
                self._beat()
        finally:
            connection.close()  # this thread's own database connection

    def _beat(self) -> None:
        try:
            CompileJob.objects.filter(pk=self.job_id, state=JobState.RUNNING).update(
                heartbeat_at=timezone.now())
        except Exception as exc:  # noqa: BLE001  a missed beat is retried; never kill the job
            log.warning("heartbeat for job %s failed: %s", self.job_id, exc)
            close_old_connections()


def patiently(action, what: str, cancelled, say) -> object:
    """Run action(); while storage is unreachable, retry for up to JOB_STORAGE_PATIENCE s."""
    deadline = time.monotonic() + settings.JOB_STORAGE_PATIENCE
    wait = 1.0
    while True:
        try:
            return action()
        except StorageError as exc:
            if time.monotonic() + wait > deadline:
                raise
            say(f"storage unavailable during {what} ({exc}); retrying in {wait:.0f} s")
        _sleep(wait, cancelled)
        wait = min(wait * 2, 30.0)


def _sleep(seconds: float, cancelled) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cancelled():
            raise Cancelled()
        time.sleep(min(1.0, max(end - time.monotonic(), 0)))
