"""The worker fleet: which workers are online and which targets each can benchmark on.

Compiling for any target runs on any worker; benchmarking only where the target runs
natively. Every worker consumes the deployment's base queue (TENSORFORGE_QUEUE) plus one
queue per target its own CPU runs (`<queue>.<target>`), and writes a heartbeat into Redis
every WORKER_HEARTBEAT_SECONDS that lists those targets and expires after
WORKER_HEARTBEAT_TTL. A job goes to its target's queue while a worker that benchmarks the
target is online, and otherwise to the base queue: it is compiled wherever, and its results
say that no benchmark host was available. `native` means the CPU of the worker that takes
the job, so any worker benchmarks it.
"""
from __future__ import annotations

import functools
import json
import logging
import time

import redis
from django.conf import settings

from compiler_core.targets import all_targets

log = logging.getLogger(__name__)

NATIVE = "native"


def queue_name(target: str) -> str:
    return f"{settings.CELERY_QUEUE}.{target}"


def _key_prefix() -> str:
    return f"{settings.CELERY_QUEUE}:worker:"


@functools.lru_cache(maxsize=2)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


def client() -> redis.Redis:
    return _redis(settings.REDIS_URL)


def announce(worker: str, cpu: str, targets: list[str]) -> None:
    """One heartbeat of `worker`, which benchmarks `targets` on its `cpu`."""
    beat = {"worker": worker, "cpu": cpu, "targets": targets, "seen": time.time()}
    client().set(_key_prefix() + worker, json.dumps(beat), ex=settings.WORKER_HEARTBEAT_TTL)


def withdraw(worker: str) -> None:
    client().delete(_key_prefix() + worker)


def online_workers() -> list[dict]:
    """The heartbeats of every worker seen within WORKER_HEARTBEAT_TTL; none when Redis does
    not answer (then no job can be queued either, and submitting says so)."""
    try:
        keys = list(client().scan_iter(match=_key_prefix() + "*", count=500))
        return [json.loads(raw) for raw in client().mget(keys) if raw] if keys else []
    except redis.RedisError as exc:
        log.warning("cannot read worker heartbeats: %s", exc)
        return []


def benchmark_hosts(workers: list[dict]) -> dict[str, list[str]]:
    """target -> the online workers that benchmark it (every worker benchmarks native)."""
    hosts: dict[str, list[str]] = {NATIVE: sorted(w["worker"] for w in workers)}
    for beat in workers:
        for target in beat["targets"]:
            hosts.setdefault(target, []).append(beat["worker"])
    return {target: sorted(names) for target, names in hosts.items()}


def target_listing() -> list[dict]:
    """Every target with what it means and the workers online that benchmark on it."""
    hosts = benchmark_hosts(online_workers())
    return [{"name": name, "description": t.description, "arch": t.spec.arch,
             "triple": t.spec.triple, "cpu": t.spec.cpu, "features": t.spec.features,
             "vector_bits": t.spec.vector_bits, "benchmark_online": bool(hosts.get(name)),
             "benchmark_hosts": hosts.get(name, [])} for name, t in all_targets().items()]


def queue_for(target: str) -> str:
    """The target's own queue while a worker that benchmarks it is online, else the base."""
    if target != NATIVE and benchmark_hosts(online_workers()).get(target):
        return queue_name(target)
    return settings.CELERY_QUEUE
