"""Tuning records: every measurement ever made, keyed by (workload, target).

A record is one JSON object:
    {"workload": "PackedGemm-3f...", "target": "x86_64-.../znver3/ab12.../t1",
     "op": "PackedGemm", "schedule": {...the schedule's fields...}, "default": false,
     "seconds": 6.9e-05 or null, "error": null or "why it failed", "at": unix time,
     "compiler": "0.3.0"}
Failures are records too: a crashing candidate is never measured twice. The best record of a
workload is its fastest success. The CLI keeps records in a JSON-lines file (appended as
measurements arrive, so an interrupted run keeps what it measured); the service keeps them
in a database table with the same fields (webapp/jobs/models.TuningRecord). Both are a
`RecordStore`: `find(workload, target)` and `add(record)`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from ..version import __version__

FIELDS = ("workload", "target", "op", "schedule", "default", "seconds", "error")


class RecordsError(ValueError):
    pass


def make_record(workload: str, target: str, op: str, schedule: dict, default: bool,
                seconds: float | None, error: str | None) -> dict:
    return {"workload": workload, "target": target, "op": op, "schedule": schedule,
            "default": default, "seconds": seconds, "error": error, "at": round(time.time(), 3),
            "compiler": __version__}


def check_record(record, where: str) -> dict:
    """A record read from outside, or a RecordsError saying what is wrong with it."""
    if not isinstance(record, dict):
        raise RecordsError(f"{where}: a record must be a JSON object")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise RecordsError(f"{where}: record lacks {', '.join(missing)}")
    if not isinstance(record["schedule"], dict):
        raise RecordsError(f"{where}: 'schedule' must be an object of the schedule's fields")
    ok = isinstance(record["seconds"], (int, float)) and record["seconds"] > 0
    if not ok and not record["error"]:
        raise RecordsError(f"{where}: a record needs positive 'seconds' or an 'error'")
    return record


def identity(record: dict) -> str:
    """Two records with the same identity are the same measurement (for merging)."""
    return json.dumps([record.get(f) for f in FIELDS + ("at",)], sort_keys=True)


def best(records: list[dict]) -> dict | None:
    ok = [r for r in records if not r["error"]]
    return min(ok, key=lambda r: r["seconds"]) if ok else None


class RecordStore:
    """Records in memory, optionally backed by a JSON-lines file."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else None
        self._by_key: dict[tuple[str, str], list[dict]] = {}
        self._seen: set[str] = set()
        if self.path and self.path.exists():
            for record in read_jsonl(self.path):
                self._remember(record)

    def find(self, workload: str, target: str) -> list[dict]:
        return list(self._by_key.get((workload, target), []))

    def all(self) -> list[dict]:
        return [r for rs in self._by_key.values() for r in rs]

    def add(self, record: dict) -> bool:
        """False when the store already holds this exact record."""
        if not self._remember(record):
            return False
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        return True

    def _remember(self, record: dict) -> bool:
        key = identity(record)
        if key in self._seen:
            return False
        self._seen.add(key)
        self._by_key.setdefault((record["workload"], record["target"]), []).append(record)
        return True


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise RecordsError(f"records file {path} does not exist")
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise RecordsError(f"{path}:{number}: not JSON ({exc})") from None
        out.append(check_record(record, f"{path}:{number}"))
    return out
