"""POST/GET /api/v1/jobs, cancel, artifacts: validation, 404 isolation, 409 conflicts."""
import pytest

from webapp.jobs.models import Artifact, CompileJob, JobState


def submit(api, model_id, **fields):
    return api.post_json("/api/v1/jobs", {"model": model_id, **fields})


def test_submit_creates_a_queued_job(api, uploaded, no_enqueue):
    resp = submit(api, uploaded["id"], input_shapes={"x": "4x256"}, opt_level=2, threads=2,
                  tuning={"trials": 8})
    assert resp.status_code == 201
    body = resp.json()
    assert body["state"] == "queued" and body["id"]
    assert body["input_shapes"] == {"x": [4, 256]}
    assert body["tuning"] == {"trials": 8, "seconds": None}
    assert [j.id for j in no_enqueue] == [CompileJob.objects.get().id]
    assert body["stages"] == ["validate", "optimize", "tune", "build", "benchmark", "package",
                              "upload"]
    assert body["weight_dtype"] == "float32"  # the default


def test_weight_dtype_the_target_cannot_widen_is_400(api, uploaded, no_enqueue, monkeypatch):
    from compiler_core.codegen.target_machine import MachineSpec
    from compiler_core.targets import Target
    from webapp.jobs import validation
    old = Target("native", "an x86-64 CPU without F16C or AVX2",
                 MachineSpec("x86_64-unknown-linux-gnu", "westmere", "+sse4.2,-f16c,-avx2"))
    monkeypatch.setattr(validation, "get_target", lambda name: old)
    resp = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}, weight_dtype="float16")
    assert resp.status_code == 400 and "needs F16C" in resp.json()["error"]
    resp = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}, weight_dtype="int8")
    assert resp.status_code == 400 and "needs AVX2" in resp.json()["error"]
    assert submit(api, uploaded["id"], input_shapes={"x": [1, 256]}).status_code == 201
    assert len(no_enqueue) == 1


def test_weight_dtype_is_stored_and_returned(api, uploaded, no_enqueue):
    resp = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}, weight_dtype="float16")
    assert resp.status_code == 201 and resp.json()["weight_dtype"] == "float16"
    assert CompileJob.objects.get().weight_dtype == "float16"
    assert api.get(f"/api/v1/jobs/{resp.json()['id']}").json()["weight_dtype"] == "float16"


@pytest.mark.parametrize("fields, message", [
    ({}, "symbolic dimensions"),                              # N not given
    ({"input_shapes": {"x": [4, 128]}}, "fixed dimension"),
    ({"input_shapes": {"x": [4]}}, "dimensions"),
    ({"input_shapes": {"y": [4, 256]}}, "unknown inputs"),
    ({"input_shapes": {"x": "4by256"}}, "not a shape"),
    ({"input_shapes": {"x": [0, 256]}}, "between 1"),
    ({"input_shapes": {"x": [4, 256]}, "opt_level": 7}, "opt_level"),
    ({"input_shapes": {"x": [4, 256]}, "threads": 0}, "threads"),
    ({"input_shapes": {"x": [4, 256]}, "target": "gpu9000"}, "unknown target"),
    ({"input_shapes": {"x": [4, 256]}, "tuning": {"hours": 1}}, "tuning"),
    ({"input_shapes": {"x": [4, 256]}, "colour": "red"}, "unknown fields"),
    ({"input_shapes": {"x": [4, 256]}, "weight_dtype": "int4"},
     "unknown weight_dtype 'int4'; valid: float32, float16, int8"),
    ({"input_shapes": {"x": [4, 256]}, "weight_dtype": 16}, "unknown weight_dtype 16"),
])
def test_invalid_job_requests_are_400(api, uploaded, no_enqueue, fields, message):
    resp = submit(api, uploaded["id"], **fields)
    assert resp.status_code == 400
    assert message in resp.json()["error"]
    assert not no_enqueue


def test_bad_json_and_missing_model_are_400(api, uploaded, no_enqueue):
    assert api.post_json("/api/v1/jobs", raw="{not json").status_code == 400
    assert api.post_json("/api/v1/jobs", raw="[1, 2]").status_code == 400
    resp = api.post_json("/api/v1/jobs", {"input_shapes": {}})
    assert resp.status_code == 400 and "model is required" in resp.json()["error"]


def test_other_users_model_is_404(api, other_api, uploaded, no_enqueue):
    resp = submit(other_api, uploaded["id"], input_shapes={"x": [1, 256]})
    assert resp.status_code == 404


def test_list_detail_and_filters(api, uploaded, no_enqueue):
    job_id = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}).json()["id"]
    listing = api.get("/api/v1/jobs").json()
    assert listing["count"] == 1 and listing["results"][0]["id"] == job_id
    assert api.get("/api/v1/jobs", state="failed").json()["count"] == 0
    assert api.get("/api/v1/jobs", state="exploded").status_code == 400
    assert api.get("/api/v1/jobs", model=uploaded["id"]).json()["count"] == 1
    detail = api.get(f"/api/v1/jobs/{job_id}").json()
    assert detail["state"] == "queued" and detail["progress"] == 0 and detail["artifacts"] == []
    assert "log_tail" in detail and detail["results"] is None


def test_cancel_then_conflict(api, uploaded, no_enqueue):
    job_id = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}).json()["id"]
    resp = api.post_json(f"/api/v1/jobs/{job_id}/cancel")
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"
    again = api.post_json(f"/api/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["error"]


def test_artifact_routes(api, other_api, uploaded, no_enqueue):
    job_id = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}).json()["id"]
    url = f"/api/v1/jobs/{job_id}/artifacts/package.tar.gz"
    assert api.get(url).status_code == 404  # not built yet
    job = CompileJob.objects.get(pk=job_id)
    job.state = JobState.SUCCEEDED
    job.save()
    Artifact.objects.create(job=job, name="package.tar.gz", size=3, sha256="ab" * 32,
                            storage_key=f"jobs/{job.id}/package.tar.gz")
    resp = api.get(url)
    assert resp.status_code == 302 and "X-Amz-Signature" in resp["Location"]
    assert "X-Amz-Expires=" in resp["Location"]
    info = api.get(url, redirect="0").json()
    assert info["sha256"] == "ab" * 32 and info["url"].startswith("http")
    assert api.get(f"/api/v1/jobs/{job_id}/artifacts/nope.bin").status_code == 404


def test_isolation_on_every_job_route(api, other_api, uploaded, no_enqueue):
    job_id = submit(api, uploaded["id"], input_shapes={"x": [1, 256]}).json()["id"]
    for path in (f"/api/v1/jobs/{job_id}", f"/api/v1/jobs/{job_id}/artifacts/package.tar.gz",
                 f"/api/v1/models/{uploaded['id']}"):
        assert other_api.get(path).status_code == 404, path
    assert other_api.post_json(f"/api/v1/jobs/{job_id}/cancel").status_code == 404
    assert other_api.get("/api/v1/jobs").json()["count"] == 0
    assert other_api.get("/api/v1/jobs", model=uploaded["id"]).status_code == 404
    assert CompileJob.objects.get(pk=job_id).state == "queued"


def test_targets_and_openapi(api):
    targets = api.get("/api/v1/targets").json()["results"]
    assert "native" in [t["name"] for t in targets]
    schema = api.client.get("/api/v1/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    for path in ("/models", "/models/{id}", "/jobs", "/jobs/{id}", "/jobs/{id}/cancel",
                 "/jobs/{id}/artifacts/{name}", "/targets"):
        assert path in schema["paths"]
