"""A fleet of workers by target: heartbeats in Redis, per-target queues, and jobs for targets
no online worker can run, which are compiled and say that no benchmark host was available."""
import time

import pytest
from django.conf import settings

from compiler_core.codegen.target_machine import host_spec
from compiler_core.targets import all_targets
from tests.service import onnx_models
from tests.service.test_api_contract import wait_for
from webapp.jobs import fleet
from workers.pipeline import can_emulate

NATIVE_HERE = [n for n, t in all_targets().items() if n != "native" and t.runs_here]
SAME_ARCH_ELSEWHERE = [n for n, t in all_targets().items()
                       if not t.runs_here and t.spec.arch == host_spec().arch]
EMULATED = [n for n, t in all_targets().items() if can_emulate(t)]


def online(api) -> dict:
    return {t["name"]: t for t in api.get("/api/v1/targets").json()["results"]}


def wait_online(api, timeout=30) -> dict:
    deadline = time.monotonic() + timeout
    while not online(api)["native"]["benchmark_online"]:
        assert time.monotonic() < deadline, "the worker never announced itself"
        time.sleep(0.5)
    return online(api)


def test_the_worker_announces_the_targets_its_cpu_runs(api, worker):
    targets = wait_online(api)
    (host,) = targets["native"]["benchmark_hosts"]
    for name, target in targets.items():
        assert target["benchmark_online"] == (name == "native" or name in NATIVE_HERE), name
        assert target["benchmark_hosts"] == ([host] if target["benchmark_online"] else [])


def test_heartbeats_come_and_go(api, user):
    # a target no worker of this test run can announce, whatever this CPU is
    target = next(n for n, t in all_targets().items() if not t.runs_here)
    assert not online(api)[target]["benchmark_hosts"]
    fleet.announce("remote-box@test", "remote-cpu", [target])
    try:
        assert online(api)[target]["benchmark_hosts"] == ["remote-box@test"]
        assert fleet.queue_for(target) == f"{settings.CELERY_QUEUE}.{target}"
    finally:
        fleet.withdraw("remote-box@test")
    assert not online(api)[target]["benchmark_online"]
    assert fleet.queue_for(target) == settings.CELERY_QUEUE
    assert fleet.queue_for("native") == settings.CELERY_QUEUE


@pytest.mark.skipif(not NATIVE_HERE, reason="this CPU runs none of the named targets")
def test_a_job_goes_to_its_targets_queue_and_is_benchmarked_there(api, worker):
    wait_online(api)
    target = NATIVE_HERE[0]
    assert fleet.queue_for(target) == fleet.queue_name(target)
    model = api.upload(onnx_models.elementwise(symbolic=False)).json()
    job = api.post_json("/api/v1/jobs", {"model": model["id"], "target": target}).json()
    job = wait_for(api, job["id"])
    assert job["state"] == "succeeded", job["error"]
    results = job["results"]
    assert results["benchmark_host"] == job["worker"] and results["checked_under"] == "native"
    assert results["speedup"] > 0 and results["benchmark_note"] is None


def submit_and_wait(api, target: str) -> dict:
    wait_online(api)
    assert fleet.queue_for(target) == settings.CELERY_QUEUE  # no benchmark host online
    model = api.upload(onnx_models.elementwise(symbolic=False)).json()
    job = api.post_json("/api/v1/jobs", {"model": model["id"], "target": target}).json()
    job = wait_for(api, job["id"])
    assert job["state"] == "succeeded", job["error"]
    results = job["results"]
    assert "no benchmark host" in results["benchmark_note"] and results["target"] == target
    assert results["compiled"] is None and results["speedup"] is None
    assert results["benchmark_host"] is None and results["stats"]["kernels"] >= 1
    assert "model.so" in {a["name"] for a in job["artifacts"]}
    return results


@pytest.mark.skipif(not SAME_ARCH_ELSEWHERE, reason="this CPU runs every target of its arch")
def test_a_job_no_worker_can_run_is_compiled_and_says_so(api, worker):
    results = submit_and_wait(api, SAME_ARCH_ELSEWHERE[0])
    assert results["checked_under"] is None and results["allclose"] is None
    assert "not compared" in results["benchmark_note"]


@pytest.mark.skipif(not EMULATED, reason="no other architecture's emulator here "
                                         "(make setup installs qemu-user and cross gcc)")
def test_a_job_for_another_architecture_is_checked_under_emulation(api, worker):
    results = submit_and_wait(api, EMULATED[0])
    assert results["checked_under"] == "emulation" and results["allclose"] is True
    assert "emulation" in results["benchmark_note"] and "mean nothing" in results["benchmark_note"]
