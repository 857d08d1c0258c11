"""GET /healthz: the state of the database, the broker and the storage."""
from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from kombu import Connection

from webapp.jobs import storage


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, connection.vendor
    except Exception as exc:  # noqa: BLE001  any failure is reported, not raised
        return False, f"{type(exc).__name__}: {exc}"


def check_broker() -> tuple[bool, str]:
    try:
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
        return True, "reachable"
    except Exception as exc:  # noqa: BLE001
        return False, f"{type(exc).__name__}: {exc}"


def healthz(request):
    checks = {"database": check_database(), "broker": check_broker(),
              "storage": storage.health()}
    ok = all(passed for passed, _ in checks.values())
    body = {"status": "ok" if ok else "degraded",
            **{name: {"ok": passed, "detail": detail} for name, (passed, detail) in checks.items()}}
    return JsonResponse(body, status=200 if ok else 503)
