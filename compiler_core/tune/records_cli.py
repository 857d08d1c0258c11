"""python -m compiler_core records export|import|merge: carry tuning records between
machines and deployments.

    records export STORE -o OUT [--target PREFIX]   copy (some targets' records) to OUT
    records import STORE FILE...                     add FILEs' new records to STORE
    records merge FILE... -o OUT                     the union of FILEs (and OUT) into OUT
Every file is checked record by record first; duplicates are dropped.
"""
from __future__ import annotations

from .records import RecordsError, RecordStore, read_jsonl


def run_records_command(action: str, files: list[str], output: str | None,
                        target: str | None) -> str:
    if action == "import":
        return import_records(files[0], files[1:])
    if not output:
        raise RecordsError(f"records {action} needs -o OUT, the file to write")
    if action == "export":
        if len(files) != 1:
            raise RecordsError("records export takes one records file (the store)")
        return export_records(files[0], output, target)
    return merge_records(files, output)


def export_records(store: str, output: str, target: str | None) -> str:
    records = [r for r in read_jsonl(store) if not target or r["target"].startswith(target)]
    out = RecordStore(output)
    added = sum(out.add(r) for r in records)
    return f"exported {added} records to {output}"


def import_records(store: str, files: list[str]) -> str:
    if not files:
        raise RecordsError("records import needs the files to import after the store")
    incoming = [r for f in files for r in read_jsonl(f)]  # all checked before any is added
    into = RecordStore(store)
    added = sum(into.add(r) for r in incoming)
    return f"imported {added} new records into {store} ({len(incoming) - added} already there)"


def merge_records(files: list[str], output: str) -> str:
    incoming = [r for f in files for r in read_jsonl(f)]
    out = RecordStore(output)
    added = sum(out.add(r) for r in incoming)
    return f"merged {len(files)} files: {len(out.all())} records in {output} ({added} new)"
