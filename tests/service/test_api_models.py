"""POST/GET /api/v1/models: upload checks, pagination, 400/404/413, isolation."""
import hashlib

import pytest
from django.test import override_settings

from tests.service import onnx_models


def test_upload_returns_what_the_model_contains(api, s3):
    data = onnx_models.elementwise()
    resp = api.upload(data, "net.onnx")
    assert resp.status_code == 201
    body = resp.json()
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["size"] == len(data) and body["opset"] == 17 and body["name"] == "net"
    assert body["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["N", 256]}]
    assert body["ops"] == {"Add": 1, "Mul": 1, "Relu": 1, "Tanh": 1}
    assert body["unsupported_ops"] == []


def test_upload_lists_unsupported_ops(api, s3):
    resp = api.upload(onnx_models.unsupported())
    assert resp.status_code == 201
    assert resp.json()["unsupported_ops"] == ["TfIdfVectorizer"]


@pytest.mark.parametrize("data", [b"this is not an onnx model", b"\x08\x07" + b"\xff" * 50])
def test_non_onnx_upload_is_400(api, s3, data):
    resp = api.upload(data, "notes.txt")
    assert resp.status_code == 400
    assert "not a usable ONNX model" in resp.json()["error"]


def test_empty_and_missing_file_are_400(api, s3):
    assert api.upload(b"").status_code == 400
    resp = api.client.post("/api/v1/models", {}, headers=api.headers)
    assert resp.status_code == 400 and "file" in resp.json()["error"]


def test_oversized_upload_is_413(api, s3):
    with override_settings(MAX_MODEL_BYTES=1000):
        resp = api.upload(b"\0" * 200_000)
    assert resp.status_code == 413
    assert "limit" in resp.json()["error"]


def test_list_is_paginated(api, s3):
    for _ in range(3):
        assert api.upload(onnx_models.elementwise()).status_code == 201
    page = api.get("/api/v1/models", page_size=2).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    last = api.get("/api/v1/models", page_size=2, page=2).json()
    assert len(last["results"]) == 1 and last["next"] is None
    assert api.get("/api/v1/models", page=9).status_code == 404
    assert api.get("/api/v1/models", page="x").status_code == 400


def test_detail_and_isolation(api, other_api, uploaded):
    url = f"/api/v1/models/{uploaded['id']}"
    assert api.get(url).json()["id"] == uploaded["id"]
    resp = other_api.get(url)
    assert resp.status_code == 404 and resp.json() == {"error": "model not found"}
    assert other_api.get("/api/v1/models").json()["count"] == 0
    assert api.get("/api/v1/models/not-a-uuid").status_code == 404


def test_wrong_method_is_405_json(api, s3):
    resp = api.client.delete("/api/v1/models", headers=api.headers)
    assert resp.status_code == 405 and "error" in resp.json()


def test_unknown_api_path_is_json_404(api):
    resp = api.get("/api/v1/does-not-exist")
    assert resp.status_code == 404 and resp.json()["error"]
