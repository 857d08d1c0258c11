"""Per-user request rates, counted in Django's cache.

The cache is Redis (settings.CACHES), so every web process and every server counts into
the same keys: INCR is atomic there. A sliding-window counter keeps two fixed windows per
user and weighs the previous one by how much of it still overlaps the last `window`
seconds, so a burst at a window boundary cannot double the rate. Refused requests are not
counted, so a client that waits as told by Retry-After gets in.
"""
from __future__ import annotations

import logging
import math
import time

from django.core.cache import cache

from .errors import RateLimited

log = logging.getLogger(__name__)


def _key(scope: str, who, index: int) -> str:
    return f"rate:{scope}:{who}:{index}"


def wait_seconds(previous: int, current: int, limit: int, elapsed: float,
                 window: float) -> int:
    """Seconds until one more request fits, given the counts without the refused one."""
    if current < limit:
        # the previous window's weight must shrink until previous * (1 - e/window) fits
        fits_at = window * (1 - (limit - 1 - current) / previous) if previous else elapsed
        return max(1, math.ceil(fits_at - elapsed))
    # this window is full by itself: wait into the next one, where it is the previous
    fits_at = window * (1 - (limit - 1) / current)
    return max(1, math.ceil(window - elapsed + fits_at))


def take(scope: str, who, limit: int, window: int, what: str, setting: str) -> None:
    """Count one `scope` request for `who`; raise RateLimited when over `limit` per `window`
    seconds. `what` names the requests and `setting` the variable that sets the limit, for
    the message. A limit of 0 means no limit."""
    if limit <= 0:
        return
    now = time.time()
    index, elapsed = divmod(now, window)
    current_key = _key(scope, who, int(index))
    try:
        cache.add(current_key, 0, timeout=2 * window)
        current = cache.incr(current_key)
        previous = cache.get(_key(scope, who, int(index) - 1), 0)
    except Exception as exc:  # noqa: BLE001  redis raises many types; all mean "no count"
        # Fair use must not take the service down with the cache: count nothing, say so.
        log.warning("rate limit %s not checked, the cache is unreachable: %s", scope, exc)
        return
    if previous * (window - elapsed) / window + current <= limit:
        return
    cache.decr(current_key)
    retry = wait_seconds(previous, current - 1, limit, elapsed, window)
    raise RateLimited(f"too many {what}: the limit is {limit} per {window} s per user "
                      f"({setting}); try again in {retry} s", retry_after=retry)
