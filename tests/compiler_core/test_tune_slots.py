"""The tuner with several measuring slots (the service's workers): N slots keep N batches in
flight, so a seconds budget measures about N times the trials, with the same results as one
slot; a slot that fails has its batch measured locally and retires; local batches never
overlap. The measurers here are fakes that sleep like a child timing a batch and report a
known time per schedule (tests/compiler_core/test_tune_search.py's synthetic model)."""
import threading
import time

import numpy as np
import pytest

import compiler_core.driver  # noqa: F401  its imports (onnx: 0.6 s) load here, not in a budget
from compiler_core.codegen.target_machine import host_spec
from compiler_core.ir import Graph
from compiler_core.tune import RecordStore, Tuner, TuningRequest, tuner as tuner_module
from compiler_core.tune.search import RandomSearch

from .test_tune_search import gemm_workload, synthetic_measurement

BATCH_SECONDS = 0.08


def gemm_graph() -> Graph:
    node = gemm_workload().nodes[0]
    return Graph([node.inputs[0]], list(node.outputs), [node])


class FakeMeasurer:
    """Sleeps as if timing the batch; counts the batches that overlap in it."""

    def __init__(self, name: str | None = None, sleep: float = BATCH_SECONDS):
        self.name, self.sleep = name, sleep
        self.busy, self.overlaps, self.batches = 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, task) -> list:
        with self.lock:
            self.busy += 1
            self.overlaps += self.busy > 1
            self.batches += 1
        time.sleep(self.sleep)
        with self.lock:
            self.busy -= 1
        return [synthetic_measurement(task, s, self.name) for s in task.schedules]


def tune(request: TuningRequest, tmp_path, local, slots=(), strategy=None) -> Tuner:
    tuner = Tuner(request, host_spec(), 3, RecordStore(tmp_path / f"r{len(slots)}.jsonl"),
                  run=local, slots=list(slots), strategy=strategy)
    tuner(gemm_graph())
    return tuner


@pytest.fixture
def no_early_stop(monkeypatch):
    monkeypatch.setattr(tuner_module, "PATIENCE", 10**6)


def test_two_slots_measure_about_twice_the_trials(tmp_path, no_early_stop):
    request = TuningRequest(seconds=1.5)
    one = tune(request, tmp_path, FakeMeasurer(), strategy=RandomSearch())
    two = tune(request, tmp_path, FakeMeasurer(), [FakeMeasurer("w2")],
               strategy=RandomSearch())
    ratio = two.summary()["trials"] / one.summary()["trials"]
    assert 1.6 < ratio < 2.4, (one.summary()["trials"], two.summary()["trials"])
    by = two.summary()["measured_by"]
    assert set(by) == {"local", "w2"} and abs(by["w2"] - by["local"]) <= 0.4 * by["local"]


def test_slots_give_the_same_results_as_one(tmp_path, no_early_stop):
    """With a budget over the whole space both measure every candidate and agree."""
    request = TuningRequest(trials=len(gemm_workload().space) + 100)  # the host's space
    one = tune(request, tmp_path, FakeMeasurer(sleep=0.005))
    two = tune(request, tmp_path, FakeMeasurer(sleep=0.005),
               [FakeMeasurer("w2", 0.005), FakeMeasurer("w3", 0.005)])
    (k1,), (k2,) = one.workloads, two.workloads
    assert len(k1.tried) == len(k2.tried) == len(k1.space)
    assert {s: m.seconds for s, m in k1.tried.items()} == \
        {s: m.seconds for s, m in k2.tried.items()}
    assert k1.nodes[0].schedule == k2.nodes[0].schedule != k1.space[0]
    s1, s2 = one.summary(), two.summary()
    assert s1["trials"] == s2["trials"] and sum(s2["measured_by"].values()) == s2["trials"]
    assert not k2.pending and not k2.in_flight


def test_a_trials_budget_is_kept_with_batches_in_flight(tmp_path, no_early_stop):
    tuner = tune(TuningRequest(trials=40), tmp_path, FakeMeasurer(), [FakeMeasurer("w2")])
    confirmations = 2 * 3  # at most CONFIRM_ROUNDS head-to-heads of 2 trials
    assert 40 <= tuner.summary()["trials"] <= 40 + confirmations


def test_a_seconds_budget_is_a_limit(tmp_path, no_early_stop):
    """No batch or head-to-head starts that would end past its share of the budget: batches
    of 0.2 s in 1.3 s end at 0.2, 0.4, 0.6, 0.8 (one more would pass the search's 0.975 s),
    then one head-to-head ends at 1.0 (a second would pass 1.105 s), and the model check
    at 1.2. Random search: the cost model's training between batches (0.1-0.15 s on a znver3
    core) would move those ends."""
    tuner = tune(TuningRequest(seconds=1.3), tmp_path, FakeMeasurer(sleep=0.2),
                 strategy=RandomSearch())
    summary = tuner.summary()
    assert summary["seconds"] <= 1.3
    # the first batch's reference counts, no other; the model check's 2 count
    assert summary["trials"] == 4 * 8 + 2 + 2
    assert summary["model_check"]["checked"] and summary["model_check"]["kept"] == 1
    (kernel,) = summary["kernels"]
    assert kernel["confirmed"] and not kernel["default"]


def test_a_failing_slot_is_measured_locally_and_retires(tmp_path, no_early_stop):
    class Lost:
        calls = 0

        def __call__(self, task):
            Lost.calls += 1
            raise TimeoutError("no reply from w2")
    local = FakeMeasurer(sleep=0.01)
    tuner = tune(TuningRequest(trials=48), tmp_path, local, [Lost()])
    assert Lost.calls == 1 and local.overlaps == 0  # the fallback waited for the local slot
    assert tuner.summary()["measured_by"] == {"local": tuner.summary()["trials"]}
    assert tuner.summary()["trials"] >= 48
    assert tuner.summary()["slot_failures"] == [
        "a batch measured here instead: TimeoutError: no reply from w2"]


def test_a_failing_local_measurer_fails_the_tuning(tmp_path):
    def broken(task):
        raise RuntimeError("the helper died measuring")
    with pytest.raises(RuntimeError, match="helper died"):
        tune(TuningRequest(trials=16), tmp_path, broken, [FakeMeasurer("w2")])


def test_one_slot_measures_as_before(tmp_path):
    """The batches a single slot sends: 8 candidates each, the first with the default."""
    seen = []

    def run(task):
        seen.append(len(task.schedules))
        return [synthetic_measurement(task, s) for s in task.schedules]
    tuner = tune(TuningRequest(trials=20), tmp_path, run)
    assert seen[:3] == [8, 9, 5] and np.sum(seen[:3]) - 2 == 20  # 2 references not counted
    assert tuner.summary()["measured_by"] == {"local": tuner.summary()["trials"]}


def test_a_slot_that_never_answers_is_abandoned(tmp_path, monkeypatch):
    monkeypatch.setattr(tuner_module, "GRACE_SECONDS", 0.5)
    never = threading.Event()

    def stuck(task):
        never.wait(30)
        return []
    started = time.monotonic()
    tuner = tune(TuningRequest(seconds=1.0), tmp_path, FakeMeasurer(sleep=0.02), [stuck])
    never.set()
    assert time.monotonic() - started < 5
    assert tuner.summary()["measured_by"] == {"local": tuner.summary()["trials"]}
    assert not any(w.pending or w.in_flight for w in tuner.workloads)
    assert tuner.summary()["slot_failures"] == ["1 batches still out were dropped"]


def test_the_last_progress_counts_every_trial(tmp_path):
    """The job page's live progress ends at the summary's trials, also when the head-to-head
    hands the choice back to the default and no model check follows it."""
    from compiler_core.tune.runner import Measurement

    events, lucky = [], []

    def run(task):  # one candidate beats the default in the search, then loses to it
        default = task.schedules[0]
        if not lucky and len(task.schedules) > 2:
            lucky.append(task.schedules[1])
        return [Measurement(s, 1e-3 if s == default else 2e-3 if len(task.schedules) == 2
                            else 0.5e-3 if s == lucky[0] else 1.5e-3) for s in task.schedules]
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(tmp_path / "r.jsonl"),
                  run=run, on_progress=events.append)
    tuner(gemm_graph())
    summary = tuner.summary()
    assert summary["trials"] == 22 and summary["model_check"] is None  # 20 + a head-to-head
    assert events[-1]["trials"] == summary["trials"] == summary["curve"][-1]["trials"]


def test_a_workload_whose_batches_run_long_starts_none_past_the_budget(tmp_path,
                                                                     no_early_stop):
    """Two kernels, one quick to time and one whose batches take 30x as long but whose
    kernel is a fifth of the time (picked rarely): the mean batch stays short, and a slow
    batch or head-to-head started on it near the end overran. They now start only if one
    as long as that kernel's longest batch (half of it for a head-to-head) still fits."""
    from dataclasses import replace

    from compiler_core.ir import Node, Value
    from compiler_core.kernels.packed_gemm import default_gemm_schedule

    quick = gemm_workload().nodes[0]
    a = Value("a2", (64, 256), np.float32)
    w = Value("w2", (256, 128), np.float32, const=np.zeros((256, 128), np.float32))
    slow = Node("PackedGemm", [a, w, None], [Value("y2", (64, 128), np.float32)], {})
    slow.schedule = default_gemm_schedule(slow, host_spec())
    graph = Graph([quick.inputs[0], a], [*quick.outputs, *slow.outputs], [quick, slow])

    def measure(task):
        timing_slow = task.graph is None and task.node is slow  # a child's start + each
        time.sleep(0.1 + 0.1 * len(task.schedules) if timing_slow else 0.02)
        got = [synthetic_measurement(task, s) for s in task.schedules]
        return [replace(m, seconds=m.seconds / 5) for m in got] if timing_slow else got
    for budget in (1.5, 2.0, 2.5, 3.0):
        tuner = Tuner(TuningRequest(seconds=budget), host_spec(), 3,
                      RecordStore(tmp_path / f"{budget}.jsonl"), run=measure,
                      strategy=RandomSearch())
        tuner(graph)
        assert tuner.summary()["seconds"] <= budget, budget
        longest = {w.nodes[0].outputs[0].name: w.longest_batch for w in tuner.workloads}
        assert longest["y2"] > 0.9 and longest["y"] < 0.5, longest
