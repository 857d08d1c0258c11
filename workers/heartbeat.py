"""This worker's place in the fleet (webapp/jobs/fleet.py): the targets its CPU runs, whose
queues it consumes besides the base queue, and a heartbeat thread that announces them."""
from __future__ import annotations

import logging
import threading

from django.conf import settings

from compiler_core.codegen.target_machine import host_spec
from compiler_core.targets import all_targets
from webapp.jobs import fleet

log = logging.getLogger(__name__)


def benchmark_targets() -> list[str]:
    """The named targets this machine's CPU runs natively (its own features decide)."""
    return [name for name, target in all_targets().items()
            if name != fleet.NATIVE and target.runs_here]


class Heartbeat(threading.Thread):
    def __init__(self, worker: str):
        super().__init__(name="fleet-heartbeat", daemon=True)
        self.worker = worker
        self.targets = benchmark_targets()
        self.stopped = threading.Event()

    def beat(self) -> None:
        try:
            fleet.announce(self.worker, host_spec().cpu, self.targets)
        except Exception as exc:  # noqa: BLE001  a broker hiccup must not stop the worker
            log.warning("fleet heartbeat of %s failed: %s", self.worker, exc)

    def run(self) -> None:
        self.beat()
        while not self.stopped.wait(settings.WORKER_HEARTBEAT_SECONDS):
            self.beat()

    def stop(self) -> None:
        self.stopped.set()
        try:
            fleet.withdraw(self.worker)
        except Exception as exc:  # noqa: BLE001  its key expires by itself anyway
            log.warning("could not withdraw %s from the fleet: %s", self.worker, exc)
