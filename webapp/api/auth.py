"""Who is calling: a bearer token (clients, CI) or the console's session (the browser).

Failures raise the typed errors of webapp/jobs/errors.py, which the API answers as JSON.
"""
from __future__ import annotations

from django.middleware.csrf import CsrfViewMiddleware
from ninja.security.base import AuthBase

from webapp.accounts.models import ApiToken
from webapp.jobs.errors import Forbidden, Unauthenticated

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
HOW_TO_AUTHENTICATE = ("authentication required: send 'Authorization: Bearer <token>' (create "
                       "one with `manage.py create_api_token USERNAME` or on the Tokens page)")


def bearer_user(header: str):
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    user = ApiToken.authenticate(raw.strip())
    if user is None:
        raise Unauthenticated("the API token is invalid or has been revoked")
    return user


def session_user(request):
    # Session requests come from the console's own pages, so unsafe ones need CSRF.
    if request.method not in SAFE_METHODS:
        reject = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
        if reject is not None:
            raise Forbidden("CSRF check failed: send the X-CSRFToken header")
    return request.user


class TokenOrSession(AuthBase):
    """Bearer token for clients; the console's session (with CSRF) for the browser."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __call__(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header:
            return bearer_user(header)
        if request.user.is_authenticated:
            return session_user(request)
        raise Unauthenticated(HOW_TO_AUTHENTICATE)
