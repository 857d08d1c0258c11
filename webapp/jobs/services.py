"""What the API and the console do with models and jobs: upload, submit, cancel, look up."""
from __future__ import annotations

import hashlib
import logging
import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp import celery

from . import fleet, quotas, storage
from .errors import Conflict, NotFound, RequestError, TooLarge, Unavailable
from .inspection import inspect_upload, workdir
from .models import Artifact, CompileJob, JobState, UploadedModel
from .validation import JobRequest, resolve

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


UPLOAD_SUFFIXES = (".onnx", ".tar.gz", ".tgz", ".tar", ".zip")


def _display_name(name: str, filename: str) -> str:
    name = (name or filename or "model").strip()
    for suffix in UPLOAD_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
            break
    return name[:200] or "model"


def ingest_upload(user, upload, name: str = "") -> UploadedModel:
    """Check an upload (a .onnx file, or a .zip/.tar of the model folder) in the sandbox,
    store the model as one self-contained .onnx file, record what it contains."""
    if upload is None:
        raise RequestError("no file: send the model as multipart/form-data field 'file'")
    quotas.take_upload(user)
    check_upload_size(upload.size)
    if upload.size == 0:
        raise RequestError("the uploaded file is empty")
    quotas.check_storage(user, upload.size)  # early: inspection is the expensive part
    work = workdir()
    try:
        path = work / "upload"
        sha256 = _spool(upload, path)
        inspected = inspect_upload(path, work, upload.name or "the upload")
        model = UploadedModel(id=uuid.uuid4(), owner=user, sha256=sha256, size=upload.size,
                              name=_display_name(name, upload.name))
        model.storage_key = storage.model_key(model)
        _fill_from_inspection(model, inspected.info)
        _record_within_quota(model)
        _store(model, inspected.model_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return model


def _record_within_quota(model: UploadedModel) -> None:
    # The row is written before the object so that it reserves its bytes under the lock:
    # two concurrent uploads of one user cannot both fit the last free bytes.
    with transaction.atomic():
        quotas.per_user_lock(model.owner)
        quotas.check_storage(model.owner, model.size)
        model.save()


def _store(model: UploadedModel, stored: Path) -> None:
    try:
        storage.put_file(model.storage_key, stored, storage.sha256_file(stored),
                         "application/octet-stream")
    except storage.StorageError as exc:
        log.error("upload not stored: %s", exc)
        model.delete()
        raise Unavailable("object storage is unreachable; upload the model again in a "
                          "moment") from None


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
    quotas.check_tuning(req.tuning)
    model, shapes = resolve(user, req)
    with transaction.atomic():
        quotas.per_user_lock(user)
        quotas.check_active_jobs(user)
        quotas.check_storage(user)
        job = CompileJob.objects.create(owner=user, model=model, input_shapes=shapes,
                                        **req.job_fields())
        transaction.on_commit(lambda: enqueue(job))
    return job


def send(job: CompileJob) -> None:
    """Send the job's task (again); the time is kept so a lost message is sent again."""
    result = celery.app.send_task(
        celery.COMPILE_JOB, args=[str(job.id)], task_id=str(job.id),
        queue=fleet.queue_for(job.target),
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5})
    CompileJob.objects.filter(pk=job.pk).update(sent_at=timezone.now())
    CompileJob.objects.filter(pk=job.pk, task_id="").update(task_id=result.id)


def enqueue(job: CompileJob) -> None:
    """Hand the job id to the broker; if that fails the job fails now instead of waiting."""
    try:
        send(job)
    except Exception as exc:  # noqa: BLE001  kombu/redis raise many types; all mean "not queued"
        log.error("could not queue job %s: %s", job.id, exc)
        CompileJob.objects.filter(pk=job.pk).update(
            state=JobState.FAILED, finished_at=timezone.now(),
            error=f"the job queue is unreachable ({type(exc).__name__}); submit the job again "
                  "in a moment")
        raise Unavailable("the job queue is unreachable; the job was not started, "
                          "try again in a moment") from None


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
    """Only a succeeded job's artifacts are served (they are recorded with its success)."""
    job = owned_job(user, job_id)
    if job.state != JobState.SUCCEEDED:
        raise NotFound(f"artifact {name!r} (the job is {job.state}; artifacts appear when it "
                       "succeeds)")
    artifact = job.artifacts.filter(name=name).first()
    if artifact is None:
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
        celery.app.control.revoke(job.task_id or str(job.id))
    except Exception as exc:  # noqa: BLE001  the broker being down must not block a cancel
        log.warning("could not revoke task for %s: %s", job.id, exc)
