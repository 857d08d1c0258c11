"""Tuning inside the sandboxed compile child, which may not exec: the measurements go through
the helper forked before the filter (sandbox/linker.py), and progress comes out as events."""
from __future__ import annotations

import numpy as np
from onnx import helper

from sandbox.runner import ChildSpec, run_child
from tests.compiler_core.helpers import make_model, rand


def test_compile_child_tunes_through_its_helper(tmp_path):
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [16, 64])], [("y", np.float32, [16, 40])],
                       [("w", rand(64, 40, seed=1))])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    records = tmp_path / "records.jsonl"
    args = {"model_path": str(tmp_path / "m.onnx"), "input_shapes": {}, "target": "native",
            "opt_level": 3, "tuning": {"trials": 9, "records": str(records)},
            "out_dir": str(tmp_path / "out")}
    events = []
    result = run_child(ChildSpec("compile", args, tmp_path, 300), on_event=events.append)
    tuning = result["meta"]["tuning"]
    assert 9 <= tuning["trials"] <= 15 and tuning["failures"] == 0  # + head-to-heads
    assert len(records.read_text().splitlines()) == tuning["trials"]
    assert [e["tuning"]["trials"] for e in events if e.get("stage") == "tune" and "tuning" in e]
