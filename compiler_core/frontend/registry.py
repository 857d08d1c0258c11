"""Converters from ONNX ops to graph IR, one per op and opset version (like TVM's _impl_vN)."""
from __future__ import annotations

from typing import Callable

CONVERTERS: dict[str, dict[int, Callable]] = {}


def converter(op_type: str, since: int = 1):
    """Register `fn(cx, inputs) -> outputs` for `op_type` from opset `since` on."""
    def register(fn):
        versions = CONVERTERS.setdefault(op_type, {})
        if since in versions:
            raise ValueError(f"two converters for {op_type} since opset {since}")
        versions[since] = fn
        return fn
    return register


def find_converter(op_type: str, opset: int) -> Callable | None:
    from . import converters  # noqa: F401  importing them registers every converter
    versions = CONVERTERS.get(op_type, {})
    usable = [v for v in versions if v <= opset]
    return versions[max(usable)] if usable else None
