"""Anything under /api/ answers in JSON, even Django's own 404s and unexpected errors."""
from __future__ import annotations

import logging

from django.http import JsonResponse

log = logging.getLogger(__name__)

MESSAGES = {400: "bad request", 403: "forbidden", 404: "not found",
            405: "method not allowed", 413: "request too large", 500: "internal server error"}


def _is_api(request) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def _as_json(request, response) -> JsonResponse:
    status = response.status_code
    message = MESSAGES.get(status, "error")
    if status == 405:
        message = f"method {request.method} not allowed; use {response.get('Allow', '')}"
    replacement = JsonResponse({"error": message}, status=status)
    if response.has_header("Allow"):
        replacement["Allow"] = response["Allow"]
    return replacement


class JsonErrorsForApiMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (_is_api(request) and response.status_code >= 400
                and not response.get("Content-Type", "").startswith("application/json")):
            return _as_json(request, response)
        return response

    def process_exception(self, request, exception):
        if not _is_api(request):
            return None
        log.exception("unhandled error on %s", request.path)
        return JsonResponse({"error": "internal server error; the administrators can find "
                                      "the details in the server log"}, status=500)
