"""API load drill: 50 clients for 30 s against the embedded stack (`make run`), each with its
own user and bearer token, polling its job's status and uploading models; prints the request
count, latency percentiles per kind and overall, and the error counts by status. Exit status
0 when p95 is under the goal and no request got a 5xx or no answer.

    .venv/bin/python -m tests.drills.api_load [--clients 50] [--seconds 30] [--goal-ms 300]

The jobs the clients poll are real: the stack's worker compiles them during the run, as it
would in use. Uploads stay within the per-user rate (TENSORFORGE_UPLOADS_PER_MINUTE); a 429
would be counted and reported as an error all the same.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.drills.make_run import REPO, say, start_stack, wait_for
from tests.service import onnx_models
from webapp import devstack

BOUNDARY = "tfload"
USERS_SCRIPT = """
import json
from django.contrib.auth import get_user_model
from webapp.accounts.models import ApiToken
tokens = []
for k in range({n}):
    user, _ = get_user_model().objects.get_or_create(username=f"load{{k}}")
    tokens.append(ApiToken.issue(user, "load")[1])
print(json.dumps(tokens))
"""


def stack_env(var: Path) -> dict:
    return {**os.environ, "TENSORFORGE_VAR_DIR": str(var),
            "DJANGO_SECRET_KEY": (var / "secret_key").read_text().strip(),
            "DATABASE_URL": f"sqlite:///{var / 'tensorforge.sqlite3'}"}


def make_tokens(var: Path, n: int) -> list[str]:
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                          USERS_SCRIPT.format(n=n)], cwd=REPO, env=stack_env(var),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def multipart(name: str, data: bytes) -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{name}\"\r\n\r\n").encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


class Client:
    """One API client on one keep-alive connection, recording (kind, status, seconds)."""

    def __init__(self, port: int, token: str, record: list):
        self.port, self.token, self.record = port, token, record
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, kind: str, method: str, path: str, body: bytes | None = None,
                ctype: str = "application/json"):
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": ctype}
        start = time.perf_counter()
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            payload = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException):
            self.conn.close()  # reconnects on the next request
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            payload, status = b"", 0  # no answer
        self.record.append((kind, status, time.perf_counter() - start))
        return status, payload

    def upload(self, data: bytes) -> str | None:
        status, payload = self.request("upload", "POST", "/api/v1/models",
                                       multipart("load.onnx", data),
                                       f"multipart/form-data; boundary={BOUNDARY}")
        return json.loads(payload)["id"] if status == 201 else None


def prepare(port: int, tokens: list[str], model: bytes) -> list[str]:
    """One model and one job per user (not timed), so every client has a job to poll."""
    def one(token: str) -> str:
        client = Client(port, token, [])
        model_id = client.upload(model)
        status, body = client.request("submit", "POST", "/api/v1/jobs", json.dumps(
            {"model": model_id, "input_shapes": {"x": [1, 256]}}).encode())
        if status != 201:
            raise RuntimeError(f"could not submit a job ({status}): {body[:300]!r}")
        return json.loads(body)["id"]
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, tokens))


def run_client(client: Client, job: str, model: bytes, until: float, poll: float,
               upload_every: float) -> None:
    next_upload = time.monotonic() + random.uniform(0, upload_every)  # spread the uploads
    while time.monotonic() < until:
        if time.monotonic() >= next_upload:
            client.upload(model)
            next_upload += upload_every
        else:
            client.request("poll", "GET", f"/api/v1/jobs/{job}")
        time.sleep(poll)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 \
        else (values[0] if values else 0.0)


def report(record: list, seconds: float) -> tuple[float, int]:
    """Print the figures; return the overall p95 (ms) and the count of 5xx or no answer."""
    statuses = Counter(status for _, status, _ in record)
    say(f"{len(record)} requests in {seconds:.0f} s ({len(record) / seconds:.0f}/s); "
        f"statuses {dict(sorted(statuses.items()))}")
    for kind in sorted({k for k, _, _ in record}) + ["all"]:
        ms = [t * 1000 for k, _, t in record if kind in (k, "all")]
        say(f"  {kind:7s} n={len(ms):5d}  p50 {percentile(ms, 50):7.1f} ms  p95 "
            f"{percentile(ms, 95):7.1f} ms  p99 {percentile(ms, 99):7.1f} ms  max "
            f"{max(ms):7.1f} ms")
    bad = sum(n for status, n in statuses.items() if status == 0 or status >= 500)
    errors = sum(n for status, n in statuses.items() if status == 0 or status >= 400)
    say(f"errors: {errors} (5xx or no answer: {bad})")
    return percentile([t * 1000 for _, _, t in record], 95), bad


def load(var: Path, clients: int, seconds: float, poll: float, upload_every: float,
         goal_ms: float) -> int:
    port = devstack.free_port()
    stack = start_stack(var, port)
    try:
        wait_for(lambda: devstack.port_open(port), "the web server", 180)
        model = onnx_models.elementwise()
        tokens = make_tokens(var, clients)
        jobs = prepare(port, tokens, model)
        say(f"{clients} users, each with a model and a job; {clients} clients for {seconds:.0f} s "
            f"(poll every {poll} s, an upload every {upload_every} s)")
        record: list = []  # list.append is atomic: one list for every thread
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=run_client, args=(
            Client(port, token, record), job, model, until, poll, upload_every))
            for token, job in zip(tokens, jobs)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p95, bad = report(record, time.monotonic() - start)
        ok = p95 < goal_ms and bad == 0
        say(f"{'PASS' if ok else 'FAIL'}: p95 {p95:.1f} ms (goal < {goal_ms:.0f} ms), "
            f"{bad} 5xx or unanswered")
        return 0 if ok else 1
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between a client's "
                        "requests")
    parser.add_argument("--upload-every", type=float, default=30.0,
                        help="seconds between a client's uploads")
    parser.add_argument("--goal-ms", type=float, default=300)
    parser.add_argument("--var", type=Path, default=None)
    args = parser.parse_args()
    var = args.var or Path(tempfile.mkdtemp(prefix="tf-load-"))
    var.mkdir(parents=True, exist_ok=True)
    return load(var, args.clients, args.seconds, args.poll, args.upload_every, args.goal_ms)


if __name__ == "__main__":
    sys.exit(main())
