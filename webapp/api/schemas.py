"""The response side of the REST contract (docs/architecture.md), declared once.

django-ninja serializes every response through these models and generates the OpenAPI
document from them, so what a client reads and what the schema says cannot drift: a field
that is not declared here is never sent. Every field is required in the response schema
(`json_schema_serialization_defaults_required`): a missing value is sent as null, never
left out. Models read from dicts forbid unknown keys; models read from database rows
(`Record`) pick their declared attributes and say `additionalProperties: false` too.
The request side is `webapp/jobs/validation.py` (JobRequest), shared with the console.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Generic, Literal, TypeVar

from django.urls import reverse
from ninja import Schema
from pydantic import ConfigDict, Field, model_validator

from webapp.jobs.models import STAGES, JobState
from webapp.jobs.validation import WEIGHT_DTYPES, Tuning

T = TypeVar("T")


class Contract(Schema):
    """A JSON object of the API: declared fields only, all of them always present."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class Record(Contract):
    """A contract object read from a database row, which has more attributes than it shows."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})


class Error(Contract):
    error: str = Field(description="what went wrong and what to do about it")


# ---------------------------------------------------------------- models

class TensorSpec(Contract):
    name: str
    dtype: str
    shape: list[int | str] | None = Field(description="strings are symbolic dimensions; "
                                                      "null when the model does not say")


class Model(Record):
    id: uuid.UUID
    name: str
    sha256: str
    size: int = Field(description="bytes")
    opset: int | None
    producer: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    ops: dict[str, int] = Field(description="operator type -> number of nodes")
    unsupported_ops: list[str] = Field(description="operators this compiler cannot compile; "
                                                   "a job for this model fails validation")
    created_at: datetime
    url: str

    @staticmethod
    def resolve_url(obj) -> str:
        return reverse("api:model-detail", args=[obj.id])


# ---------------------------------------------------------------- job results

class LatencyStats(Contract):
    median_ms: float
    mean_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    runs: int


class CompileStats(Contract):
    compile_seconds: float
    arena_bytes: int = Field(description="the preallocated working memory")
    weights_bytes: int
    nodes: int = Field(description="graph nodes after optimisation")
    kernels: int


class KernelTiming(Contract):
    name: str
    op: str
    mean_ms: float


class OutputError(Contract):
    max_abs_err: float
    max_rel_err: float = Field(description="max_abs_err over the output's largest float32 "
                                           "magnitude")


class ReducedLayer(Contract):
    node: str
    op: str
    weights: int = Field(description="weights stored at the reduced precision")


class PrecisionAccuracy(Contract):
    measured_on: str = Field(description="the target whose code ran both builds")
    inputs: str = Field(description="which inputs: the benchmark's (random, seed 0) or given")
    outputs: dict[str, OutputError]
    max_abs_err: float
    max_rel_err: float


class WeightPrecision(Contract):
    """The cost of float16/int8 weights: the same model with float32 weights, run on the
    same inputs, against the artifact."""

    weight_dtype: Literal[WEIGHT_DTYPES]  # type: ignore[valid-type]
    layers: list[ReducedLayer]
    accuracy: PrecisionAccuracy


class SparseLayer(Contract):
    """A weight matrix multiplied block-sparse: its zero blocks are never loaded."""

    onnx_node: str
    weight: str
    shape: list[int] = Field(description="(outputs, inputs)")
    block: str = Field(description="block shape, outputs x inputs, e.g. 1x8")
    density: float = Field(description="fraction of blocks that hold a nonzero")
    estimated_speedup: float = Field(description="the compiler's estimate against dense")


class WhatIf(Contract):
    """Estimated speedups (roofline model, compiler_core/analysis/layer_report.py); null for
    a layer without weights."""

    sparse80: float | None = Field(description="weights 80% zero in 1x8 blocks")
    sparse90: float | None = Field(description="weights 90% zero in 1x8 blocks")
    float16: float | None = Field(description="weights stored as float16")
    int8: float | None = Field(description="weights stored as int8")


class LayerTiming(Contract):
    onnx_node: str = Field(description="its name in the model; Conv#3 for the third unnamed Conv")
    op: str | None = Field(description="its ONNX operator")
    ms: float = Field(description="measured, from the kernels that compute it; a fused "
                                  "kernel's time is split among its ONNX nodes by FLOP share")
    share: float = Field(description="of the kernels' total time, 0..1")
    flops: int
    gflops: float | None
    weight_bytes: int
    activation_bytes: int = Field(description="activations read and written")
    kernels: int = Field(description="kernel calls it took part in")
    intensity: float | None = Field(description="FLOPs per byte moved")
    bound: Literal["compute", "memory"] = Field(
        description="which roofline limit is the lower for it")
    roofline_pct: float | None = Field(description="the roofline time over the measured time")
    what_if: WhatIf = Field(description="the layer's own speedup")
    model_what_if: WhatIf = Field(description="the whole model's speedup")


class AllLayersWhatIf(Contract):
    speedup: float | None
    bandwidth_level: Literal["L2", "L3", "memory"] = Field(
        description="where the smaller weights and the arena would stream from")


class LayerReport(Contract):
    """Time per original ONNX node against the machine's compute and bandwidth limits."""

    total_ms: float = Field(description="the kernels' total (tf_profile)")
    threads: int
    cpu: str
    cpu_model: str
    peak_gflops: float = Field(description="numpy sgemm, times the thread count")
    bandwidth_gbps: float = Field(description="read bandwidth of the level the model fits in")
    bandwidth_level: Literal["L2", "L3", "memory"]
    footprint_bytes: int = Field(description="weights and arena")
    layers: list[LayerTiming] = Field(description="slowest first")
    all_layers: dict[Literal["sparse80", "sparse90", "float16", "int8"], AllLayersWhatIf] = \
        Field(description="the model's speedup with every layer's weights changed")


class JobResults(Contract):
    """What a finished job measured; the benchmark fields are null when it ran none."""

    target: str | None
    stats: CompileStats
    kernel_count: int
    threads: int
    benchmark_host: str | None = Field(
        None, description="the worker that measured the timings on the target's own CPU")
    benchmark_note: str | None = Field(
        None, description="why there are no timings, when there are none")
    compiled: LatencyStats | None = None
    onnxruntime: LatencyStats | None = None
    speedup: float | None = Field(None, description="onnxruntime median / compiled median")
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    allclose: bool | None = Field(None, description="outputs match ONNX Runtime's; null when "
                                                    "they were not compared")
    checked_under: Literal["native", "emulation"] | None = Field(
        None, description="where the outputs were compared with ONNX Runtime")
    kernels: list[KernelTiming] = Field(default_factory=list,
                                        description="mean time of each kernel")
    layer_report: LayerReport | None = Field(
        None, description="per ONNX node; null without native timings")
    weight_precision: WeightPrecision | None = Field(
        None, description="null for float32 weights")
    sparse_layers: list[SparseLayer] = Field(
        default_factory=list, description="layers specialized to their block-sparse weights")

    @model_validator(mode="before")
    @classmethod
    def _legacy_skip_note(cls, data):
        # rows written before benchmark_note existed said it in "benchmark"
        if isinstance(data, dict) and "benchmark" in data:
            data = {**data, "benchmark_note": data["benchmark"]}
            del data["benchmark"]
        return data


class Artifact(Record):
    name: str
    size: int
    sha256: str
    url: str = Field(description="GET it (with the token) for a redirect to the file")

    @staticmethod
    def resolve_url(obj, context) -> str:
        path = reverse("api:job-artifact", args=[obj.job_id, obj.name])
        return context["request"].build_absolute_uri(path)


class ArtifactLink(Contract):
    name: str
    size: int
    sha256: str
    url: str = Field(description="a presigned URL that downloads the file without a token "
                                 "and expires after S3_PRESIGN_SECONDS")


class BenchmarkRun(Record, LatencyStats):
    runtime: Literal["compiled", "onnxruntime"]
    threads: int
    samples_ms: list[float] = Field(description="every timed run, in order")

    @model_validator(mode="before")
    @classmethod
    def _flatten_stats(cls, row):
        return {"runtime": row.runtime, "threads": row.threads, **row.stats,
                "samples_ms": row.samples_ms}


class Job(Record):
    id: uuid.UUID
    model: uuid.UUID
    model_name: str
    target: str
    input_shapes: dict[str, list[int]]
    opt_level: int
    tuning: Tuning | None
    threads: int
    weight_dtype: Literal[WEIGHT_DTYPES]  # type: ignore[valid-type]
    state: Literal[tuple(JobState.values)]  # type: ignore[valid-type]
    stage: Literal[("", *STAGES)] = Field(  # type: ignore[valid-type]
        description="the stage running or reached last; empty before the first")
    stages: list[Literal[tuple(STAGES)]] = Field(  # type: ignore[valid-type]
        description="the stages this job goes through, in order")
    progress: float = Field(ge=0, le=1)
    error: str | None
    attempts: int
    worker: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    results: JobResults | None
    artifacts: list[Artifact]
    url: str

    @staticmethod
    def resolve_model(obj) -> uuid.UUID:
        return obj.model_id

    @staticmethod
    def resolve_model_name(obj) -> str:
        return obj.model.name

    @staticmethod
    def resolve_progress(obj) -> float:
        return round(obj.progress, 4)

    @staticmethod
    def resolve_error(obj) -> str | None:
        return obj.error or None

    @staticmethod
    def resolve_worker(obj) -> str | None:
        return obj.worker or None

    @staticmethod
    def resolve_url(obj) -> str:
        return reverse("api:job-detail", args=[obj.id])


class JobDetail(Job):
    log_tail: str = Field(description="the last 40 lines of the job's log")
    benchmarks: list[BenchmarkRun]

    @staticmethod
    def resolve_log_tail(obj) -> str:
        return "\n".join(obj.log.splitlines()[-40:])


# ---------------------------------------------------------------- targets and pages

class Target(Contract):
    name: str
    description: str
    arch: str = Field(description="CPU architecture of its code: x86_64 or aarch64")
    triple: str
    cpu: str
    features: str = Field(description="LLVM target features")
    vector_bits: int
    benchmark_online: bool = Field(
        description="a worker whose CPU runs this target is online, so jobs get timings; "
                    "otherwise they are compiled and say no benchmark host was available")
    benchmark_hosts: list[str] = Field(description="the online workers that benchmark it")


class TargetList(Contract):
    results: list[Target]


class Page(Contract, Generic[T]):
    count: int = Field(description="items over all pages")
    page: int
    page_size: int
    next: str | None = Field(description="the next page's path, null on the last")
    previous: str | None
    results: list[T]
