"""Validation of compile-job requests, in one place for the REST API and the console."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from compiler_core.targets import all_targets

from .errors import NotFound, RequestError
from .models import UploadedModel

MAX_THREADS = 64
MAX_TUNE_TRIALS = 100_000
MAX_TUNE_SECONDS = 24 * 3600
MAX_DIM = 1 << 20


@dataclass
class JobRequest:
    model: UploadedModel
    target: str
    input_shapes: dict[str, list[int]]
    opt_level: int
    tuning: dict | None
    threads: int


def owned_model(user, model_id) -> UploadedModel:
    """The user's model, or 404 — also for other users' models, so ids leak nothing."""
    try:
        key = uuid.UUID(str(model_id))
    except ValueError:
        raise NotFound("model") from None
    model = UploadedModel.objects.filter(owner=user, id=key).first()
    if model is None:
        raise NotFound("model")
    return model


def parse_shape(name: str, raw) -> list[int]:
    """[1, 3, 224, 224] or "1x3x224x224" -> [1, 3, 224, 224]."""
    if isinstance(raw, str):
        if not re.fullmatch(r"\s*\d+(\s*[x,]\s*\d+)*\s*", raw):
            raise RequestError(f"input_shapes[{name!r}] = {raw!r} is not a shape like 1x3x224x224")
        raw = [int(d) for d in re.split(r"[x,]", raw)]
    if not isinstance(raw, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                            for d in raw):
        raise RequestError(f"input_shapes[{name!r}] must be a list of integers")
    if any(d < 1 or d > MAX_DIM for d in raw):
        raise RequestError(f"input_shapes[{name!r}] = {raw}: every dimension must be between 1 "
                           f"and {MAX_DIM}")
    return raw


def check_shape_against_model(spec: dict, shape: list[int]) -> None:
    declared = spec.get("shape")
    if declared is None:
        return
    if len(declared) != len(shape):
        raise RequestError(f"input {spec['name']!r} has {len(declared)} dimensions "
                           f"{declared}, input_shapes gives {len(shape)}: {shape}")
    for want, got in zip(declared, shape):
        if isinstance(want, int) and want > 0 and want != got:
            raise RequestError(f"input {spec['name']!r} is declared {declared}; input_shapes "
                               f"gives {shape}, which changes a fixed dimension")


def resolve_input_shapes(model: UploadedModel, raw) -> dict[str, list[int]]:
    """Every input of the model with a concrete shape; symbolic dims must be given."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise RequestError('input_shapes must be an object like {"x": [1, 3, 224, 224]}')
    specs = {i["name"]: i for i in model.inputs}
    unknown = sorted(set(raw) - set(specs))
    if unknown:
        raise RequestError(f"input_shapes names unknown inputs {unknown}; the model's inputs "
                           f"are {sorted(specs)}")
    shapes = {}
    for name, spec in specs.items():
        if name in raw:
            shapes[name] = parse_shape(name, raw[name])
            check_shape_against_model(spec, shapes[name])
            continue
        declared = spec.get("shape")
        if declared is None or any(not isinstance(d, int) or d <= 0 for d in declared):
            example = "x".join(str(d) if isinstance(d, int) and d > 0 else "1"
                               for d in declared or [1])
            raise RequestError(f"input {name!r} has symbolic dimensions {declared}; give its "
                               f'shape in input_shapes, e.g. {{"{name}": "{example}"}}')
        shapes[name] = list(declared)
    return shapes


def parse_int(data: dict, key: str, default: int, low: int, high: int) -> int:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RequestError(f"{key} must be an integer from {low} to {high}, got {value!r}")
    return value


def parse_tuning(raw) -> dict | None:
    """None (no tuning), {"trials": N} or {"seconds": S}."""
    if raw in (None, False, {}, ""):
        return None
    if not isinstance(raw, dict) or set(raw) - {"trials", "seconds"} or not raw:
        raise RequestError('tuning must be null, {"trials": N} or {"seconds": S}')
    tuning = {}
    if raw.get("trials") is not None:
        tuning["trials"] = parse_int(raw, "trials", 0, 1, MAX_TUNE_TRIALS)
    if raw.get("seconds") is not None:
        tuning["seconds"] = parse_int(raw, "seconds", 0, 1, MAX_TUNE_SECONDS)
    return tuning or None


def parse_target(raw) -> str:
    target = raw or "native"
    targets = all_targets()
    if target not in targets:
        raise RequestError(f"unknown target {target!r}; valid targets: {', '.join(targets)}")
    return target


def parse_job_request(user, data) -> JobRequest:
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    unknown = sorted(set(data) - {"model", "target", "input_shapes", "opt_level", "tuning",
                                  "threads"})
    if unknown:
        raise RequestError(f"unknown fields {unknown}")
    if not data.get("model"):
        raise RequestError("model is required: the id returned by POST /api/v1/models")
    model = owned_model(user, data["model"])
    return JobRequest(model=model, target=parse_target(data.get("target")),
                      input_shapes=resolve_input_shapes(model, data.get("input_shapes")),
                      opt_level=parse_int(data, "opt_level", 3, 0, 3),
                      tuning=parse_tuning(data.get("tuning")),
                      threads=parse_int(data, "threads", 1, 1, MAX_THREADS))
