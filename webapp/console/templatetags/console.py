"""Formatting filters for the console templates."""
from __future__ import annotations

from django import template

from webapp.console.charts import fmt_ms

register = template.Library()


def _number(value):
    """Missing template values arrive as "" or None: both mean 'no number'."""
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def ms(value):
    value = _number(value)
    return "—" if value is None else fmt_ms(value)


@register.filter
def filesize(value):
    value = float(value or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024


@register.filter
def shape(dims):
    if dims is None:
        return "unknown"
    return " × ".join(str(d) for d in dims) or "scalar"


@register.filter
def is_symbolic(dim):
    return not isinstance(dim, int) or dim <= 0


@register.filter
def percent(value):
    return f"{(_number(value) or 0) * 100:.0f}"


@register.filter
def speedup(value):
    value = _number(value)
    return "—" if value is None else f"{value:.2f}×"


@register.filter
def sci(value):
    value = _number(value)
    return "—" if value is None else f"{value:.2e}"


@register.filter
def get(mapping, key):
    return (mapping or {}).get(key)
