"""Celery tasks: they take ids and hand over to the pipeline; nothing else lives here."""
from __future__ import annotations

from celery import Task

from .celery_app import app
from . import pipeline, reaper


class JobTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        # Reached for failures outside the pipeline's own handling, e.g. the hard time
        # limit killing the process: make sure the job does not stay "running".
        if args:
            pipeline.fail_if_active(args[0], f"the worker stopped the job: {type(exc).__name__}: "
                                             f"{exc}")


@app.task(name="tensorforge.compile_job", bind=True, base=JobTask)
def compile_job(self, job_id: str) -> None:
    pipeline.run_job(job_id, worker=self.request.hostname or "eager")


@app.task(name="tensorforge.reap_stale_jobs")
def reap_stale_jobs() -> int:
    return reaper.reap()
