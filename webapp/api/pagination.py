"""?page=N&page_size=M on list endpoints; the answer says how to get the next page."""
from __future__ import annotations

from django.conf import settings
from django.core.paginator import EmptyPage, Paginator
from ninja import Schema
from pydantic import Field

from webapp.jobs.errors import NotFound

MAX_PAGE_SIZE = 100


class PageParams(Schema):
    page: int = Field(1, ge=1)
    page_size: int = Field(default_factory=lambda: settings.API_PAGE_SIZE, ge=1,
                           le=MAX_PAGE_SIZE)


def paginate(request, queryset, params: PageParams) -> dict:
    """One page of queryset as the fields of schemas.Page (items still database rows)."""
    paginator = Paginator(queryset, params.page_size)
    try:
        page = paginator.page(params.page)
    except EmptyPage:
        raise NotFound(f"page {params.page} (there are {paginator.num_pages})") from None

    def link(n):
        return f"{request.path}?page={n}&page_size={params.page_size}"
    return {"count": paginator.count, "page": params.page, "page_size": params.page_size,
            "next": link(params.page + 1) if page.has_next() else None,
            "previous": link(params.page - 1) if page.has_previous() else None,
            "results": list(page.object_list)}
