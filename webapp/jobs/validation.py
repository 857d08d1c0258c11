"""The compile-job request, declared once for the REST API, the console and the OpenAPI
document, and its checks against the uploaded model.

`JobRequest` is a pydantic model: the API parses request bodies with it (django-ninja),
the console builds one from its form, and the schema of `POST /api/v1/jobs` is generated
from it. A new optional compile option is one more field line here plus the column that
stores it on `CompileJob` (`job_fields()` copies every option to the job). Checks that need
the database (the model belongs to the caller, shapes fit its inputs) run afterwards, in
`resolve`, and raise the typed errors of `errors.py`.
"""
from __future__ import annotations

import re
import uuid
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from compiler_core.errors import CompileError
from compiler_core.passes.weight_precision import WEIGHT_DTYPES, check_weight_dtype
from compiler_core.targets import all_targets, get_target

from .errors import NotFound, RequestError
from .models import UploadedModel

MAX_THREADS = 64
MAX_TUNE_TRIALS = 100_000
MAX_TUNE_SECONDS = 24 * 3600
MAX_DIM = 9_999_999
# the text form of a shape: dimensions of 1 to 7 digits (<= MAX_DIM) separated by x or ,
SHAPE_TEXT = r"^ *[1-9][0-9]{0,6}( *[x,] *[1-9][0-9]{0,6})* *$"
TARGETS = tuple(all_targets())


def _whole_number(value):
    # JSON Schema's "integer" is any number with a zero fraction (2.0 is one); booleans and
    # strings are not numbers, though Python and pydantic's lax mode would take them.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"must be a whole number, got {value!r}")
    return int(value)


def Integer(low: int, high: int):  # a type, so named like one
    """An integer from low to high, in the JSON Schema sense."""
    return Annotated[int, BeforeValidator(_whole_number), Field(ge=low, le=high)]


Dim = Integer(1, MAX_DIM)
ShapeText = Annotated[str, Field(pattern=SHAPE_TEXT, examples=["1x3x224x224"])]


class Tuning(BaseModel):
    """An autotuning budget: a number of trials, seconds, or both."""

    model_config = ConfigDict(extra="forbid")
    trials: Integer(1, MAX_TUNE_TRIALS) | None = None
    seconds: Integer(1, MAX_TUNE_SECONDS) | None = None


class JobRequest(BaseModel):
    """POST /api/v1/jobs: compile an uploaded model for a target."""

    model_config = ConfigDict(extra="forbid")
    model: uuid.UUID = Field(description="the id returned by POST /api/v1/models")
    target: Literal[TARGETS] = Field(  # type: ignore[valid-type]
        "native", description="a name from GET /api/v1/targets")
    input_shapes: dict[str, list[Dim] | ShapeText] = Field(
        default_factory=dict, description="required for every input with symbolic "
        'dimensions: {"x": [1, 3, 224, 224]} or {"x": "1x3x224x224"}')
    opt_level: Integer(0, 3) = 3
    tuning: Tuning | None = Field(None, description="no tuning when null")
    threads: Integer(1, MAX_THREADS) = 1
    weight_dtype: Literal[WEIGHT_DTYPES] = Field(  # type: ignore[valid-type]
        "float32", description="store dense and recurrent weights at this precision; float16 "
        "and int8 report their measured error against float32 in results.weight_precision")

    @field_validator("target", mode="before")
    @classmethod
    def _known_target(cls, target):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; valid targets: {', '.join(TARGETS)}")
        return target

    @field_validator("weight_dtype", mode="before")
    @classmethod
    def _known_weight_dtype(cls, weight_dtype):
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"unknown weight_dtype {weight_dtype!r}; valid: "
                             f"{', '.join(WEIGHT_DTYPES)}")
        return weight_dtype

    @model_validator(mode="after")
    def _target_widens_the_weights(self):
        """float16/int8 weights need conversions the target's CPU may lack (F16C, AVX2)."""
        try:
            check_weight_dtype(self.weight_dtype, get_target(self.target).spec)
        except CompileError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("input_shapes", mode="before")
    @classmethod
    def _parse_shapes(cls, raw):
        if not isinstance(raw, dict):
            raise ValueError('input_shapes must be an object like {"x": [1, 3, 224, 224]}')
        return {name: parse_shape(name, value) for name, value in raw.items()}

    @field_validator("tuning")
    @classmethod
    def _empty_tuning_is_none(cls, tuning: Tuning | None) -> Tuning | None:
        return tuning if tuning and (tuning.trials or tuning.seconds) else None

    def job_fields(self) -> dict:
        """The options a CompileJob stores as they are (model and shapes are resolved)."""
        fields = self.model_dump(exclude={"model", "input_shapes", "tuning"})
        return {**fields, "tuning": self.tuning.model_dump(exclude_none=True)
                if self.tuning else None}


def parse_shape(name: str, raw) -> list[int]:
    """[1, 3, 224, 224] or "1x3x224x224" -> [1, 3, 224, 224], every dimension in range."""
    if isinstance(raw, str):
        if not re.fullmatch(SHAPE_TEXT, raw):
            raise ValueError(f"input_shapes[{name!r}] = {raw!r} is not a shape like 1x3x224x224")
        raw = [int(d) for d in re.split(r"[x,]", raw)]
    if not isinstance(raw, list):
        raise ValueError(f"input_shapes[{name!r}] must be a list of integers")
    try:
        raw = [_whole_number(d) for d in raw]
    except ValueError as exc:
        raise ValueError(f"input_shapes[{name!r}]: every dimension {exc}") from None
    if any(d < 1 or d > MAX_DIM for d in raw):
        raise ValueError(f"input_shapes[{name!r}] = {raw}: every dimension must be between 1 "
                         f"and {MAX_DIM}")
    return raw


# ---------------------------------------------------------------- pydantic errors as text

def _where(loc) -> str:
    return ".".join(str(part) for part in loc)


def describe_error(error: dict) -> str:
    """One pydantic error as a sentence that names the field and what to send instead."""
    where = _where(error["loc"])
    kind = error["type"]
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"unknown fields ['{where}']"
    got = f" (got {error['input']!r})" if "input" in error else ""
    return f"{where}: {error['msg']}{got}" if where else f"{error['msg']}{got}"


def describe_errors(errors: list[dict]) -> str:
    return "; ".join(describe_error(e) for e in errors)


def parse_job_request(data) -> JobRequest:
    """The console's way in: a dict built from the form, the API's wording for errors."""
    try:
        return JobRequest.model_validate(data)
    except pydantic.ValidationError as exc:
        raise RequestError(describe_errors(exc.errors(include_url=False))) from None


# ---------------------------------------------------------------- checks against the model

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


def _declared_shape(spec: dict) -> list[int]:
    declared = spec.get("shape")
    if declared is None or any(not isinstance(d, int) or d <= 0 for d in declared):
        name = spec["name"]
        example = "x".join(str(d) if isinstance(d, int) and d > 0 else "1"
                           for d in declared or [1])
        raise RequestError(f"input {name!r} has symbolic dimensions {declared}; give its "
                           f'shape in input_shapes, e.g. {{"{name}": "{example}"}}')
    return list(declared)


def resolve_input_shapes(model: UploadedModel, given: dict) -> dict[str, list[int]]:
    """Every input of the model with a concrete shape; symbolic dims must be given."""
    specs = {i["name"]: i for i in model.inputs}
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise RequestError(f"input_shapes names unknown inputs {unknown}; the model's inputs "
                           f"are {sorted(specs)}")
    shapes = {}
    for name, spec in specs.items():
        if name in given:
            check_shape_against_model(spec, given[name])
            shapes[name] = given[name]
        else:
            shapes[name] = _declared_shape(spec)
    return shapes


def resolve(user, req: JobRequest) -> tuple[UploadedModel, dict[str, list[int]]]:
    """The caller's model and a concrete shape for each of its inputs."""
    model = owned_model(user, req.model)
    return model, resolve_input_shapes(model, req.input_shapes)
