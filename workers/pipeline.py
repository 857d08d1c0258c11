"""The compile pipeline for one job: validate and import -> optimize -> tune -> build ->
benchmark -> package -> upload.

Every stage is reported in the database as it starts. Stages are idempotent: a job that is
delivered again (its worker died) starts over in a fresh work directory and overwrites its
artifacts and benchmark rows instead of adding new ones. A job always ends succeeded,
failed with a reason a person can act on, or cancelled.
"""
from __future__ import annotations

import functools
import io
import json
import logging
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compiler_core.analysis.layer_report import layer_report
from compiler_core.analysis.machine_limits import machine_limits
from compiler_core.codegen.target_machine import host_spec
from compiler_core.runtime.emulation import emulation_missing
from compiler_core.targets import get_target
from compiler_core.tune.workload import target_key
from sandbox.limits import Limits
from sandbox.runner import Aborted, ChildSpec, SandboxError, run_child
from webapp.api.schemas import CompileStats, JobResults, KernelTiming, LatencyStats
from webapp.jobs import storage
from webapp.jobs.models import Artifact, BenchmarkResult, CompileJob, JobState
from webapp.jobs.storage import StorageError
from webapp.jobs.tuning_records import export_records, import_records, tuning_seconds_cap

from . import measure_remote
from .liveness import Cancelled, Heartbeat, patiently

log = logging.getLogger(__name__)

ARTIFACT_FILES = ["model.so", "model.h", "meta.json", "README.txt"]
CONTENT_TYPES = {"package.tar.gz": "application/gzip", "model.so": "application/octet-stream",
                 "model.h": "text/x-c", "meta.json": "application/json",
                 "README.txt": "text/plain", "benchmark.json": "application/json"}
LOG_LIMIT = 20_000


class JobRun:
    """One attempt at running a job; writes its progress to the database."""

    def __init__(self, job: CompileJob):
        self.job = job
        self.workdir = Path(settings.WORK_DIR) / str(job.id)
        self.dispatcher: measure_remote.Dispatcher | None = None  # while tuning

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

    def cancelled(self) -> bool:
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

    def child(self, kind: str, args: dict, timeout: float, allow_exec: bool = False,
              pass_fds: tuple = ()) -> dict:
        spec = ChildSpec(kind, args, self.workdir, timeout,
                         sandbox_limits(timeout, self.job.threads, allow_exec),
                         module=settings.SANDBOX_CHILD_MODULE,
                         env={**thread_env(self.job.threads), **settings.SANDBOX_CHILD_ENV},
                         pass_fds=pass_fds)
        try:
            return run_child(spec, on_event=self._on_event, should_abort=self.cancelled)
        except Aborted:
            raise Cancelled() from None
        except SandboxError as exc:
            if exc.log_tail:
                self.log(f"{kind} output (tail):\n{exc.log_tail.strip()[-2000:]}")
            raise

    def transfer(self, action, what: str):
        """A storage call that waits out an outage (liveness.patiently)."""
        return patiently(action, what, self.cancelled, self.log)

    def _on_event(self, event: dict) -> None:
        if event.get("stage") in self.job.stages:
            self.enter(event["stage"])
        if isinstance(event.get("tuning"), dict):
            self.tuning_event(event["tuning"])
        if "measure" in event and self.dispatcher is not None:
            self.dispatcher.handle(event["measure"])

    def tuning_event(self, event: dict) -> None:
        """The tuner's progress, and its curve so far, for the job page."""
        previous = self.job.tuning_progress or {}
        point = {k: event.get(k) for k in ("trials", "estimate_ms", "default_ms")}
        curve = (previous.get("curve") or [])[-500:] + [point]
        self.job.tuning_progress = {**event, "curve": curve}
        self._save(tuning_progress=self.job.tuning_progress)


def sandbox_limits(timeout: float, threads: int, allow_exec: bool = False) -> Limits:
    """CPU time adds up over threads, so the CPU limit is the wall-time limit times them."""
    return Limits(memory_mb=settings.SANDBOX_MEMORY_MB, allow_exec=allow_exec,
                  cpu_seconds=int(timeout * max(threads, 1)) + 30,
                  file_mb=settings.SANDBOX_FILE_MB, processes=settings.SANDBOX_PROCESSES,
                  open_files=settings.SANDBOX_OPEN_FILES, workdir_mb=settings.SANDBOX_WORKDIR_MB)


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
        with Heartbeat(job.pk):
            execute(run)
    except Cancelled:
        log.info("job %s cancelled during %s", job_id, run.job.stage)
    except SoftTimeLimitExceeded:
        fail(job, f"the job exceeded its time limit of {settings.JOB_SOFT_TIME_LIMIT} s during "
                  f"the {job.stage} stage; try a smaller tuning budget or a smaller model")
    except Exception as exc:  # every failure ends the job with a reason
        fail(job, failure_message(job, exc))
        if not isinstance(exc, (SandboxError, StorageError)):
            log.exception("job %s failed unexpectedly", job_id)
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)


def claim(job_id: str, worker: str) -> CompileJob | None:
    """Mark the job running; None if it is finished already or alive elsewhere (a duplicate
    or redelivered task)."""
    with transaction.atomic():
        job = CompileJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.is_terminal or _running_elsewhere(job):
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
        job.tuning_progress = None
        job.save()
    return job


def _running_elsewhere(job: CompileJob) -> bool:
    """A running job with a fresh heartbeat belongs to the process beating for it, even on
    the same worker host: leave it alone. A job whose heartbeat stopped is the reaper's to
    re-queue or fail."""
    if job.state != JobState.RUNNING:
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
    run.transfer(lambda: storage.download_file(job.model.storage_key, model_path),
                 "the model download")
    out_dir = run.workdir / "artifact"
    meta = compile_stage(run, model_path, out_dir)
    bench = benchmark_stage(run, model_path, out_dir, meta)
    run.enter("package")
    files = package(out_dir, bench)
    run.enter("upload")
    succeed(run, meta, bench, upload(run, files))


def compile_stage(run: JobRun, model_path: Path, out_dir: Path) -> dict:
    job = run.job
    records = run.workdir / "tuning-records.jsonl"
    tuning = tuning_request(run, records) if job.tuning else None
    args = {"model_path": str(model_path), "out_dir": str(out_dir), "target": job.target,
            "input_shapes": job.input_shapes, "opt_level": job.opt_level, "tuning": tuning,
            "threads": job.threads, "weight_dtype": job.weight_dtype}
    lock = measure_remote.open_lock() if tuning else None
    try:
        if tuning:
            run.dispatcher = measure_remote.Dispatcher(job, run.workdir, run.log)
            args.update(run.dispatcher.child_args(lock))
        result = run.child("compile", args, settings.SANDBOX_COMPILE_TIMEOUT,
                           pass_fds=(lock,) if lock is not None else ())
    finally:  # finished, failed or cancelled: what was measured is kept for every job
        if run.dispatcher is not None:
            run.dispatcher.stop()
        if lock is not None:
            os.close(lock)
        if tuning:
            added = import_records(records, job)
            run.log(f"tuning: {added} new records shared")
    log_compile(run, result["meta"])
    return result["meta"]


def log_compile(run: JobRun, meta: dict) -> None:
    stats = meta.get("stats", {})
    run.log(f"compiled: {len(meta.get('kernels', []))} kernels, "
            f"{stats.get('compile_seconds', '?')} s")
    tuning = meta.get("tuning") or {}
    if tuning.get("measured_by"):
        run.log("tuning: trials measured by "
                + ", ".join(f"{w} {n}" for w, n in tuning["measured_by"].items()))
    for failure in tuning.get("slot_failures") or []:
        run.log(f"tuning: {failure}")


def tuning_request(run: JobRun, records: Path) -> dict:
    """The job's budget, held within the compile's time limit, with the shared records of
    its target (as a file: the sandboxed child cannot reach the database)."""
    job = run.job
    cap = tuning_seconds_cap()
    seconds = min(job.tuning.get("seconds") or cap, cap)
    key = target_key(get_target(job.target).spec, job.threads)
    count = export_records(records, key)
    run.log(f"tuning: {count} shared records for {key}; budget {job.tuning}, at most "
            f"{seconds:.0f} s")
    return {**job.tuning, "seconds": seconds, "records": str(records), "threads": job.threads}


def benchmark_stage(run: JobRun, model_path: Path, out_dir: Path, meta: dict) -> dict | None:
    """Timings where the target runs natively; elsewhere a correctness check under emulation
    when this worker has the target architecture's emulator, else nothing."""
    run.enter("benchmark")
    target = get_target(run.job.target)
    if not (target.runs_here or can_emulate(target)):
        run.log(no_benchmark_note(run.job, emulated=False))
        return None
    result = run.child("bench", {
        "artifact_dir": str(out_dir), "model_path": str(model_path), "threads": run.job.threads,
        "min_runs": settings.BENCH_MIN_RUNS, "max_seconds": settings.BENCH_MAX_SECONDS},
        settings.SANDBOX_BENCH_TIMEOUT, allow_exec=not target.runs_here)  # qemu runs it
    if result.get("emulated"):
        run.log(f"{no_benchmark_note(run.job, emulated=True)}; allclose {result['allclose']}")
        return result
    save_benchmarks(run.job, result)
    run.log(f"benchmark: compiled {result['compiled']['median_ms']:.4f} ms, onnxruntime "
            f"{result['onnxruntime']['median_ms']:.4f} ms (median), speedup "
            f"{result['speedup']:.2f}x, allclose {result['allclose']}")
    result["layer_report"] = layer_report_of(run, meta, result)
    return result


def layer_report_of(run: JobRun, meta: dict, bench: dict) -> dict | None:
    """Kernel times per ONNX node against this machine's limits, which are measured on the
    first job (a few seconds of sgemm and sdot) and cached under var/. A machine whose
    limits cannot be measured still gets its timings, without the report."""
    try:
        limits = machine_limits(settings.VAR_DIR)
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        run.log(f"layers: no report, the machine's limits could not be measured ({exc})")
        return None
    report = layer_report(meta, bench["kernels"], limits, run.job.threads)
    if report["layers"]:
        top = report["layers"][0]
        run.log(f"layers: {top['onnx_node']} takes {100 * top['share']:.0f}% "
                f"({top['bound']}-bound, {top['roofline_pct'] or 0:.0f}% of its roofline)")
    return report


def can_emulate(target) -> bool:
    """Code for another architecture runs here under user-mode emulation, if installed."""
    arch = target.spec.arch
    return arch != host_spec().arch and emulation_missing(arch) is None


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


def upload(run: JobRun, files: dict[str, Path]) -> list[Artifact]:
    """Every file into storage; the Artifact rows are only written by succeed()."""
    uploaded = []
    for name, path in files.items():
        if run.cancelled():
            raise Cancelled()
        digest = storage.sha256_file(path)
        key = storage.artifact_key(run.job, name)
        content_type = CONTENT_TYPES.get(name, "application/octet-stream")
        run.transfer(functools.partial(storage.put_file, key, path, digest, content_type),
                     f"the upload of {name}")
        uploaded.append(Artifact(job=run.job, name=name, size=path.stat().st_size,
                                 sha256=digest, storage_key=key))
    run.log(f"uploaded {len(files)} artifacts")
    return uploaded


def results_summary(job: CompileJob, meta: dict, bench: dict | None) -> dict:
    """The job's results, built through the API's own model so they always match it."""
    results = {"target": meta.get("target", {}).get("name"),
               "stats": {k: meta["stats"][k] for k in CompileStats.model_fields},
               "kernel_count": len(meta.get("kernels", [])),
               "threads": job.threads,
               # measured at compile time on the inputs the benchmark uses (seed 0)
               "weight_precision": meta.get("weight_precision"),
               "sparse_layers": meta.get("sparse_layers", [])}
    if bench is None:
        results["benchmark_note"] = no_benchmark_note(job, emulated=False)
    elif bench.get("emulated"):
        results.update({k: bench[k] for k in ("max_abs_err", "max_rel_err", "allclose")},
                       checked_under="emulation",
                       benchmark_note=f"{no_benchmark_note(job, emulated=True)}. {bench['note']}")
    else:
        results.update(benchmark_summary(bench), benchmark_host=job.worker,
                       checked_under="native")
    return JobResults.model_validate(results).model_dump(mode="json")


def no_benchmark_note(job: CompileJob, emulated: bool) -> str:
    checked = ("its outputs were compared with ONNX Runtime's under emulation" if emulated
               else "its outputs were not compared with ONNX Runtime (no emulator for it here)")
    return (f"no benchmark host for target {job.target} was available, so there are no "
            f"timings: {job.worker} compiled it and its CPU cannot run it; {checked}. For "
            "timings, add a worker whose CPU runs this target (docs/workers.md)")


def benchmark_summary(bench: dict) -> dict:
    return {**{k: bench[k] for k in ("speedup", "max_abs_err", "max_rel_err", "allclose")},
            **{runtime: {k: bench[runtime][k] for k in LatencyStats.model_fields}
               for runtime in ("compiled", "onnxruntime")},
            "kernels": [{k: kernel[k] for k in KernelTiming.model_fields}
                        for kernel in bench.get("kernels", [])],
            "layer_report": bench.get("layer_report")}


def succeed(run: JobRun, meta: dict, bench: dict | None, artifacts: list[Artifact]) -> None:
    """Artifacts and the succeeded state in one transaction, after every upload worked: a
    job is never downloadable half-way, and a cancelled one records nothing."""
    job = run.job
    job.results = results_summary(job, meta, bench)
    with transaction.atomic():
        updated = CompileJob.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
            state=JobState.SUCCEEDED, progress=1.0, finished_at=timezone.now(),
            results=job.results, heartbeat_at=timezone.now())
        if updated:
            Artifact.objects.filter(job=job).delete()  # a redelivered job's earlier rows
            Artifact.objects.bulk_create(artifacts)
    if updated:
        append_log(job, "succeeded")


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


def append_log(job: CompileJob, line: str) -> None:
    job.refresh_from_db(fields=["log"])
    stamp = timezone.now().strftime("%H:%M:%S")
    CompileJob.objects.filter(pk=job.pk).update(
        log=(job.log + f"[{stamp}] {line}\n")[-LOG_LIMIT:])


def fail(job: CompileJob, message: str) -> None:
    if _finish(job, JobState.FAILED, message):
        append_log(job, f"failed: {message}")
        discard_uploads(job)


def discard_uploads(job: CompileJob) -> None:
    """A failed job's partial uploads are deleted (best effort: storage may be the reason)."""
    try:
        storage.delete_prefix(storage.artifact_key(job, ""))
    except StorageError as exc:
        log.warning("could not delete partial uploads of job %s: %s", job.id, exc)


def fail_if_active(job_id: str, message: str) -> None:
    job = CompileJob.objects.filter(pk=job_id).first()
    if job is not None:
        fail(job, message)
