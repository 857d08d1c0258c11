"""Uploaded models, compile jobs, their artifacts and benchmark results.

The database is the source of truth for a job's state: workers write every transition here,
and the API and console only read it.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

STAGES = ["validate", "optimize", "tune", "build", "benchmark", "package", "upload"]
STAGE_LABELS = {"validate": "Validate and import", "optimize": "Optimize", "tune": "Tune",
                "build": "Build", "benchmark": "Benchmark", "package": "Package",
                "upload": "Upload"}


class UploadedModel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="models")
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    opset = models.IntegerField(null=True)
    producer = models.CharField(max_length=200, blank=True)
    inputs = models.JSONField(default=list)       # [{name, shape: [int|str], dtype}]
    outputs = models.JSONField(default=list)
    ops = models.JSONField(default=dict)          # op type -> count
    unsupported_ops = models.JSONField(default=list)
    storage_key = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def symbolic_inputs(self) -> list[dict]:
        return [i for i in self.inputs if any(not isinstance(d, int) for d in i["shape"])]

    @property
    def node_count(self) -> int:
        return sum(self.ops.values())


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}


class CompileJob(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="jobs")
    model = models.ForeignKey(UploadedModel, on_delete=models.CASCADE, related_name="jobs")
    target = models.CharField(max_length=50)
    input_shapes = models.JSONField(default=dict)   # name -> [int]
    opt_level = models.IntegerField(default=3)
    tuning = models.JSONField(null=True, blank=True)  # None, {"trials": N} or {"seconds": S}
    threads = models.IntegerField(default=1)
    weight_dtype = models.CharField(max_length=10, default="float32")  # float32, float16, int8
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.QUEUED)
    stage = models.CharField(max_length=20, blank=True)
    progress = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    log = models.TextField(blank=True)
    results = models.JSONField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    task_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # last time its task was sent
    # while tuning: the tuner's last progress event (kernels, trials, best against default)
    # and its curve [{"trials", "estimate_ms", "default_ms"}, ...]
    tuning_progress = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"job {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def stages(self) -> list[str]:
        return [s for s in STAGES if s != "tune" or self.tuning]

    @property
    def duration_seconds(self) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()


class Artifact(models.Model):
    job = models.ForeignKey(CompileJob, on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=100)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_key = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="one_artifact_per_name")]

    def __str__(self) -> str:
        return self.name


class BenchmarkResult(models.Model):
    job = models.ForeignKey(CompileJob, on_delete=models.CASCADE, related_name="benchmarks")
    runtime = models.CharField(max_length=50)   # "compiled" or "onnxruntime"
    threads = models.IntegerField()
    stats = models.JSONField(default=dict)      # median_ms, mean_ms, p90_ms, ...
    samples_ms = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["runtime"]
        constraints = [models.UniqueConstraint(fields=["job", "runtime"],
                                               name="one_result_per_runtime")]


class TuningRecord(models.Model):
    """One autotuning measurement (compiler_core/tune/records.py), shared by every job of
    every user: a kernel is tuned once per (workload, target), and any later job of any
    model with that kernel starts from it. Failures are kept too (never measured again)."""
    identity = models.CharField(max_length=64, unique=True)  # sha256 of the record's fields
    workload = models.CharField(max_length=100)
    target = models.CharField(max_length=200)
    op = models.CharField(max_length=50)
    schedule = models.JSONField()
    is_default = models.BooleanField(default=False)
    seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    measured_at = models.FloatField()              # unix time, as in the records file
    compiler = models.CharField(max_length=20)
    job = models.ForeignKey(CompileJob, null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="tuning_records")

    class Meta:
        indexes = [models.Index(fields=["target", "workload"])]

    def __str__(self) -> str:
        return f"{self.workload} on {self.target}"
