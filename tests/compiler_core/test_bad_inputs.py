"""Every kind of bad model input gives a CompileError that says what to fix."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import make_model

F = np.float32


def tiny(opset=17, **kw):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, (2, 3))],
                      [("y", F, (2, 3))], opset=opset, **kw)


def with_external_weight(tmp_path, location):
    w = onnx.numpy_helper.from_array(np.ones((2, 3), F), "w")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])], [w])
    path = tmp_path / "model.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    return path


def test_not_onnx(tmp_path):
    p = tmp_path / "x.onnx"
    p.write_bytes(b"GIF89a this is a picture")
    with pytest.raises(cc.CompileError, match="not a valid ONNX model"):
        cc.compile(p)


def test_truncated(tmp_path):
    data = tiny().SerializeToString()
    with pytest.raises(cc.CompileError, match="truncated|not an ONNX model|not a valid"):
        cc.compile(data[: len(data) // 2])


def test_empty_and_missing(tmp_path):
    with pytest.raises(cc.CompileError, match="empty"):
        cc.compile(b"")
    with pytest.raises(cc.CompileError, match="does not exist"):
        cc.compile(tmp_path / "nope.onnx")


def test_size_limit(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_MAX_MODEL_BYTES", "10")
    with pytest.raises(cc.CompileError, match="over the limit.*TENSORFORGE_MAX_MODEL_BYTES"):
        cc.compile(tiny().SerializeToString())


@pytest.mark.parametrize("location", ["/etc/passwd", "../secret.bin", "sub/../../x.bin"])
def test_external_data_escaping_folder(tmp_path, location):
    with pytest.raises(cc.CompileError, match="relative and stay inside"):
        cc.compile(with_external_weight(tmp_path, location))


def test_external_data_symlink(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside.bin"
    outside.write_bytes(np.ones(6, F).tobytes())
    os.symlink(outside, tmp_path / "w.bin")
    with pytest.raises(cc.CompileError, match="symlink or leaves"):
        cc.compile(with_external_weight(tmp_path, "w.bin"))


def test_external_data_missing(tmp_path):
    with pytest.raises(cc.CompileError, match="missing"):
        cc.compile(with_external_weight(tmp_path, "w.bin"))


def test_external_data_inside_folder_works(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.full(6, 2, F).tobytes())
    out = cc.compile(with_external_weight(tmp_path, "w.bin")).run({"x": np.ones((2, 3), F)})
    np.testing.assert_array_equal(out["y"], np.full((2, 3), 3, F))


def test_external_data_from_bytes_is_refused(tmp_path):
    path = with_external_weight(tmp_path, "w.bin")
    with pytest.raises(cc.CompileError, match="pass the path"):
        cc.compile(path.read_bytes())


def test_custom_domain_named():
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.acme")
    m = make_model([node], [("x", F, (2,))], [("y", F, (2,))])
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(cc.CompileError, match="custom domains.*com.acme::FancyOp"):
        cc.compile(m)


def test_unsupported_ops_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("StringNormalizer", ["a"], ["b"], name="sn1"),
             helper.make_node("TfIdfVectorizer", ["b"], ["c"], name="tfidf"),
             helper.make_node("StringNormalizer", ["c"], ["y"], name="sn2")]
    m = make_model(nodes, [("x", F, (2,))], [("y", F, (2,))])
    with pytest.raises(cc.CompileError) as err:
        cc.compile(m)
    msg = str(err.value)
    assert "3 node(s)" in msg and "StringNormalizer x2 (nodes: sn1, sn2)" in msg
    assert "TfIdfVectorizer x1 (nodes: tfidf)" in msg


def test_missing_symbolic_shape_names_input_and_dims():
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ("batch", 3, "len"))],
                   [("y", F, None)])
    with pytest.raises(cc.CompileError, match=r"input 'x' has symbolic dimensions \['batch', 'len'\]"):
        cc.compile(m)
    out = cc.compile(m, input_shapes={"x": (2, 3, 4)}).run({"x": -np.ones((2, 3, 4), F)})
    assert out["y"].shape == (2, 3, 4) and not out["y"].any()


def test_input_shapes_errors():
    m = tiny()
    with pytest.raises(cc.CompileError, match="not model inputs"):
        cc.compile(m, input_shapes={"z": (1,)})
    with pytest.raises(cc.CompileError, match="fixes a dimension to 2"):
        cc.compile(m, input_shapes={"x": (5, 3)})


def test_runtime_checks_feeds():
    m = cc.compile(tiny())
    with pytest.raises(cc.RuntimeInputError, match="shape"):
        m.run({"x": np.ones((3, 3), F)})
    with pytest.raises(cc.RuntimeInputError, match="dtype"):
        m.run({"x": np.ones((2, 3), np.float64)})
    with pytest.raises(cc.RuntimeInputError, match="missing"):
        m.run({})


def test_bad_target_and_opt_level():
    with pytest.raises(cc.CompileError, match="valid targets: native"):
        cc.compile(tiny(), target="tpu")
    with pytest.raises(cc.CompileError, match="opt_level"):
        cc.compile(tiny(), opt_level=7)
