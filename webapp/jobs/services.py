"""What the API and the console do with models and jobs: upload, submit, cancel, look up."""
from __future__ import annotations

import hashlib
import logging
import tempfile
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compiler_core.errors import CompileError
from compiler_core.inspect_model import inspect_model

from . import storage
from .errors import Conflict, NotFound, RequestError, TooLarge
from .models import Artifact, CompileJob, JobState, UploadedModel
from .validation import JobRequest

log = logging.getLogger(__name__)


def check_upload_size(size: int) -> None:
    if size > settings.MAX_MODEL_BYTES:
        raise TooLarge(f"the upload is {size / 2**20:.1f} MiB; the limit is "
                       f"{settings.MAX_MODEL_BYTES / 2**20:.0f} MiB (TENSORFORGE_MAX_MODEL_BYTES)")


def _spool(upload, path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as out:
        for chunk in upload.chunks():
            h.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def _display_name(name: str, filename: str) -> str:
    name = (name or filename or "model").strip()
    if name.lower().endswith(".onnx") and len(name) > 5:
        name = name[:-5]
    return name[:200] or "model"


def ingest_upload(user, upload, name: str = "") -> UploadedModel:
    """Check an uploaded file is an ONNX model, store it, record what it contains."""
    if upload is None:
        raise RequestError("no file: send the model as multipart/form-data field 'file'")
    check_upload_size(upload.size)
    if upload.size == 0:
        raise RequestError("the uploaded file is empty")
    with tempfile.TemporaryDirectory(prefix="tf-upload-") as tmp:
        path = Path(tmp) / "model.onnx"
        sha256 = _spool(upload, path)
        try:
            info = inspect_model(str(path))
        except CompileError as exc:
            raise RequestError(f"{upload.name or 'the upload'} is not a usable ONNX model: "
                               f"{exc}") from None
        model = UploadedModel(id=uuid.uuid4(), owner=user, sha256=sha256, size=upload.size,
                              name=_display_name(name, upload.name))
        model.storage_key = storage.model_key(model)
        _fill_from_inspection(model, info)
        storage.put_file(model.storage_key, path, sha256, "application/octet-stream")
    model.save()
    return model


def _fill_from_inspection(model: UploadedModel, info: dict) -> None:
    def io(spec):
        return {"name": spec["name"], "dtype": spec["dtype"], "shape": spec["shape"]}
    model.opset = info["opset"]
    model.producer = (info.get("producer") or "")[:200]
    model.inputs = [io(i) for i in info["inputs"]]
    model.outputs = [io(o) for o in info["outputs"]]
    model.ops = info["ops"]
    unsupported = info["unsupported_ops"]
    model.unsupported_ops = sorted(unsupported) if isinstance(unsupported, dict) else unsupported


def submit_job(user, req: JobRequest) -> CompileJob:
    job = CompileJob.objects.create(owner=user, model=req.model, target=req.target,
                                    input_shapes=req.input_shapes, opt_level=req.opt_level,
                                    tuning=req.tuning, threads=req.threads)
    transaction.on_commit(lambda: enqueue(job))
    return job


def enqueue(job: CompileJob) -> None:
    """Hand the job id to the broker; if that fails the job fails now instead of waiting."""
    from workers.tasks import compile_job  # the web process only needs the task's name
    try:
        result = compile_job.apply_async(args=[str(job.id)], task_id=str(job.id),
                                         retry_policy={"max_retries": 2, "interval_start": 0.2,
                                                       "interval_step": 0.5})
    except Exception as exc:  # kombu/redis raise many types; all mean "not queued"
        log.error("could not queue job %s: %s", job.id, exc)
        CompileJob.objects.filter(pk=job.pk).update(
            state=JobState.FAILED, finished_at=timezone.now(),
            error=f"the job queue is unreachable ({type(exc).__name__}); submit the job again "
                  "in a moment")
        raise RequestError("the job queue is unreachable; the job was not started, "
                           "try again in a moment", 503) from None
    CompileJob.objects.filter(pk=job.pk, task_id="").update(task_id=result.id)


def owned_job(user, job_id) -> CompileJob:
    try:
        key = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound("job") from None
    job = CompileJob.objects.select_related("model").filter(owner=user, id=key).first()
    if job is None:
        raise NotFound("job")
    return job


def owned_artifact(user, job_id, name: str) -> Artifact:
    job = owned_job(user, job_id)
    artifact = job.artifacts.filter(name=name).first()
    if artifact is None:
        if job.state != JobState.SUCCEEDED:
            raise NotFound(f"artifact {name!r} (the job is {job.state}; artifacts appear when "
                           "it succeeds)")
        raise NotFound(f"artifact {name!r}")
    return artifact


def cancel_job(job: CompileJob) -> CompileJob:
    """Queued or running -> cancelled; the worker notices at its next check and stops."""
    updated = CompileJob.objects.filter(
        pk=job.pk, state__in=[JobState.QUEUED, JobState.RUNNING]).update(
        state=JobState.CANCELLED, finished_at=timezone.now(), error="cancelled by the user")
    job.refresh_from_db()
    if not updated:
        raise Conflict(f"the job is already {job.state}; only queued or running jobs can be "
                       "cancelled")
    _revoke(job)
    return job


def _revoke(job: CompileJob) -> None:
    # Revoking keeps a queued task from starting; a running one sees the state and stops.
    try:
        from workers.celery_app import app
        app.control.revoke(job.task_id or str(job.id))
    except Exception as exc:  # the broker being down must not block a cancel
        log.warning("could not revoke task for %s: %s", job.id, exc)
