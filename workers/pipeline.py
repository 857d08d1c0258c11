"""The compile pipeline for one job: validate and import -> optimize -> tune -> build ->
benchmark -> package -> upload.

Every stage is reported in the database as it starts. Stages are idempotent: a job that is
delivered again (its worker died) starts over in a fresh work directory and overwrites its
artifacts and benchmark rows instead of adding new ones. A job always ends succeeded,
failed with a reason a person can act on, or cancelled.
"""
from __future__ import annotations

import io
import json
import logging
import shutil
import tarfile
import time
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compiler_core.targets import get_target
from webapp.jobs import storage
from webapp.jobs.models import Artifact, BenchmarkResult, CompileJob, JobState
from webapp.jobs.storage import StorageError

from .sandbox import Aborted, ChildSpec, SandboxError, run_child

log = logging.getLogger(__name__)

ARTIFACT_FILES = ["model.so", "model.h", "meta.json", "README.txt"]
CONTENT_TYPES = {"package.tar.gz": "application/gzip", "model.so": "application/octet-stream",
                 "model.h": "text/x-c", "meta.json": "application/json",
                 "README.txt": "text/plain", "benchmark.json": "application/json"}
HEARTBEAT_EVERY = 5.0
LOG_LIMIT = 20_000


class Cancelled(Exception):
    pass


class JobRun:
    """One attempt at running a job; writes its progress to the database."""

    def __init__(self, job: CompileJob):
        self.job = job
        self.workdir = Path(settings.WORK_DIR) / str(job.id)
        self._last_beat = 0.0

    # -- bookkeeping
    def log(self, line: str) -> None:
        stamp = timezone.now().strftime("%H:%M:%S")
        text = (self.job.log + f"[{stamp}] {line}\n")[-LOG_LIMIT:]
        self.job.log = text
        self._save(log=text)

    def _save(self, **fields) -> None:
        # Only while running: a cancel written by the API must not be overwritten.
        fields["heartbeat_at"] = timezone.now()
        CompileJob.objects.filter(pk=self.job.pk, state=JobState.RUNNING).update(**fields)

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_EVERY:
            self._last_beat = now
            self._save()

    def cancelled(self) -> bool:
        self.heartbeat()
        state = CompileJob.objects.filter(pk=self.job.pk).values_list("state", flat=True).first()
        return state != JobState.RUNNING

    def enter(self, stage: str) -> None:
        if stage == self.job.stage:
            return
        if self.cancelled():
            raise Cancelled()
        stages = self.job.stages
        progress = stages.index(stage) / len(stages) if stage in stages else self.job.progress
        self.job.stage, self.job.progress = stage, progress
        self._save(stage=stage, progress=progress)
        self.log(f"stage {stage}")

    def child(self, kind: str, args: dict, timeout: float) -> dict:
        spec = ChildSpec(kind, args, self.workdir, timeout, settings.SANDBOX_MEMORY_MB,
                         module=getattr(settings, "SANDBOX_CHILD_MODULE", "workers.child"),
                         env=thread_env(self.job.threads))
        try:
            return run_child(spec, on_event=self._on_event, should_abort=self.cancelled)
        except Aborted:
            raise Cancelled() from None
        except SandboxError as exc:
            if exc.log_tail:
                self.log(f"{kind} output (tail):\n{exc.log_tail.strip()[-2000:]}")
            raise

    def _on_event(self, event: dict) -> None:
        if event.get("stage") in self.job.stages:
            self.enter(event["stage"])


def thread_env(threads: int) -> dict:
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}


# ---------------------------------------------------------------- entry points

def run_job(job_id: str, worker: str) -> None:
    job = claim(job_id, worker)
    if job is None:
        return
    run = JobRun(job)
    try:
        execute(run)
    except Cancelled:
        log.info("job %s cancelled during %s", job_id, run.job.stage)
    except SoftTimeLimitExceeded:
        fail(job, f"the job exceeded its time limit of {settings.JOB_SOFT_TIME_LIMIT} s during "
                  f"the {job.stage} stage; try a smaller tuning budget or a smaller model")
    except Exception as exc:  # noqa: BLE001  every failure ends the job with a reason
        fail(job, failure_message(job, exc))
        if not isinstance(exc, (SandboxError, StorageError)):
            log.exception("job %s failed unexpectedly", job_id)
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)


def claim(job_id: str, worker: str) -> CompileJob | None:
    """Mark the job running; None if it is finished already (a redelivered task)."""
    with transaction.atomic():
        job = CompileJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.is_terminal or _running_elsewhere(job, worker):
            return None
        job.attempts += 1
        if job.attempts > settings.JOB_MAX_ATTEMPTS:
            _finish(job, JobState.FAILED, (
                f"the job was started {job.attempts - 1} times and its worker died each time "
                f"(last stage: {job.stage or 'none'}); the model may need more memory than the "
                "worker has"))
            return None
        now = timezone.now()
        job.state, job.worker, job.heartbeat_at = JobState.RUNNING, worker, now
        job.started_at = job.started_at or now
        job.stage, job.progress, job.error = "", 0.0, ""
        job.save()
    return job


def _running_elsewhere(job: CompileJob, worker: str) -> bool:
    """Another live worker has it (a duplicate delivery): leave it alone. A job whose worker
    went quiet is the reaper's to fail, and the same worker may always take it back."""
    if job.state != JobState.RUNNING or not job.worker or job.worker == worker:
        return False
    quiet = (timezone.now() - (job.heartbeat_at or job.created_at)).total_seconds()
    if quiet < settings.JOB_HEARTBEAT_TIMEOUT:
        log.warning("job %s is running on %s; ignoring a duplicate delivery", job.id, job.worker)
        return True
    return False


def execute(run: JobRun) -> None:
    job = run.job
    shutil.rmtree(run.workdir, ignore_errors=True)
    run.workdir.mkdir(parents=True)
    run.log(f"attempt {job.attempts} on {job.worker}: target {job.target}, opt level "
            f"{job.opt_level}, threads {job.threads}, shapes {job.input_shapes}")
    run.enter("validate")
    model_path = run.workdir / "model.onnx"
    storage.download_file(job.model.storage_key, model_path)
    out_dir = run.workdir / "artifact"
    meta = compile_stage(run, model_path, out_dir)
    bench = benchmark_stage(run, model_path, out_dir)
    run.enter("package")
    files = package(out_dir, bench)
    run.enter("upload")
    upload(run, files)
    succeed(run, meta, bench)


def compile_stage(run: JobRun, model_path: Path, out_dir: Path) -> dict:
    job = run.job
    result = run.child("compile", {
        "model_path": str(model_path), "out_dir": str(out_dir), "target": job.target,
        "input_shapes": job.input_shapes, "opt_level": job.opt_level, "tuning": job.tuning,
        "threads": job.threads}, settings.SANDBOX_COMPILE_TIMEOUT)
    stats = result["meta"].get("stats", {})
    run.log(f"compiled: {len(result['meta'].get('kernels', []))} kernels, "
            f"{stats.get('compile_seconds', '?')} s")
    return result["meta"]


def benchmark_stage(run: JobRun, model_path: Path, out_dir: Path) -> dict | None:
    run.enter("benchmark")
    if not get_target(run.job.target).runs_here:
        run.log(f"benchmark skipped: this worker's CPU cannot run target {run.job.target}")
        return None
    result = run.child("bench", {
        "artifact_dir": str(out_dir), "model_path": str(model_path), "threads": run.job.threads,
        "min_runs": settings.BENCH_MIN_RUNS, "max_seconds": settings.BENCH_MAX_SECONDS},
        settings.SANDBOX_BENCH_TIMEOUT)
    save_benchmarks(run.job, result)
    run.log(f"benchmark: compiled {result['compiled']['median_ms']:.4f} ms, onnxruntime "
            f"{result['onnxruntime']['median_ms']:.4f} ms (median), speedup "
            f"{result['speedup']:.2f}x, allclose {result['allclose']}")
    return result


def save_benchmarks(job: CompileJob, result: dict) -> None:
    for runtime in ("compiled", "onnxruntime"):
        stats = dict(result[runtime])
        samples = stats.pop("samples_ms", [])
        BenchmarkResult.objects.update_or_create(
            job=job, runtime=runtime,
            defaults={"threads": job.threads, "stats": stats, "samples_ms": samples})


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # fixed metadata: same bytes every time
    tar.addfile(info, io.BytesIO(data))


def package(out_dir: Path, bench: dict | None) -> dict[str, Path]:
    """The artifact files plus package.tar.gz holding them at its root (cc.load-able)."""
    files = {name: out_dir / name for name in ARTIFACT_FILES if (out_dir / name).is_file()}
    if bench is not None:
        files["benchmark.json"] = out_dir / "benchmark.json"
        files["benchmark.json"].write_text(json.dumps(bench, indent=1))
    package_path = out_dir.parent / "package.tar.gz"
    with tarfile.open(package_path, "w:gz", compresslevel=6) as tar:
        for name, path in files.items():
            _tar_add(tar, name, path.read_bytes())
    return {"package.tar.gz": package_path, **files}


def upload(run: JobRun, files: dict[str, Path]) -> None:
    for name, path in files.items():
        if run.cancelled():
            raise Cancelled()
        digest = storage.sha256_file(path)
        key = storage.artifact_key(run.job, name)
        storage.put_file(key, path, digest, CONTENT_TYPES.get(name, "application/octet-stream"))
        Artifact.objects.update_or_create(job=run.job, name=name, defaults={
            "size": path.stat().st_size, "sha256": digest, "storage_key": key})
    run.log(f"uploaded {len(files)} artifacts")


def results_summary(meta: dict, bench: dict | None) -> dict:
    summary = {"target": meta.get("target", {}).get("name"), "stats": meta.get("stats", {}),
               "kernel_count": len(meta.get("kernels", []))}
    if bench is None:
        return {**summary, "benchmark": "skipped: the worker cannot run this target"}
    keys = ("median_ms", "mean_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms", "runs")
    return {**summary,
            "compiled": {k: bench["compiled"][k] for k in keys},
            "onnxruntime": {k: bench["onnxruntime"][k] for k in keys},
            "speedup": bench["speedup"], "max_abs_err": bench["max_abs_err"],
            "max_rel_err": bench["max_rel_err"], "allclose": bench["allclose"],
            "threads": int(bench.get("threads", 1)), "kernels": bench.get("kernels", [])}


def succeed(run: JobRun, meta: dict, bench: dict | None) -> None:
    job = run.job
    job.results = results_summary(meta, bench)
    updated = CompileJob.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
        state=JobState.SUCCEEDED, progress=1.0, finished_at=timezone.now(),
        results=job.results, heartbeat_at=timezone.now())
    if updated:
        run.log("succeeded")


# ---------------------------------------------------------------- failures

def failure_message(job: CompileJob, exc: Exception) -> str:
    stage = job.stage or "validate"
    if isinstance(exc, SandboxError):
        if exc.kind == "compile":
            return f"the model cannot be compiled: {exc}"
        return f"{stage} failed: {exc}"
    if isinstance(exc, StorageError):
        return f"{stage} failed: {exc}. The job can be submitted again once storage is back"
    return f"{stage} failed with an internal error ({type(exc).__name__}: {exc})"


def _finish(job: CompileJob, state: str, error: str) -> int:
    return CompileJob.objects.filter(pk=job.pk, state__in=[JobState.QUEUED, JobState.RUNNING]
                                     ).update(state=state, error=error[:4000],
                                              finished_at=timezone.now())


def fail(job: CompileJob, message: str) -> None:
    if _finish(job, JobState.FAILED, message):
        job.refresh_from_db()
        stamp = timezone.now().strftime("%H:%M:%S")
        CompileJob.objects.filter(pk=job.pk).update(
            log=(job.log + f"[{stamp}] failed: {message}\n")[-LOG_LIMIT:])


def fail_if_active(job_id: str, message: str) -> None:
    job = CompileJob.objects.filter(pk=job_id).first()
    if job is not None:
        fail(job, message)
