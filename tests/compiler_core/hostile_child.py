"""Sandbox child for the hostile-model tests: compile one model, report how it was refused."""
from __future__ import annotations

import resource
import sys
import time

from sandbox import child


def refuse(args: dict) -> dict:
    import compiler_core as cc

    started = time.perf_counter()
    try:
        cc.compile(args["model_path"], input_shapes=args.get("input_shapes") or None)
        outcome = {"refused": False, "error": ""}
    except cc.CompileError as exc:
        outcome = {"refused": True, "error": str(exc)}
    return {**outcome, "seconds": time.perf_counter() - started,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


if __name__ == "__main__":
    sys.exit(child.main(sys.argv, {**child.ENTRIES, "refuse": refuse}))
