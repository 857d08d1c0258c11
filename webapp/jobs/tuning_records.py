"""The service's tuning records: the TuningRecord table, shared by every job of every user.

The sandboxed compile child cannot reach the database, so a tuning job gets the records of
its target as a JSON-lines file in its work directory (the format of the CLI's --records,
compiler_core/tune/records.py); the tuner reads it and appends each new measurement as it
arrives, and the worker adds the new lines to the table when the compile ends, fails or is
cancelled, so nothing measured is lost. `manage.py tuning_records export|import` carries the
table between deployments in the same format.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from django.conf import settings

from compiler_core.tune.records import identity, read_jsonl

from .models import CompileJob, TuningRecord


TUNING_MARGIN_SECONDS = 180  # of the compile's time limit, kept for compiling after tuning


def tuning_seconds_cap() -> float:
    """Tuning may use the compile's time limit but for what compiling itself needs."""
    return max(10.0, settings.SANDBOX_COMPILE_TIMEOUT - TUNING_MARGIN_SECONDS)


def record_identity(record: dict) -> str:
    return hashlib.sha256(identity(record).encode()).hexdigest()


def as_record(row: TuningRecord) -> dict:
    return {"workload": row.workload, "target": row.target, "op": row.op,
            "schedule": row.schedule, "default": row.is_default, "seconds": row.seconds,
            "error": row.error or None, "at": row.measured_at, "compiler": row.compiler}


def export_records(path: Path, target: str | None = None) -> int:
    """Write the records (of one target key, or all) as JSON lines; returns how many."""
    rows = TuningRecord.objects.all()
    if target:
        rows = rows.filter(target=target)
    count = 0
    with open(path, "w") as f:
        for row in rows.order_by("id").iterator():
            f.write(json.dumps(as_record(row), sort_keys=True) + "\n")
            count += 1
    return count


def import_records(path: Path, job: CompileJob | None = None) -> int:
    """Add a records file's new records (each checked first); returns how many were new."""
    if not Path(path).exists():
        return 0
    rows = [_row(r, job) for r in read_jsonl(path)]
    before = TuningRecord.objects.count()
    TuningRecord.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return TuningRecord.objects.count() - before


def _row(record: dict, job: CompileJob | None) -> TuningRecord:
    return TuningRecord(identity=record_identity(record), workload=record["workload"][:100],
                        target=record["target"][:200], op=str(record["op"])[:50],
                        schedule=record["schedule"], is_default=bool(record["default"]),
                        seconds=record["seconds"] if not record["error"] else None,
                        error=record["error"] or "", measured_at=float(record.get("at") or 0),
                        compiler=str(record.get("compiler", ""))[:20], job=job)
