"""Celery tasks: they take ids and hand over to the pipeline; nothing else lives here."""
from __future__ import annotations

from celery import Task
from celery.signals import worker_init, worker_process_init

from sandbox import confine, namespaces

from webapp.celery import COMPILE_JOB, MEASURE_BATCH, REAP_STALE_JOBS

from . import measure_remote, pipeline, reaper
from .celery_app import app


class JobTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        # Reached for failures outside the pipeline's own handling, e.g. the hard time
        # limit killing the process: make sure the job does not stay "running".
        if args:
            pipeline.fail_if_active(args[0], f"the worker stopped the job: {type(exc).__name__}: "
                                             f"{exc}")


@worker_init.connect
def announce_sandbox(**_):
    """Say at start how compile children are confined (namespaces may be unavailable)."""
    namespaces.announce()


@worker_process_init.connect
def die_with_the_worker(**_):
    """A pool process dies with its worker (and its sandboxed child with it), so a killed
    worker leaves no orphan running a job: the reaper re-queues the job instead."""
    confine.die_with_parent()


@app.task(name=COMPILE_JOB, bind=True, base=JobTask)
def compile_job(self, job_id: str) -> None:
    pipeline.run_job(job_id, worker=self.request.hostname or "eager")


@app.task(name=MEASURE_BATCH, bind=True, acks_late=False)
def measure_batch(self, payload: dict) -> None:
    """Not re-delivered when this worker dies: the requester measures the batch itself."""
    measure_remote.measure_batch(payload, worker=self.request.hostname or "eager")


@app.task(name=REAP_STALE_JOBS)
def reap_stale_jobs() -> int:
    return reaper.reap()
