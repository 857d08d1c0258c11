"""The one place where the API turns exceptions into responses.

Every refusal is a typed exception of webapp/jobs/errors.py that carries its status; this
module answers it as `{"error": message}`. Errors the framework raises (a body that does
not parse or validate, a body over the size limit, Django's 404) are first translated into
those types, so their statuses come from the same table. Anything else is a bug: it is
logged with its traceback and answered as a 500 with a message, never a stack trace.
"""
from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.http.multipartparser import MultiPartParserError
from django.http import Http404
from ninja.errors import HttpError, ValidationError

from webapp.jobs.errors import NotFound, RateLimited, RequestError, TooLarge, Unauthenticated
from webapp.jobs.validation import describe_errors

log = logging.getLogger(__name__)
INTERNAL = ("internal server error; the administrators can find the details in the server "
            "log")


def refusal(api, request, exc: RequestError):
    response = api.create_response(request, {"error": exc.message}, status=exc.status)
    if isinstance(exc, RateLimited):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _without_source(error: dict) -> dict:
    # ninja's locations start with the source ("body", "query", ...) and, for a JSON body,
    # the parameter's name: neither means anything to the caller.
    loc = error["loc"][2:] if error["loc"][:1] == ("body",) else error["loc"][1:]
    return {**error, "loc": loc}


def invalid(api, request, exc: ValidationError):
    message = describe_errors([_without_source(e) for e in exc.errors])
    return refusal(api, request, RequestError(message))


def framework_error(api, request, exc: HttpError):
    if exc.status_code == 401:
        return refusal(api, request, Unauthenticated(str(exc)))
    cause = exc.__cause__  # ninja wraps the JSON parser's error
    detail = f"the request body is not valid JSON: {cause}" if cause else str(exc)
    return refusal(api, request, RequestError(detail))


def unexpected(api, request, exc: Exception):
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return api.create_response(request, {"error": INTERNAL}, status=500)


HANDLERS = {
    RequestError: refusal,
    ValidationError: invalid,
    HttpError: framework_error,
    RequestDataTooBig: lambda api, request, exc: refusal(
        api, request, TooLarge("the request body is too large")),
    MultiPartParserError: lambda api, request, exc: refusal(api, request, RequestError(
        f"the multipart/form-data body cannot be read ({exc}); send the model as field "
        "'file' of a well-formed multipart body")),
    Http404: lambda api, request, exc: refusal(api, request, NotFound("the resource")),
    Exception: unexpected,
}


def install(api) -> None:
    for exc_class, handler in HANDLERS.items():
        api.add_exception_handler(exc_class, lambda request, exc, h=handler: h(api, request, exc))
