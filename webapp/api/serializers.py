"""Model instances -> the JSON shapes of DESIGN.md's REST contract."""
from __future__ import annotations

from django.urls import reverse


def iso(dt) -> str | None:
    return dt.isoformat() if dt else None


def model_json(m) -> dict:
    return {"id": str(m.id), "name": m.name, "sha256": m.sha256, "size": m.size,
            "opset": m.opset, "producer": m.producer, "inputs": m.inputs, "outputs": m.outputs,
            "ops": m.ops, "unsupported_ops": m.unsupported_ops,
            "created_at": iso(m.created_at), "url": f"/api/v1/models/{m.id}"}


def artifact_json(a, request=None) -> dict:
    path = reverse("api:job-artifact", args=[a.job_id, a.name])
    return {"name": a.name, "size": a.size, "sha256": a.sha256,
            "url": request.build_absolute_uri(path) if request else path}


def job_json(job, request=None) -> dict:
    return {
        "id": str(job.id), "model": str(job.model_id), "model_name": job.model.name,
        "target": job.target, "input_shapes": job.input_shapes, "opt_level": job.opt_level,
        "tuning": job.tuning, "threads": job.threads, "state": job.state, "stage": job.stage,
        "stages": job.stages, "progress": round(job.progress, 4), "error": job.error or None,
        "attempts": job.attempts, "worker": job.worker or None,
        "created_at": iso(job.created_at), "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at), "results": job.results,
        "artifacts": [artifact_json(a, request) for a in job.artifacts.all()],
        "url": f"/api/v1/jobs/{job.id}",
    }


def job_detail_json(job, request=None) -> dict:
    data = job_json(job, request)
    data["log_tail"] = "\n".join(job.log.splitlines()[-40:])
    data["benchmarks"] = [{"runtime": b.runtime, "threads": b.threads, **b.stats,
                           "samples_ms": b.samples_ms} for b in job.benchmarks.all()]
    return data
