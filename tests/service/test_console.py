"""Console pages through Django's test client: sign-in, pages, forms, empty and error states."""
import re

import pytest
from django.test import Client

from compiler_core.analysis.layer_report import layer_report
from compiler_core.analysis.machine_limits import MachineLimits
from tests.service import onnx_models
from webapp.accounts.models import ApiToken
from webapp.jobs.models import Artifact, CompileJob

RESULTS = {
    "compiled": {"median_ms": 0.5, "mean_ms": 0.52, "p90_ms": 0.6, "p99_ms": 0.7, "min_ms": 0.4,
                 "max_ms": 0.9, "std_ms": 0.05, "runs": 100},
    "onnxruntime": {"median_ms": 1.0, "mean_ms": 1.1, "p90_ms": 1.3, "p99_ms": 1.5,
                    "min_ms": 0.9, "max_ms": 2.0, "std_ms": 0.1, "runs": 100},
    "speedup": 2.0, "max_abs_err": 1e-7, "max_rel_err": 1e-7, "allclose": True,
    "kernels": [{"name": "k0_Add", "op": "Add", "mean_ms": 0.3}], "kernel_count": 1}
PRECISION = {"weight_dtype": "int8", "layers": [{"node": "/fc", "op": "PackedGemm",
                                                 "weights": 2048}],
             "accuracy": {"measured_on": "native", "inputs": "random (seed 0)",
                          "outputs": {"probs": {"max_abs_err": 3.5e-4, "max_rel_err": 2.5e-3}},
                          "max_abs_err": 3.5e-4, "max_rel_err": 2.5e-3}}


@pytest.fixture
def browser(user):
    client = Client()  # through the sign-in page, as a person does (and django-axes needs)
    resp = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
    assert resp.status_code == 302, resp.content
    return client


def test_pages_need_sign_in():
    resp = Client().get("/models/")
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    assert Client().get("/login/").status_code == 200


def test_empty_states(browser):
    assert "No models yet" in browser.get("/models/").content.decode()
    assert "No jobs" in browser.get("/jobs/").content.decode()
    assert "No tokens yet" in browser.get("/tokens/").content.decode()


def test_model_page_asks_for_symbolic_dims_and_submits(browser, api, uploaded, no_enqueue):
    page = browser.get(f"/models/{uploaded['id']}/").content.decode()
    assert 'name="dim__x__0"' in page and "Compile" in page
    resp = browser.post(f"/models/{uploaded['id']}/", {
        "dim__x__0": "4", "target": "native", "opt_level": "3", "threads": "1",
        "tuning_kind": "none", "weight_dtype": "int8"})
    job = CompileJob.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.id}/"
    assert job.input_shapes == {"x": [4, 256]} and no_enqueue
    assert job.weight_dtype == "int8" and 'name="weight_dtype"' in page


def test_compile_form_errors_are_shown(browser, uploaded, no_enqueue):
    resp = browser.post(f"/models/{uploaded['id']}/", {"dim__x__0": "", "threads": "1"})
    assert resp.status_code == 400
    assert "symbolic dimensions" in resp.content.decode()
    assert not CompileJob.objects.exists()


def test_unsupported_ops_are_highlighted(browser, api, s3):
    model = api.upload(onnx_models.unsupported()).json()
    page = browser.get(f"/models/{model['id']}/").content.decode()
    assert "cannot be compiled yet" in page and "TfIdfVectorizer" in page


def test_job_page_shows_chart_speedup_and_live_fragment(browser, api, uploaded,
                                                               no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"],
                                            "input_shapes": {"x": [1, 256]}}).json()["id"]
    live = browser.get(f"/jobs/{job_id}/live/").content.decode()
    assert 'data-live="true"' in live and "Waiting for a worker" in live
    CompileJob.objects.filter(pk=job_id).update(state="succeeded", stage="upload",
                                                progress=1.0, results=RESULTS)
    Artifact.objects.create(job_id=job_id, name="package.tar.gz", size=3, sha256="ab" * 32,
                            storage_key=f"jobs/{job_id}/package.tar.gz")
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert "<svg" in page and "2.00×" in page and 'id="layer-report"' not in page
    assert f"/api/v1/jobs/{job_id}/artifacts/package.tar.gz" in page
    assert 'data-live="false"' in page
    compare = browser.get(f"/models/{uploaded['id']}/compare/?job={job_id}").content.decode()
    assert "<svg" in compare and "2.00×" in compare


def layer_results():
    """RESULTS with a layer report as the worker makes it: a GRU and a fused Gemm+Relu."""
    limits = MachineLimits("znver3", "AMD EPYC", 100.0, {"L2": 80.0, "L3": 40.0, "memory": 20.0},
                           {"L2": 512 * 1024, "L3": 32 * 2 ** 20})
    def cost(flops, weights, acts):
        return {"flops": flops, "bytes": weights + acts, "weight_bytes": weights,
                "read_bytes": acts, "written_bytes": 0}
    meta = {"kernels": [{"onnx_nodes": ["/gru"], **cost(1_400_000, 2_000_000, 3000)},
                        {"onnx_nodes": ["/fc", "/relu"], **cost(200_000, 400_000, 2000)}],
            "layers": [{"onnx_node": "/gru", **cost(1_400_000, 2_000_000, 3000)},
                       {"onnx_node": "/fc", **cost(199_000, 400_000, 2000)},
                       {"onnx_node": "/relu", **cost(1000, 0, 2000)}],
            "stats": {"weights_bytes": 2_400_000, "arena_bytes": 8192}}
    report = layer_report(meta, [{"mean_ms": 0.05}, {"mean_ms": 0.01}], limits)
    return {**RESULTS, "layer_report": report, "target": "native", "threads": 1,
            "stats": {"compile_seconds": 0.2, "arena_bytes": 8192, "weights_bytes": 2_400_000,
                      "nodes": 3, "kernels": 2}}


def test_job_page_shows_the_layer_report_sorted_with_what_ifs(browser, api, uploaded,
                                                               no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"],
                                            "input_shapes": {"x": [1, 256]}}).json()["id"]
    results = layer_results()
    CompileJob.objects.filter(pk=job_id).update(state="succeeded", stage="upload",
                                                progress=1.0, results=results)
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    report = page[page.index('id="layer-report"'):]
    assert "Per-kernel time" not in page  # the layer report replaced the kernel table
    assert re.findall(r'data-node="([^"]+)"', report) == ["/gru", "/fc", "/relu"]
    widths = [float(w) for w in re.findall(r'<span style="width:([\d.]+)%', report)]
    assert widths[0] == 100.0 and widths == sorted(widths, reverse=True)
    gru = results["layer_report"]["layers"][0]
    assert f"{gru['model_what_if']['int8']:.2f}×" in report  # what-ifs beside the bars
    assert "80% sparse" in report and "Every layer at once" in report and "znver3" in report
    assert "memory" in report and "L3" in report
    api_report = api.get(f"/api/v1/jobs/{job_id}").json()["results"]["layer_report"]
    assert api_report == results["layer_report"]


def test_job_page_and_api_show_the_weight_precision_error(browser, api, uploaded, no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"], "weight_dtype": "int8",
                                            "input_shapes": {"x": [1, 256]}}).json()["id"]
    CompileJob.objects.filter(pk=job_id).update(
        state="succeeded", stage="upload", progress=1.0,
        results={**RESULTS, "weight_precision": PRECISION, "target": "native", "threads": 1,
                 "allclose": False,
                 "stats": {"compile_seconds": 0.2, "arena_bytes": 64, "weights_bytes": 2048,
                           "nodes": 1, "kernels": 1}})
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    table = page[page.index('id="weight-precision"'):]
    assert "int8 weights: error against float32" in table and "1 layer stored as int8" in table
    assert "probs" in table and "3.50e-04" in table and "2.50e-03" in table
    assert "int8 weights ·" in page
    assert "mismatch" not in page and "int8 error" in page  # not allclose, as int8 weights chose
    results = api.get(f"/api/v1/jobs/{job_id}").json()["results"]
    assert results["weight_precision"] == PRECISION


def test_job_page_and_api_list_the_block_sparse_layers(browser, api, uploaded, no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"],
                                            "input_shapes": {"x": [1, 256]}}).json()["id"]
    layer = {"onnx_node": "fc1", "weight": "fc1_w", "shape": [256, 384], "block": "1x8",
             "density": 0.2, "estimated_speedup": 3.1}
    CompileJob.objects.filter(pk=job_id).update(
        state="succeeded", stage="upload", progress=1.0,
        results={**RESULTS, "sparse_layers": [layer], "target": "native", "threads": 1,
                 "stats": {"compile_seconds": 0.2, "arena_bytes": 64, "weights_bytes": 2048,
                           "nodes": 1, "kernels": 1}})
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    table = page[page.index('id="sparse-layers"'):]
    assert "fc1_w" in table and "256x384" in table and "1x8" in table and "20%" in table
    assert api.get(f"/api/v1/jobs/{job_id}").json()["results"]["sparse_layers"] == [layer]


def test_failed_job_shows_its_reason(browser, api, uploaded, no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"],
                                            "input_shapes": {"x": [1, 256]}}).json()["id"]
    CompileJob.objects.filter(pk=job_id).update(state="failed", stage="build",
                                                error="the build ran out of cheese")
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert "The job failed" in page and "ran out of cheese" in page
    assert "ran out of cheese" in browser.get("/jobs/?state=failed").content.decode()


def test_other_users_pages_are_404(browser, make_user, s3):
    from tests.service.conftest import ApiClient
    other = ApiClient(ApiToken.issue(make_user("bob"), "t")[1])
    model = other.upload(onnx_models.elementwise()).json()
    assert browser.get(f"/models/{model['id']}/").status_code == 404
    assert browser.get(f"/models/{model['id']}/compare/").status_code == 404


def test_tokens_are_shown_once_and_revocable(browser):
    resp = browser.post("/tokens/", {"name": "github"})
    match = re.search(r'id="new-token">(tf_[^<]+)<', resp.content.decode())
    assert match, "the new token is shown"
    raw = match.group(1)
    assert raw not in browser.get("/tokens/").content.decode()
    token = ApiToken.objects.get()
    browser.post(f"/tokens/{token.id}/revoke/")
    token.refresh_from_db()
    assert not token.is_active and ApiToken.authenticate(raw) is None


def test_session_api_calls_need_csrf(user, s3):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/api/v1/models").status_code == 200
    from django.core.files.uploadedfile import SimpleUploadedFile
    resp = client.post("/api/v1/models", {"file": SimpleUploadedFile("m.onnx", b"x")})
    assert resp.status_code == 403 and "CSRF" in resp.json()["error"]


def test_api_docs_page_lists_every_endpoint(browser):
    page = browser.get("/docs/api").content.decode()
    for path in ("/api/v1/models", "/api/v1/jobs/{id}/cancel", "/api/v1/targets"):
        assert path in page


def test_console_404_is_a_page_not_a_trace(browser):
    resp = browser.get("/jobs/00000000-0000-0000-0000-000000000000/")
    assert resp.status_code == 404 and "Not found" in resp.content.decode()


def test_admin_for_operators(make_user):
    from django.contrib.auth import get_user_model
    get_user_model().objects.create_superuser("root", password="correct-horse-battery")
    client = Client()
    client.post("/login/", {"username": "root", "password": "correct-horse-battery"})
    for path in ("/admin/", "/admin/jobs/compilejob/", "/admin/accounts/apitoken/"):
        assert client.get(path).status_code == 200, path


def test_job_page_shows_tuning_progress_and_curve(browser, api, uploaded, no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"], "input_shapes": {"x": [1, 256]},
                                            "tuning": {"trials": 64}}).json()["id"]
    curve = [{"trials": t, "estimate_ms": ms, "default_ms": 2.0}
             for t, ms in ((8, 2.0), (16, 1.7), (24, 1.5))]
    CompileJob.objects.filter(pk=job_id).update(state="running", stage="tune", tuning_progress={
        "kernels_done": 1, "kernels_total": 3, "trials": 24, "trials_budget": 64, "failures": 2,
        "seconds": 9.5, "seconds_budget": None, "estimate_ms": 1.5, "default_ms": 2.0,
        "curve": curve, "layouts": {"regions": 2, "done": 2, "changed": 1}})
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert 'id="tuning-progress"' in page and "1 / 3" in page and "of 64" in page
    assert 'id="layout-search"' in page and "2 / 2" in page and "1 changed" in page
    assert "2 failed" in page and 'id="tuning-chart"' in page and "<polyline" in page


def test_job_page_shows_the_model_check(browser, api, uploaded, no_enqueue):
    job_id = api.post_json("/api/v1/jobs", {"model": uploaded["id"], "input_shapes": {"x": [1, 256]},
                                            "tuning": {"trials": 64}}).json()["id"]
    progress = {"kernels_done": 3, "kernels_total": 3, "trials": 66, "trials_budget": 64,
                "failures": 0, "seconds": 30.0, "seconds_budget": None, "estimate_ms": 1.5,
                "default_ms": 2.0, "curve": [],
                "model_check": {"checked": None, "kernels": 2}}
    CompileJob.objects.filter(pk=job_id).update(state="running", stage="tune",
                                                tuning_progress=progress)
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert 'id="model-check"' in page and "checking…" in page
    progress["model_check"] = {"checked": True, "kernels": 2, "kept": 1, "default_ms": 2.1,
                               "tuned_ms": 1.9, "seconds": 12.0, "rounds": 18}
    CompileJob.objects.filter(pk=job_id).update(tuning_progress=progress)
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert "1 / 2 kept" in page and "tuned 1.9" in page and "18 rounds" in page
    assert "round by round" not in page
    progress["model_check"].update(kept=0, why="not clearly faster: 0.990 of the reference's")
    CompileJob.objects.filter(pk=job_id).update(tuning_progress=progress)
    page = browser.get(f"/jobs/{job_id}/").content.decode()
    assert "0 / 2 kept" in page and "not faster round by round" in page
