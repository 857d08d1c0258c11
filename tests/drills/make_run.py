"""The issue-9 drill: under `make run` (webapp/devstack.py), submit 4 jobs; take storage away
while the first one uploads its package (SeaweedFS stopped, then SIGKILLed, so the devstack
restarts it); SIGKILL the Celery worker mid-job, the broker a minute later; and wait, with no
help, until every job ends. Prints each job's end state and the recovery times; exit status
0 when all succeeded.

    .venv/bin/python -m tests.drills.make_run [--var DIR] [--timeout SECONDS]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from webapp import devstack

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "models" / "mobile_cnn.onnx"


def say(text: str) -> None:
    print(f"[drill {time.strftime('%H:%M:%S')}] {text}", flush=True)


class Api:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def call(self, path: str, body: bytes | None = None, ctype: str = "application/json"):
        req = urllib.request.Request(self.url + path, data=body, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": ctype})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def upload(self, path: Path) -> str:
        boundary = "tfdrill"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"{path.name}\"\r\n\r\n").encode() + path.read_bytes() + \
            f"\r\n--{boundary}--\r\n".encode()
        return self.call("/api/v1/models", body, f"multipart/form-data; boundary={boundary}")["id"]

    def states(self, ids: list[str]) -> dict[str, str]:
        return {i: self.call(f"/api/v1/jobs/{i}")["state"] for i in ids}

    def stages(self, ids: list[str]) -> set[str]:
        """The stages of the running jobs."""
        jobs = [self.call(f"/api/v1/jobs/{i}") for i in ids]
        return {j["stage"] for j in jobs if j["state"] == "running"}


def child_named(stack: psutil.Process, word: str) -> psutil.Process:
    for p in stack.children():
        if word in " ".join(p.cmdline()):
            return p
    raise RuntimeError(f"no {word} process under the devstack")


def start_stack(var: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "TENSORFORGE_VAR_DIR": str(var), "PORT": str(port),
           "TENSORFORGE_REDIS_PORT": str(devstack.free_port()),
           "TENSORFORGE_S3_PORT": str(devstack.free_port())}
    for name in ("REDIS_URL", "S3_ENDPOINT_URL", "DATABASE_URL", "DJANGO_SECRET_KEY"):
        env.pop(name, None)
    log = open(var / "devstack.out", "wb")
    return subprocess.Popen([sys.executable, "-m", "webapp.devstack"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def token(var: Path) -> str:
    env = {**os.environ, "TENSORFORGE_VAR_DIR": str(var),
           "DJANGO_SECRET_KEY": (var / "secret_key").read_text().strip(),
           "DATABASE_URL": f"sqlite:///{var / 'tensorforge.sqlite3'}"}
    out = subprocess.run([sys.executable, "manage.py", "create_api_token", "drill"], cwd=REPO,
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().split()[-1]


def wait_for(check, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(1)


def wait_for_stage(api: Api, ids: list[str], stages: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not api.stages(ids) & stages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for a job in stage {sorted(stages)}")
        time.sleep(0.2)


def storage_outage(api: Api, stack: psutil.Process, ids: list[str], hold: float = 20) -> None:
    """Stop storage while a job benchmarks, so that its upload meets the outage; once the job
    is uploading, keep storage stopped `hold` s longer, then SIGKILL it: the devstack starts
    it again. Stopped, it accepts connections and never answers (a hung server); killed, it
    refuses them: the worker's storage calls meet both."""
    wait_for_stage(api, ids, {"benchmark", "package", "upload"}, 600)
    weed = child_named(stack, "weed")
    say(f"SIGSTOP storage pid {weed.pid}; stages {sorted(api.stages(ids))}")
    os.kill(weed.pid, signal.SIGSTOP)
    try:
        wait_for_stage(api, ids, {"upload"}, 300)
        say(f"a job is uploading into the outage; storage stays stopped {hold:.0f} s more")
        time.sleep(hold)
    finally:
        say(f"SIGKILL storage pid {weed.pid}; the devstack restarts it")
        os.kill(weed.pid, signal.SIGKILL)


def drill(var: Path, timeout: float) -> int:
    port = devstack.free_port()
    stack = start_stack(var, port)
    try:
        wait_for(lambda: devstack.port_open(port), "the web server", 180)
        api = Api(f"http://127.0.0.1:{port}", token(var))
        model = api.upload(MODEL)
        ids = [api.call("/api/v1/jobs", json.dumps({"model": model}).encode())["id"]
               for _ in range(4)]
        say(f"submitted 4 jobs: {ids}")
        storage_outage(api, psutil.Process(stack.pid), ids)
        wait_for(lambda: "running" in api.states(ids).values(), "a running job", 300)
        time.sleep(3)  # mid-job: inside the compile or the benchmark
        worker = child_named(psutil.Process(stack.pid), "celery")
        say(f"SIGKILL worker pid {worker.pid}; states {api.states(ids)}")
        os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        time.sleep(60)
        redis = child_named(psutil.Process(stack.pid), "redis-server")
        say(f"SIGKILL broker pid {redis.pid}; states {api.states(ids)}")
        os.kill(redis.pid, signal.SIGKILL)
        wait_for(lambda: all(s in ("succeeded", "failed", "cancelled")
                             for s in api.states(ids).values()), "every job to end", timeout)
        states = api.states(ids)
        say(f"all ended {time.monotonic() - killed:.0f} s after the worker was killed: {states}")
        for i in ids:
            job = api.call(f"/api/v1/jobs/{i}")
            say(f"job {i}: {job['state']}, attempts {job.get('attempts')}, error "
                f"{job.get('error')!r}")
        return 0 if set(states.values()) == {"succeeded"} else 1
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.wait(60)
        restarts = [line for line in (var / "devstack.out").read_text().splitlines()
                    if "[devstack]" in line]
        say("devstack said:\n  " + "\n  ".join(restarts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--var", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    var = args.var or Path(tempfile.mkdtemp(prefix="tf-drill-"))
    var.mkdir(parents=True, exist_ok=True)
    return drill(var, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
