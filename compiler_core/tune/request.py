"""The tuning request: `cc.compile(..., tuning={"trials": N} | {"seconds": S}, "records": PATH)`.

Either budget, or both (tuning stops at whichever runs out first); `records` alone applies
the records with no new measurements; `threads` is the thread count kernels are timed with
(the one the model will run with; 1 by default).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import CompileError

KEYS = ("trials", "seconds", "records", "threads")


@dataclass(frozen=True)
class TuningRequest:
    trials: int | None = None
    seconds: float | None = None
    records: str | None = None
    threads: int = 1

    @property
    def measures(self) -> bool:
        return bool(self.trials) or bool(self.seconds)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}


def parse_tuning(tuning) -> TuningRequest | None:
    if tuning is None or isinstance(tuning, TuningRequest):
        return tuning
    if not isinstance(tuning, dict):
        raise CompileError('tuning must be a dict such as {"trials": 200} or {"seconds": 240}, '
                           f"got {type(tuning).__name__}")
    unknown = sorted(set(tuning) - set(KEYS))
    if unknown:
        raise CompileError(f"unknown tuning keys {unknown}; valid: {', '.join(KEYS)}")
    given = {k: v for k, v in tuning.items() if v is not None}
    trials, seconds = given.get("trials"), given.get("seconds")
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool)
                               or trials < 0):
        raise CompileError(f"tuning trials must be a whole number >= 0, got {trials!r}")
    if seconds is not None and (not isinstance(seconds, (int, float)) or seconds <= 0):
        raise CompileError(f"tuning seconds must be a number > 0, got {seconds!r}")
    threads = given.get("threads", 1)
    if not isinstance(threads, int) or threads < 1:
        raise CompileError(f"tuning threads must be a whole number >= 1, got {threads!r}")
    records = given.get("records")
    if records is not None and not isinstance(records, (str, os.PathLike)):
        raise CompileError("tuning records must be the path of a JSON-lines records file")
    if not (trials or seconds or records):
        return None
    return TuningRequest(trials, None if seconds is None else float(seconds),
                         None if records is None else os.fspath(records), threads)
