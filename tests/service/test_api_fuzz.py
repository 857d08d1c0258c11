"""Property-based fuzzing of the live API with schemathesis: every operation of the
published OpenAPI document, authenticated, with every check (no 5xx, responses that match
the schema, schema-valid requests accepted, invalid ones refused, 405 for other methods...).

`make test` runs a short pass with a fixed seed (TF_FUZZ_EXAMPLES, default 15 cases per
operation and phase); `make fuzz` a long one with a new seed each time (TF_FUZZ_SEED to
replay one). The account owns a model and a job, so the stateful phase, which
follows ids from one response into the next request, reaches real objects.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.service import onnx_models

CONFIG = Path(__file__).with_name("schemathesis.toml")


def schemathesis(base: str, token: str, report: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run",
           f"{base}/api/v1/openapi.json", "-H", f"Authorization: Bearer {token}",
           "--checks", "all", "--max-examples", os.environ.get("TF_FUZZ_EXAMPLES", "15"),
           # one worker: hypothesis parses lambda sources with ast.parse, which CPython 3.11
           # does not make thread-safe ("AST constructor recursion depth mismatch")
           "--workers", "1", "--report", "ndjson", "--report-ndjson-path", str(report)]
    seed = os.environ.get("TF_FUZZ_SEED", "" if "TF_FUZZ_EXAMPLES" in os.environ else "20261123")
    cmd += ["--seed", seed] if seed else []
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800)


def requests_made(report: Path) -> int:
    """HTTP requests the run sent, counted from its NDJSON event log."""
    count = 0
    for line in report.read_text().splitlines():
        recorder = json.loads(line).get("ScenarioFinished", {}).get("recorder", {})
        count += len(recorder.get("interactions", {}))
    return count


def test_fuzzing_finds_no_failure(live_server, worker, api, token, tmp_path):
    model = api.upload(onnx_models.elementwise(symbolic=False), "fuzz.onnx").json()
    assert api.post_json("/api/v1/jobs", {"model": model["id"]}).status_code == 201
    report = tmp_path / "schemathesis.ndjson"
    done = schemathesis(live_server, token, report)
    print(done.stdout[-3000:])
    print(f"schemathesis: {requests_made(report)} requests")
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]
