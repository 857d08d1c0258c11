"""Each property of the sandbox, shown from inside a real child (tests/sandbox/probe_child.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sandbox import namespaces
from sandbox.limits import Limits
from sandbox.runner import REPO_ROOT, ChildSpec, SandboxError, run_child

PROBE = "tests.sandbox.probe_child"
SECRETS = {"DJANGO_SECRET_KEY": "s3cr3t-django", "DATABASE_URL": "postgres://u:pw@db/x",
           "S3_SECRET_ACCESS_KEY": "s3cr3t-s3", "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws",
           "REDIS_URL": "redis://:pw@redis:6379/0"}
needs_namespaces = pytest.mark.skipif(not namespaces.availability()[0],
                                      reason=f"no namespaces: {namespaces.availability()[1]}")


@pytest.fixture(params=["namespaces", "fallback"])
def mode(request, monkeypatch):
    """Both ways a worker may confine children: with bwrap, and without (some containers)."""
    if request.param == "namespaces" and not namespaces.availability()[0]:
        pytest.skip(f"no namespaces: {namespaces.availability()[1]}")
    if request.param == "fallback":
        monkeypatch.setenv("TENSORFORGE_SANDBOX_NAMESPACES", "0")
    namespaces.availability.cache_clear()
    yield request.param
    namespaces.availability.cache_clear()


def probe(workdir: Path, kind: str, args: dict | None = None, timeout: float = 60,
          **limits) -> dict:
    spec = ChildSpec(kind, args or {}, workdir, timeout, Limits(**limits), module=PROBE)
    return run_child(spec)


def leftovers(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `marker` (zombies are dead already)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        if any(marker in part for part in p.info["cmdline"] or []):
            found.append(p)
    return found


def wait_gone(marker: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while leftovers(marker):
        assert time.monotonic() < deadline, f"still alive: {leftovers(marker)}"
        time.sleep(0.1)


def test_environment_holds_no_secret(mode, tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    env = probe(tmp_path / "work", "env")
    assert not set(SECRETS) & set(env)
    assert not any(v in " ".join(env.values()) for v in SECRETS.values())


def test_a_child_can_run_at_a_lower_priority(tmp_path):
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert probe(tmp_path / "work", "priority") == own
    assert probe(tmp_path / "work2", "priority", nice=10) == min(own + 10, 19)


def test_no_socket_can_be_opened(mode, tmp_path):
    assert probe(tmp_path / "work", "socket") == {"inet": "EPERM", "inet6": "EPERM",
                                                  "unix": "EPERM"}


def test_no_program_can_be_started(mode, tmp_path):
    assert probe(tmp_path / "work", "exec") == "EACCES"


def test_no_process_can_leave_the_group_the_runner_kills(mode, tmp_path):
    assert probe(tmp_path / "work", "new_group") == {"setsid": "EPERM", "setpgid": "EPERM"}


@needs_namespaces
def test_only_the_work_directory_is_writable(tmp_path):
    work = tmp_path / "work"
    outside = [str(tmp_path / "beside.txt"), str(REPO_ROOT / "escaped.txt"), "/etc/escaped",
               "/tmp/escaped.txt", "/usr/escaped"]
    outcomes = probe(work, "write", {"paths": [str(work / "inside.txt"), *outside]})
    assert outcomes.pop(str(work / "inside.txt")) == "written"
    assert set(outcomes.values()) <= {"EROFS", "ENOENT", "EACCES"}, outcomes
    assert not any(Path(p).exists() for p in outside)


@needs_namespaces
def test_files_beside_the_work_directory_are_not_visible(tmp_path):
    secret = tmp_path / "secret_key"
    secret.write_text("do not read")
    assert probe(tmp_path / "work", "read", {"path": str(secret)}) == "ENOENT"
    assert probe(tmp_path / "work", "read", {"path": "/etc/shadow"}) == "ENOENT"


def test_fork_bomb_is_stopped(tmp_path):
    work = tmp_path / "work"
    started = time.monotonic()
    with pytest.raises(SandboxError) as err:
        probe(work, "fork_bomb", timeout=8, processes=64, cpu_seconds=20)
    assert err.value.kind == "timeout"
    assert time.monotonic() - started < 30
    wait_gone(str(work))


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker gives children users")
def test_a_fork_bomb_leaves_other_childrens_process_limit_alone(tmp_path):
    """Each child has a user of its own, so a fork bomb at its limit of 64 processes does
    not stop another child, under the same limit, from starting its threads."""
    bomb_work, outcome = tmp_path / "bomb", []

    def run_bomb():
        try:
            probe(bomb_work, "fork_bomb", timeout=8, processes=64, cpu_seconds=20)
        except SandboxError as exc:
            outcome.append(exc.kind)
    bomb = threading.Thread(target=run_bomb)
    bomb.start()
    try:
        deadline = time.monotonic() + 30
        while len(leftovers(str(bomb_work))) < 32:  # the bomb is at work
            assert time.monotonic() < deadline and bomb.is_alive(), "the bomb never started"
            time.sleep(0.1)
        first = probe(tmp_path / "first", "threads", {"threads": 16}, processes=64)
        second = probe(tmp_path / "second", "threads", {"threads": 16}, processes=64)
    finally:
        bomb.join()
    wait_gone(str(bomb_work))
    assert outcome == ["timeout"]
    assert first["threads"] == second["threads"] == 16
    assert first["uid"] != second["uid"] and 0 not in (first["uid"], second["uid"])


def test_disk_filler_is_stopped_by_the_file_size_limit(mode, tmp_path):
    with pytest.raises(SandboxError) as err:
        probe(tmp_path / "work", "fill_file", file_mb=16)
    assert err.value.kind == "disk" and "over the limit of 16 MiB" in str(err.value)
    assert (tmp_path / "work" / "filler.bin").stat().st_size <= 16 * 2**20


def test_disk_filler_is_stopped_by_the_directory_cap(mode, tmp_path):
    with pytest.raises(SandboxError) as err:
        probe(tmp_path / "work", "fill_directory", workdir_mb=32)
    assert err.value.kind == "disk" and "more than 32 MiB" in str(err.value)


PARENT = """
import sys
from pathlib import Path
from sandbox.runner import ChildSpec, run_child
run_child(ChildSpec("sleep", {}, Path(sys.argv[1]), 600, module="tests.sandbox.probe_child"))
"""


def test_the_child_exits_when_its_lifeline_closes_though_its_parent_lives(mode, tmp_path):
    """What catches a worker that died before the parent-death signal was armed: the child
    sees the lifeline's end-of-file, whoever its parent is."""
    from sandbox.runner import _start
    work = tmp_path / "work"
    work.mkdir()
    spec = ChildSpec("sleep", {}, work, 600, module=PROBE)
    lifeline, keep = os.pipe()
    proc = _start(spec, work / "sleep-result.json", work / "sleep.log", lifeline)
    os.close(lifeline)
    try:
        assert b"sleeping" in proc.stdout.readline()  # confined: its lifeline is watched
        time.sleep(0.5)
        assert proc.poll() is None
        os.close(keep)
        proc.wait(timeout=10)
        wait_gone(str(work))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_parent_death_kills_the_child(mode, tmp_path):
    work = tmp_path / "work"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(work)], cwd=REPO_ROOT)
    deadline = time.monotonic() + 30
    while not [p for p in leftovers(str(work)) if p.pid != parent.pid]:
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.1)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_gone(str(work))
