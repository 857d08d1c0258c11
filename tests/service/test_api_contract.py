"""Live responses of the real stack (a Celery worker, SeaweedFS, the database, Redis) against
the OpenAPI document the server publishes: every response validates, and every field in it
is declared, so a client generated from the schema reads everything the server sends."""
import time

from tests.service import onnx_models
from tests.service.conftest import ApiClient
from tests.service.contract import response_schema, undeclared, violations

TERMINAL = ("succeeded", "failed", "cancelled")


def wait_for(api, job_id, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in TERMINAL:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {job['state']} after {timeout} s")


class Recorder:
    """Calls the API and keeps (method, path template, status, body) of every response."""

    def __init__(self, api):
        self.api = api
        self.seen = []

    def keep(self, method, template, resp):
        body = resp.json() if resp["Content-Type"].startswith("application/json") else None
        self.seen.append((method, template, resp.status_code, body))
        return resp

    def get(self, template, path, **params):
        return self.keep("GET", template, self.api.get(path, **params))

    def post(self, template, path, data=None, raw=None):
        return self.keep("POST", template, self.api.post_json(path, data, raw))

    def upload(self, data, name="model.onnx"):
        return self.keep("POST", "/models", self.api.upload(data, name))


def exercise(rec: Recorder, other: Recorder, anonymous: Recorder) -> None:
    """One pass over every operation, with successes and the errors a client meets."""
    model = rec.upload(onnx_models.elementwise(), "net.onnx").json()
    rec.upload(b"not a model")
    rec.get("/models", "/api/v1/models")
    rec.get("/models", "/api/v1/models", page="x")
    rec.get("/models", "/api/v1/models", page=9)
    rec.get("/models/{id}", f"/api/v1/models/{model['id']}")
    other.get("/models/{id}", f"/api/v1/models/{model['id']}")
    anonymous.get("/models", "/api/v1/models")
    job = rec.post("/jobs", "/api/v1/jobs", {"model": model["id"],
                                              "input_shapes": {"x": [2, 256]}}).json()
    rec.post("/jobs", "/api/v1/jobs", {"model": model["id"]})
    rec.post("/jobs", "/api/v1/jobs", raw="{not json")
    other.post("/jobs", "/api/v1/jobs", {"model": model["id"], "input_shapes": {"x": [1, 256]}})
    wait_for(rec.api, job["id"])
    rec.get("/jobs/{id}", f"/api/v1/jobs/{job['id']}")
    rec.get("/jobs", "/api/v1/jobs")
    rec.get("/jobs", "/api/v1/jobs", state="exploded")
    rec.post("/jobs/{id}/cancel", f"/api/v1/jobs/{job['id']}/cancel")
    rec.get("/jobs/{id}/artifacts/{name}", f"/api/v1/jobs/{job['id']}/artifacts/model.so",
            redirect="0")
    rec.get("/jobs/{id}/artifacts/{name}", f"/api/v1/jobs/{job['id']}/artifacts/nope")
    failing = rec.upload(onnx_models.unsupported()).json()
    failed = rec.post("/jobs", "/api/v1/jobs", {"model": failing["id"]}).json()
    wait_for(rec.api, failed["id"])
    rec.get("/jobs/{id}", f"/api/v1/jobs/{failed['id']}")
    queued = rec.post("/jobs", "/api/v1/jobs", {"model": model["id"],
                                                 "input_shapes": {"x": [1, 256]}}).json()
    rec.post("/jobs/{id}/cancel", f"/api/v1/jobs/{queued['id']}/cancel")
    rec.get("/jobs/{id}", f"/api/v1/jobs/{queued['id']}")
    rec.get("/targets", "/api/v1/targets")


def test_every_live_response_matches_the_published_schema(api, other_api, worker):
    spec = api.client.get("/api/v1/openapi.json").json()
    recorders = Recorder(api), Recorder(other_api), Recorder(ApiClient(None))
    exercise(*recorders)
    seen = [r for rec in recorders for r in rec.seen]
    statuses = {status for _, _, status, _ in seen}
    assert {200, 201, 400, 401, 404, 409} <= statuses
    problems, extra = [], set()
    for method, template, status, body in seen:
        assert body is not None, f"{method} {template} {status} is not JSON"
        schema = response_schema(spec, method, template, status)
        problems += [f"{method} {template} {status} {v}" for v in violations(spec, schema, body)]
        extra |= {f"{method} {template} {status}: {f}" for f in undeclared(spec, schema, body)}
    assert not problems, "\n".join(problems)
    assert not extra, f"{len(extra)} undeclared fields:\n" + "\n".join(sorted(extra))
