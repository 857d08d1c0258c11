"""A small command-line client for CI, using only the standard library.

    export TENSORFORGE_URL=http://127.0.0.1:8000 TENSORFORGE_TOKEN=tf_...
    python -m webapp.client submit model.onnx --input x=1x3x224x224 --wait --download out/
    python -m webapp.client status JOB_ID
    python -m webapp.client download JOB_ID out/

Exit status: 0 when the job succeeded (or was submitted, without --wait), 1 when it failed
or was cancelled, 2 for usage, network and API errors.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

TERMINAL = {"succeeded", "failed", "cancelled"}


class ClientError(Exception):
    pass


class Api:
    def __init__(self, base: str, token: str, timeout: float = 120.0):
        self.base = base.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str | None = None) -> dict:
        req = urllib.request.Request(self.base + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ClientError(f"{method} {path}: HTTP {exc.code}: {_error_text(exc)}") from None
        except urllib.error.URLError as exc:
            raise ClientError(f"cannot reach {self.base}: {exc.reason}") from None

    def upload(self, path: Path) -> dict:
        boundary = uuid.uuid4().hex
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"{path.name}\"\r\nContent-Type: application/octet-stream\r\n\r\n")
        body = head.encode() + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        return self.request("POST", "/models", body, f"multipart/form-data; boundary={boundary}")

    def submit(self, payload: dict) -> dict:
        return self.request("POST", "/jobs", json.dumps(payload).encode(), "application/json")

    def job(self, job_id: str) -> dict:
        return self.request("GET", f"/jobs/{job_id}")

    def artifact_url(self, job_id: str, name: str) -> dict:
        return self.request("GET", f"/jobs/{job_id}/artifacts/{name}?redirect=0")


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return json.loads(exc.read()).get("error", exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def parse_inputs(items: list[str]) -> dict[str, str]:
    shapes = {}
    for item in items or []:
        name, sep, shape = item.partition("=")
        if not sep or not name or not shape:
            raise ClientError(f"--input {item!r}: expected NAME=1x3x224x224")
        shapes[name] = shape
    return shapes


def wait(api: Api, job_id: str, timeout: float, quiet: bool) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        job = api.job(job_id)
        line = f"{job['state']} {job.get('stage') or ''} {job.get('progress', 0) * 100:.0f}%"
        if line != last and not quiet:
            print(f"  {line}", file=sys.stderr)
            last = line
        if job["state"] in TERMINAL:
            return job
        if time.monotonic() > deadline:
            raise ClientError(f"job {job_id} did not finish within {timeout:.0f} s "
                              f"(still {job['state']})")
        time.sleep(1.5)


def download(api: Api, job_id: str, directory: Path) -> Path:
    info = api.artifact_url(job_id, "package.tar.gz")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "package.tar.gz"
    try:
        with urllib.request.urlopen(info["url"], timeout=api.timeout) as resp:
            data = resp.read()
    except urllib.error.URLError as exc:
        raise ClientError(f"downloading package.tar.gz failed: {exc}") from None
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise ClientError("package.tar.gz does not match its sha256; download it again")
    target.write_bytes(data)
    with tarfile.open(target) as tar:
        tar.extractall(directory, filter="data")
    return target


def summary(job: dict) -> str:
    r = job.get("results") or {}
    if job["state"] != "succeeded":
        return f"job {job['id']} {job['state']}: {job.get('error') or ''}"
    if not r.get("compiled"):
        return f"job {job['id']} succeeded (no benchmark: {r.get('benchmark_note')})"
    return (f"job {job['id']} succeeded: compiled {r['compiled']['median_ms']:.4f} ms, "
            f"onnxruntime {r['onnxruntime']['median_ms']:.4f} ms (median), speedup "
            f"{r['speedup']:.2f}x, outputs match: {r['allclose']}")


def cmd_submit(api: Api, args) -> int:
    model = api.upload(Path(args.model))
    payload = {"model": model["id"], "target": args.target, "opt_level": args.opt_level,
               "threads": args.threads, "input_shapes": parse_inputs(args.input)}
    if args.tune_trials or args.tune_seconds:
        payload["tuning"] = {k: v for k, v in (("trials", args.tune_trials),
                                                ("seconds", args.tune_seconds)) if v}
    job = api.submit(payload)
    print(job["id"])
    if not args.wait:
        return 0
    job = wait(api, job["id"], args.timeout, args.quiet)
    print(summary(job), file=sys.stderr)
    if args.json:
        print(json.dumps(job, indent=1))
    if job["state"] != "succeeded":
        return 1
    if args.download:
        print(f"downloaded {download(api, job['id'], Path(args.download))}", file=sys.stderr)
    return 0


def cmd_status(api: Api, args) -> int:
    job = api.job(args.job)
    print(json.dumps(job, indent=1))
    return 0 if job["state"] != "failed" else 1


def cmd_download(api: Api, args) -> int:
    print(download(api, args.job, Path(args.directory)))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m webapp.client", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("TENSORFORGE_URL", "http://127.0.0.1:8000"))
    p.add_argument("--token", default=os.environ.get("TENSORFORGE_TOKEN", ""),
                   help="API token (default: $TENSORFORGE_TOKEN)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="upload a model and submit a compile job")
    s.add_argument("model")
    s.add_argument("--input", action="append", metavar="NAME=SHAPE",
                   help="shape of an input, e.g. x=1x3x224x224 (repeat per input)")
    s.add_argument("--target", default="native")
    s.add_argument("--opt-level", type=int, default=3)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--tune-trials", type=int)
    s.add_argument("--tune-seconds", type=int)
    s.add_argument("--wait", action="store_true", help="wait for the job to finish")
    s.add_argument("--timeout", type=float, default=1800)
    s.add_argument("--download", metavar="DIR", help="with --wait: fetch and unpack the package")
    s.add_argument("--json", action="store_true", help="print the finished job as JSON")
    s.add_argument("--quiet", action="store_true")
    st = sub.add_parser("status", help="print a job as JSON")
    st.add_argument("job")
    d = sub.add_parser("download", help="fetch and unpack a job's package.tar.gz")
    d.add_argument("job")
    d.add_argument("directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.token:
        print("no API token: pass --token or set TENSORFORGE_TOKEN", file=sys.stderr)
        return 2
    api = Api(args.url, args.token)
    commands = {"submit": cmd_submit, "status": cmd_status, "download": cmd_download}
    try:
        return commands[args.command](api, args)
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
