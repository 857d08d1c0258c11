"""?page=N&page_size=M on list endpoints; the answer says how to get the next page."""
from __future__ import annotations

from django.conf import settings
from django.core.paginator import EmptyPage, Paginator

from webapp.jobs.errors import RequestError

MAX_PAGE_SIZE = 100


def _positive(request, key: str, default: int) -> int:
    raw = request.GET.get(key, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise RequestError(f"{key} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise RequestError(f"{key} must be a positive integer, got {value}")
    return value


def paginate(request, queryset, serialize) -> dict:
    size = min(_positive(request, "page_size", settings.API_PAGE_SIZE), MAX_PAGE_SIZE)
    number = _positive(request, "page", 1)
    paginator = Paginator(queryset, size)
    try:
        page = paginator.page(number)
    except EmptyPage:
        raise RequestError(f"page {number} does not exist; there are {paginator.num_pages}",
                           404) from None

    def link(n):
        return f"{request.path}?page={n}&page_size={size}"
    return {"count": paginator.count, "page": number, "page_size": size,
            "next": link(number + 1) if page.has_next() else None,
            "previous": link(number - 1) if page.has_previous() else None,
            "results": [serialize(item) for item in page.object_list]}
