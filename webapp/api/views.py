"""REST API v1 (DESIGN.md). Views stay small: validation lives in webapp/jobs/validation.py."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpResponseRedirect, JsonResponse

from compiler_core.targets import all_targets
from webapp.jobs import services, storage
from webapp.jobs.errors import RequestError
from webapp.jobs.models import CompileJob, JobState, UploadedModel
from webapp.jobs.validation import owned_model, parse_job_request

from .http import endpoint, json_body
from .pagination import paginate
from .serializers import job_detail_json, job_json, model_json


def _upload_limit() -> int:
    return settings.MAX_MODEL_BYTES + 64 * 1024  # multipart framing around the file


@endpoint("GET", "POST", max_body=_upload_limit)
def models(request):
    if request.method == "POST":
        return upload_model(request)
    qs = UploadedModel.objects.filter(owner=request.api_user)
    return JsonResponse(paginate(request, qs, model_json))


def upload_model(request):
    model = services.ingest_upload(request.api_user, request.FILES.get("file"),
                                   request.POST.get("name", ""))
    return JsonResponse(model_json(model), status=201)


@endpoint("GET")
def model_detail(request, model_id):
    return JsonResponse(model_json(owned_model(request.api_user, model_id)))


@endpoint("GET", "POST")
def jobs(request):
    if request.method == "POST":
        job = services.submit_job(request.api_user,
                                  parse_job_request(request.api_user, json_body(request)))
        return JsonResponse(job_json(job, request), status=201)
    qs = CompileJob.objects.filter(owner=request.api_user).select_related("model")
    if request.GET.get("model"):
        qs = qs.filter(model=owned_model(request.api_user, request.GET["model"]))
    if request.GET.get("state"):
        if request.GET["state"] not in JobState.values:
            raise RequestError(f"state must be one of {', '.join(JobState.values)}")
        qs = qs.filter(state=request.GET["state"])
    return JsonResponse(paginate(request, qs.prefetch_related("artifacts"),
                                 lambda j: job_json(j, request)))


@endpoint("GET")
def job_detail(request, job_id):
    return JsonResponse(job_detail_json(services.owned_job(request.api_user, job_id), request))


@endpoint("POST")
def job_cancel(request, job_id):
    job = services.cancel_job(services.owned_job(request.api_user, job_id))
    return JsonResponse(job_json(job, request))


@endpoint("GET")
def job_artifact(request, job_id, name):
    """302 to a presigned, expiring S3 URL; ?redirect=0 answers the URL as JSON instead."""
    artifact = services.owned_artifact(request.api_user, job_id, name)
    url = storage.presigned_url(artifact.storage_key, artifact.name)
    if request.GET.get("redirect") == "0":
        return JsonResponse({"name": artifact.name, "sha256": artifact.sha256,
                             "size": artifact.size, "url": url})
    response = HttpResponseRedirect(url)
    response["X-Checksum-SHA256"] = artifact.sha256
    return response


@endpoint("GET")
def targets(request):
    return JsonResponse({"results": [t.as_dict() for t in all_targets().values()]})
