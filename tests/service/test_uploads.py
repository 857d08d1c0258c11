"""Uploads are inspected in the sandbox: model folders arrive as .zip/.tar archives (checked
member by member), bare .onnx files with external data are refused with what to do instead,
and hostile uploads are refused within the inspection's memory and time limits."""
from __future__ import annotations

import io
import tarfile
import zipfile

import numpy as np
import onnx
import pytest
from django.test import override_settings
from onnx import TensorProto, helper, numpy_helper

import compiler_core as cc
from webapp.jobs import storage
from webapp.jobs.models import UploadedModel


def external_model(location: str = "weights.bin", tensors: int = 1, n: int = 6) -> bytes:
    """Add(x, w_k) for k < tensors, every w_k's data at `location` (offset 0)."""
    inits, nodes, outs = [], [], []
    for k in range(tensors):
        t = numpy_helper.from_array(np.zeros(n, np.float32), f"w{k}")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=location)
        inits.append(t)
        nodes.append(helper.make_node("Add", ["x", f"w{k}"], [f"y{k}"]))
        outs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [n]))
    graph = helper.make_graph(nodes, "ext", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [n])], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


WEIGHTS = np.arange(6, dtype=np.float32).tobytes()


def zipped(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def tarred(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return buf.getvalue()


def stored_model(model_id: str, tmp_path) -> onnx.ModelProto:
    path = tmp_path / "stored.onnx"
    storage.download_file(UploadedModel.objects.get(pk=model_id).storage_key, path)
    return onnx.load(path)


def test_bare_onnx_with_external_data_says_upload_an_archive(api, s3):
    resp = api.upload(external_model(), "big.onnx")
    assert resp.status_code == 400
    assert ".zip or .tar of the model folder" in resp.json()["error"]


@pytest.mark.parametrize("pack", [zipped, tarred])
def test_model_folder_archive_is_stored_self_contained(api, s3, tmp_path, pack):
    data = pack({"folder/model.onnx": external_model(), "folder/weights.bin": WEIGHTS})
    resp = api.upload(data, "model.zip")
    assert resp.status_code == 201, resp.content
    assert resp.json()["name"] == "model" and resp.json()["inputs"][0]["name"] == "x"
    proto = stored_model(resp.json()["id"], tmp_path)
    out = cc.compile(proto).run({"x": np.ones(6, np.float32)})["y0"]
    np.testing.assert_array_equal(out, np.arange(6) + 1)


@pytest.mark.parametrize("files, links, words", [
    ({"../model.onnx": b"x"}, None, "leaves the folder"),
    ({"/abs/model.onnx": b"x"}, None, "absolute path"),
    ({"model.onnx": b"x"}, {"weights.bin": "/etc/passwd"}, "link or special file"),
    ({"a.onnx": b"x", "b.onnx": b"y"}, None, "exactly one .onnx model"),
    ({"readme.txt": b"x"}, None, "exactly one .onnx model, found none"),
])
def test_bad_archives_are_refused(api, s3, files, links, words):
    resp = api.upload(tarred(files, links), "model.tar.gz")
    assert resp.status_code == 400
    assert words in resp.json()["error"], resp.json()


def test_archive_bomb_is_stopped_at_the_upload_limit(api, s3):
    bomb = zipped({"model.onnx": external_model(), "weights.bin": bytes(64 * 2**20)})
    assert len(bomb) < 2**20
    with override_settings(MAX_MODEL_BYTES=8 * 2**20):
        resp = api.upload(bomb, "bomb.zip")
    assert resp.status_code == 400
    assert "more than 8 MiB" in resp.json()["error"]


def test_external_data_read_over_and_over_is_refused(api, s3):
    """The ~1 MiB upload whose every tensor points at the same bytes (issue 9)."""
    n = 2**16
    data = zipped({"model.onnx": external_model(tensors=256, n=n),
                   "weights.bin": bytes(4 * n)})
    with override_settings(MAX_MODEL_BYTES=16 * 2**20):
        resp = api.upload(data, "repeat.zip")
    assert resp.status_code == 400
    assert "over the limit" in resp.json()["error"]


def test_inspection_runs_under_a_memory_limit(api, s3):
    """200 MiB of weights, read and copied, in a child allowed 450 MiB (its own start needs
    about 330)."""
    data = zipped({"model.onnx": external_model(tensors=50, n=2**20),
                   "weights.bin": bytes(4 * 2**20)})
    with override_settings(UPLOAD_INSPECT_MEMORY_MB=450):
        resp = api.upload(data, "hungry.zip")
    assert resp.status_code == 413
    assert "within the limits (450 MiB" in resp.json()["error"], resp.json()
