"""Tuning inside the sandboxed compile child, which may not exec: the measurements go through
the helper forked before the filter (sandbox/linker.py), and progress comes out as events."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from onnx import helper

from sandbox.runner import ChildSpec, SandboxError, run_child
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
    # 9, up to 3 head-to-heads of the best against the default, and the model check
    assert 9 <= tuning["trials"] <= 17 and tuning["failures"] == 0
    assert len(records.read_text().splitlines()) == tuning["trials"]
    assert [e["tuning"]["trials"] for e in events if e.get("stage") == "tune" and "tuning" in e]


def dense_args(tmp_path, trials: int) -> dict:
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])],
                       [("a", np.float32, [16, 64])], [("y", np.float32, [16, 40])],
                       [("w", rand(64, 40, seed=1))])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    return {"model_path": str(tmp_path / "m.onnx"), "input_shapes": {}, "target": "native",
            "opt_level": 3, "tuning": {"trials": trials}, "out_dir": str(tmp_path / "out")}


def measure_in_child(task_bytes: bytes, workdir) -> dict:
    """What a measuring worker does with another worker's batch (workers/measure_remote.py)."""
    workdir.mkdir()
    (workdir / "task.pickle").write_bytes(task_bytes)
    return run_child(ChildSpec("measure", {"task_path": str(workdir / "task.pickle")},
                               workdir, 120))


def test_measure_child_times_a_pickled_batch_and_answers_in_json(tmp_path):
    from compiler_core.codegen.target_machine import host_spec
    from compiler_core.tune.builder import BuildTask
    from tests.compiler_core.test_tune_search import gemm_workload
    w = gemm_workload()
    task = BuildTask(w.nodes[0], w.space[:3], host_spec(), 3, [0])
    result = measure_in_child(pickle.dumps(task), tmp_path / "m")
    assert [sorted(r) for r in result["measurements"]] == [["error", "seconds"]] * 3
    assert all(r["error"] is None and r["seconds"] > 0 for r in result["measurements"])


def test_measure_child_refuses_anything_but_a_build_task(tmp_path):
    with pytest.raises(SandboxError, match="holds a dict, not a BuildTask"):
        measure_in_child(pickle.dumps({"node": None}), tmp_path / "m")


def compile_with_a_second_slot(tmp_path, answer) -> tuple[dict, list]:
    """The compile child with two slots; `answer(n, task bytes)` plays the worker."""
    args = {**dense_args(tmp_path, 40), "measure_slots": 2, "worker": "here",
            "measure_dir": str(tmp_path / "measure")}
    asked = []

    def on_event(event):
        if "measure" in event:
            n = event["measure"]
            asked.append(n)
            reply = answer(n, (tmp_path / "measure" / f"{n}.task").read_bytes())
            (tmp_path / "measure" / f"{n}.result.json").write_text(json.dumps(reply))
    result = run_child(ChildSpec("compile", args, tmp_path, 300), on_event=on_event)
    return result["meta"]["tuning"], asked


def test_compile_child_spreads_batches_over_its_slots(tmp_path):
    """Remote batches answered by a measure child (as another worker would): every trial is
    counted once, by the worker that measured it."""
    def another_worker(n, task):
        got = measure_in_child(task, tmp_path / f"remote{n}")
        return {"worker": "there", "measurements": got["measurements"]}
    tuning, asked = compile_with_a_second_slot(tmp_path, another_worker)
    assert asked and set(tuning["measured_by"]) == {"here", "there"}
    assert sum(tuning["measured_by"].values()) == tuning["trials"] >= 16


def test_compile_child_measures_a_lost_batch_itself(tmp_path):
    tuning, asked = compile_with_a_second_slot(
        tmp_path, lambda n, task: {"error": "no worker started the batch in time"})
    assert len(asked) == 1  # the slot that failed retired
    assert tuning["measured_by"] == {"here": tuning["trials"]} and tuning["trials"] >= 16
    assert tuning["slot_failures"] == ["a batch measured here instead: RuntimeError: remote "
                                       "batch failed: no worker started the batch in time"]
