"""The API's request plumbing: authentication, method checks, JSON bodies and JSON errors."""
from __future__ import annotations

import functools
import json
import logging

from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from webapp.accounts.models import ApiToken
from webapp.jobs.errors import RequestError

log = logging.getLogger(__name__)
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def error(status: int, message: str, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def authenticate(request):
    """Bearer token for clients; the console's session (with CSRF) for the browser."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header:
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise RequestError("the Authorization header must be 'Bearer <token>'", 401)
        user = ApiToken.authenticate(raw.strip())
        if user is None:
            raise RequestError("the API token is invalid or has been revoked", 401)
        return user
    if request.user.is_authenticated:
        if request.method not in SAFE_METHODS:
            reject = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if reject is not None:
                raise RequestError("CSRF check failed: send the X-CSRFToken header", 403)
        return request.user
    raise RequestError("authentication required: send 'Authorization: Bearer <token>' "
                       "(create one with `manage.py create_api_token USERNAME` or on the "
                       "Tokens page)", 401)


def json_body(request) -> dict:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise RequestError("the request body is too large", 413) from None
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None


def check_body_size(request, limit: int) -> None:
    # Refuse oversized bodies before anything (CSRF check, form parsing) reads them.
    size = int(request.META.get("CONTENT_LENGTH") or 0)
    if size > limit:
        raise RequestError(f"the request body is {size / 2**20:.1f} MiB; the limit is "
                           f"{limit / 2**20:.0f} MiB", 413)


def endpoint(*methods: str, auth: bool = True, max_body=None):
    """Wrap an API view: allowed methods, body size, authentication, errors as JSON."""
    allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())

    def wrap(view):
        @csrf_exempt  # token clients have no CSRF cookie; session requests are checked above
        @functools.wraps(view)
        def handler(request, *args, **kwargs):
            if request.method not in allowed:
                response = error(405, f"method {request.method} not allowed; use "
                                      f"{', '.join(sorted(methods))}")
                response["Allow"] = ", ".join(sorted(allowed))
                return response
            try:
                if max_body is not None:
                    check_body_size(request, max_body())
                if auth:
                    request.api_user = authenticate(request)
                return view(request, *args, **kwargs)
            except RequestError as exc:
                return error(exc.status, exc.message)
            except RequestDataTooBig:
                return error(413, "the request body is too large")
        return handler
    return wrap
