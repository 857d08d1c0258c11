"""A sandbox child whose benchmark misbehaves on purpose: TF_FAULT=crash|hang|oom."""
from __future__ import annotations

import os
import signal
import sys
import time

from sandbox import child


def faulty_bench(args: dict) -> dict:
    child.emit("benchmark")
    fault = os.environ.get("TF_FAULT", "crash")
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "hang":
        time.sleep(3600)
    if fault == "oom":
        hoard = []
        while True:
            hoard.append(bytearray(64 * 2**20))
    raise RuntimeError(f"unknown fault {fault}")


if __name__ == "__main__":
    sys.exit(child.main(sys.argv, {**child.ENTRIES, "bench": faulty_bench}))
