"""The limits one sandboxed child runs under, passed from the parent to the child as JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 8192          # RLIMIT_AS
    cpu_seconds: int = 900         # RLIMIT_CPU (the wall-time limit is the parent's)
    file_mb: int = 4096            # RLIMIT_FSIZE: the largest file the child may write
    processes: int = 256           # RLIMIT_NPROC: threads count too (ORT, OpenMP, BLAS)
    open_files: int = 512          # RLIMIT_NOFILE
    workdir_mb: int = 8192         # the whole work directory, watched by the parent
    result_mb: int = 64            # the result file the parent reads back
    event_bytes: int = 64 * 1024   # one progress line on stdout
    events: int = 10_000           # progress lines in all
    allow_exec: bool = False       # only to run foreign-architecture code under qemu-user
    nice: int = 0                  # CPU priority: upload inspection yields to web requests

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Limits":
        return cls(**json.loads(text))
