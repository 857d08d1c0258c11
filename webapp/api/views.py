"""REST API v1 (docs/architecture.md) on django-ninja.

Why django-ninja rather than pydantic models behind hand-written views: it validates
requests with the same pydantic models it serializes responses with, and generates
`/api/v1/openapi.json` from both, so the contract has one source. Views stay small: request
bodies are `JobRequest` (webapp/jobs/validation.py), responses are webapp/api/schemas.py,
refusals are the typed errors of webapp/jobs/errors.py, answered in webapp/api/errors.py.
Each operation lists the refusals it can make; their statuses and descriptions in the
schema come from the error classes.
"""
from __future__ import annotations

from typing import Literal

from django.conf import settings
from django.http import HttpResponseRedirect
from ninja import File, Form, NinjaAPI, Query, Status
from ninja.decorators import decorate_view
from ninja.files import UploadedFile
from pydantic import Field

from compiler_core.version import __version__
from webapp.jobs import fleet, services, storage
from webapp.jobs.errors import (Conflict, Forbidden, NotFound, QuotaExceeded, RateLimited,
                                RequestError, TooLarge, Unauthenticated, Unavailable)
from webapp.jobs.models import CompileJob, JobState, UploadedModel
from webapp.jobs.validation import JobRequest, owned_model

from . import errors
from .auth import TokenOrSession
from .pagination import PageParams, paginate
from .schemas import ArtifactLink, Error, Job, JobDetail, Model, Page, TargetList


class Api(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        # paths relative to the server URL /api/v1, as clients write them
        return super().get_openapi_schema(path_prefix="", path_params=path_params)


api = Api(
    title="Tensorforge API", version=f"1 (compiler {__version__})", urls_namespace="api",
    description="Upload ONNX models, compile them for a target, compare their latency with "
                "ONNX Runtime and download the artifacts. Errors are JSON {\"error\": ...}.",
    servers=[{"url": "/api/v1"}], docs_url=None, auth=TokenOrSession())
errors.install(api)
READ = (Unauthenticated, RequestError)
WRITE = (Unauthenticated, Forbidden, RequestError)


def operation(method: str, path: str, answers: dict, *refusals, **kwargs):
    """Register a view; the schema lists `answers` (status -> schema) and each refusal's
    status with its meaning."""
    responses = {**answers, **{r.status: Error for r in refusals}}
    described: dict[int, dict] = {}
    for r in refusals:  # refusals that share a status share its description
        seen = described.setdefault(r.status, {"description": r.description})
        if r.description not in seen["description"]:
            seen["description"] += "; or " + r.description
    return api.api_operation([method], path, response=responses,
                             openapi_extra={"responses": described}, **kwargs)


# ---------------------------------------------------------------- models

def _upload_limit() -> int:
    return settings.MAX_MODEL_BYTES + 64 * 1024  # multipart framing around the file


def refuse_large_bodies(run):
    """Refuse an oversized upload before anything (auth's CSRF check, form parsing) reads it."""
    def checked(request, *args, **kwargs):
        size = int(request.META.get("CONTENT_LENGTH") or 0)
        if size > _upload_limit():
            return errors.refusal(api, request, TooLarge(
                f"the request body is {size / 2**20:.1f} MiB; the limit is "
                f"{settings.MAX_MODEL_BYTES / 2**20:.0f} MiB"))
        return run(request, *args, **kwargs)
    return checked


@operation("GET", "/models", {200: Page[Model]}, *READ, NotFound, summary="List your models",
           url_name="models")
def list_models(request, params: Query[PageParams]):
    return paginate(request, UploadedModel.objects.filter(owner=request.auth), params)


@decorate_view(refuse_large_bodies)
@operation("POST", "/models", {201: Model}, *WRITE, TooLarge, QuotaExceeded, RateLimited,
           Unavailable, summary="Upload an ONNX model")
def upload_model(request, file: File[UploadedFile], name: Form[str] = ""):
    return Status(201, services.ingest_upload(request.auth, file, name))


@operation("GET", "/models/{id}", {200: Model}, *READ, NotFound, summary="One of your models",
           url_name="model-detail")
def model_detail(request, id: str):
    return owned_model(request.auth, id)


# ---------------------------------------------------------------- jobs

class JobFilters(PageParams):
    # None defaults (not `| None`): a query string has no null to send
    model: str = Field(None, description="only this model's jobs")
    state: Literal[tuple(JobState.values)] = Field(None)  # type: ignore[valid-type]


@operation("GET", "/jobs", {200: Page[Job]}, *READ, NotFound,
           summary="List your compile jobs", url_name="jobs")
def list_jobs(request, params: Query[JobFilters]):
    jobs = CompileJob.objects.filter(owner=request.auth).select_related("model")
    if params.model:
        jobs = jobs.filter(model=owned_model(request.auth, params.model))
    if params.state:
        jobs = jobs.filter(state=params.state)
    return paginate(request, jobs.prefetch_related("artifacts"), params)


@operation("POST", "/jobs", {201: Job}, *WRITE, NotFound, QuotaExceeded, Unavailable,
           summary="Submit a compile job")
def submit_job(request, body: JobRequest):
    return Status(201, services.submit_job(request.auth, body))


@operation("GET", "/jobs/{id}", {200: JobDetail}, *READ, NotFound, url_name="job-detail",
           summary="A job's state, stage, progress, results and artifacts")
def job_detail(request, id: str):
    return services.owned_job(request.auth, id)


@operation("POST", "/jobs/{id}/cancel", {200: Job}, *WRITE, NotFound, Conflict,
           summary="Cancel a queued or running job")
def cancel_job(request, id: str):
    return services.cancel_job(services.owned_job(request.auth, id))


@operation("GET", "/jobs/{id}/artifacts/{name}", {200: ArtifactLink, 302: None}, *READ, NotFound,
           url_name="job-artifact",
           summary="Download an artifact: a 302 to an expiring presigned URL, or with "
                   "?redirect=0 that URL as JSON. package.tar.gz is always there")
def job_artifact(request, id: str, name: str, redirect: Literal["0", "1"] = "1"):
    artifact = services.owned_artifact(request.auth, id, name)
    url = storage.presigned_url(artifact.storage_key, artifact.name)
    if redirect == "0":
        return {"name": artifact.name, "size": artifact.size, "sha256": artifact.sha256,
                "url": url}
    response = HttpResponseRedirect(url)
    response["X-Checksum-SHA256"] = artifact.sha256
    return response


# ---------------------------------------------------------------- targets

@operation("GET", "/targets", {200: TargetList}, *READ,
           summary="The targets this deployment compiles for, and where it benchmarks them")
def targets(request):
    return {"results": fleet.target_listing()}
