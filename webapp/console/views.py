"""The web console: server-rendered pages; live parts poll small HTML fragments."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.models import ApiToken
from webapp.api.views import api
from webapp.jobs import services
from webapp.jobs.errors import RequestError
from webapp.jobs.models import STAGE_LABELS, CompileJob, JobState, UploadedModel
from webapp.jobs.validation import owned_model, parse_job_request

from . import charts, forms


def _owned(fn, user, key):
    try:
        return fn(user, key)
    except RequestError:
        raise Http404 from None


@login_required
def models_list(request):
    qs = UploadedModel.objects.filter(owner=request.user).annotate(job_count=Count("jobs")).order_by("-created_at")
    page = Paginator(qs, 25).get_page(request.GET.get("page"))
    return render(request, "console/models.html", {"page": page, "nav": "models",
                                                   "max_bytes": settings.MAX_MODEL_BYTES})


@login_required
def model_detail(request, model_id):
    model = _owned(owned_model, request.user, model_id)
    form_values, error, status = {}, None, 200
    if request.method == "POST":
        form_values = request.POST
        try:
            req = parse_job_request(forms.request_from_post(model, request.POST))
            job = services.submit_job(request.user, req)
            return redirect("console:job", job_id=job.id)
        except RequestError as exc:  # the API's message and status, quotas included
            error, status = exc.message, exc.status
    ops = sorted(model.ops.items(), key=lambda kv: (-kv[1], kv[0]))
    return render(request, "console/model_detail.html", {
        "model": model, "ops": ops, "unsupported": set(model.unsupported_ops),
        "symbolic": forms.symbolic_fields(model), "targets": forms.target_choices(),
        "opt_levels": forms.OPT_LEVELS, "weight_dtypes": forms.WEIGHT_DTYPES,
        "values": form_values, "error": error,
        "jobs": model.jobs.all()[:50], "nav": "models"}, status=status)


def _jobs_context(request):
    qs = CompileJob.objects.filter(owner=request.user).select_related("model")
    state = request.GET.get("state", "")
    if state in JobState.values:
        qs = qs.filter(state=state)
    page = Paginator(qs, 25).get_page(request.GET.get("page"))
    live = any(not j.is_terminal for j in page.object_list)
    return {"page": page, "state": state, "states": JobState.values, "live": live,
            "nav": "jobs"}


@login_required
def jobs_list(request):
    return render(request, "console/jobs.html", _jobs_context(request))


@login_required
def jobs_fragment(request):
    return render(request, "console/_jobs_table.html", _jobs_context(request))


def _job_context(request, job_id):
    job = _owned(services.owned_job, request.user, job_id)
    stages = [{"name": s, "label": STAGE_LABELS[s],
               "status": _stage_status(job, s)} for s in job.stages]
    return {"job": job, "stages": stages, "chart": charts.job_chart(job),
            "tuning": job.tuning_progress, "tuning_chart": charts.tuning_curve(job.tuning_progress),
            "artifacts": job.artifacts.all(), "log_tail": "\n".join(job.log.splitlines()[-30:]),
            "layers": charts.layer_bars(job), "runtimes": RUNTIMES, "nav": "jobs"}


RUNTIMES = [("compiled", "Tensorforge"), ("onnxruntime", "ONNX Runtime")]


def _stage_status(job, stage: str) -> str:
    order = job.stages
    current = order.index(job.stage) if job.stage in order else -1
    here = order.index(stage)
    if job.state == JobState.SUCCEEDED or here < current:
        return "done"
    if here == current:
        return {"running": "active", "failed": "failed", "cancelled": "cancelled"}.get(
            job.state, "pending")
    return "pending"


@login_required
def job_detail(request, job_id):
    return render(request, "console/job_detail.html", _job_context(request, job_id))


@login_required
def job_fragment(request, job_id):
    return render(request, "console/_job_live.html", _job_context(request, job_id))


@login_required
@require_POST
def job_cancel(request, job_id):
    job = _owned(services.owned_job, request.user, job_id)
    try:
        services.cancel_job(job)
        messages.success(request, "The job was cancelled.")
    except RequestError as exc:
        messages.error(request, exc.message)
    return redirect("console:job", job_id=job.id)


@login_required
def compare(request, model_id):
    model = _owned(owned_model, request.user, model_id)
    ids = [i for i in request.GET.getlist("job") if i]
    jobs = model.jobs.filter(id__in=ids) if ids else model.jobs.filter(state=JobState.SUCCEEDED)
    jobs = list(jobs.order_by("created_at")[:8])
    return render(request, "console/compare.html", {
        "model": model, "jobs": jobs, "chart": charts.compare_chart(jobs), "nav": "models"})


@login_required
def tokens(request):
    new_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100] or "token"
        _, new_token = ApiToken.issue(request.user, name)
    return render(request, "console/tokens.html", {
        "tokens": request.user.api_tokens.all(), "new_token": new_token, "nav": "tokens"})


@login_required
@require_POST
def token_revoke(request, token_id):
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token.revoke()
    messages.success(request, f"Token “{token.name}” was revoked; clients using it now get 401.")
    return redirect("console:tokens")


@login_required
def api_docs(request):
    spec = api.get_openapi_schema()
    operations = [{"method": method.upper(), "path": "/api/v1" + path, **op}
                  for path, item in spec["paths"].items() for method, op in item.items()]
    return render(request, "console/api_docs.html", {
        "operations": operations, "schemas": spec["components"]["schemas"], "nav": "docs",
        "base": request.build_absolute_uri("/").rstrip("/")})


def locked_out(request, original_response=None, credentials=None):
    """django-axes' answer to a locked-out sign-in (console or admin): the sign-in page with
    the limit that was hit, status 429."""
    message = (f"Too many failed sign-ins: {settings.LOGIN_FAILURE_LIMIT} for this username "
               f"from this address (TENSORFORGE_LOGIN_FAILURE_LIMIT). Try again in "
               f"{settings.LOGIN_COOLOFF_MINUTES} minutes (TENSORFORGE_LOGIN_COOLOFF_MINUTES).")
    return render(request, "console/login.html", {"locked_out": message,
                                                  "next": request.POST.get("next", "")},
                  status=429)
