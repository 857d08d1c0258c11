"""The autotuner's runner and tuner against candidates that crash, hang and compute wrong
results (tests/compiler_core/tune_probe_kernels.py): each is recorded as a failure, none is
chosen, and tuning goes on to the fastest correct candidate."""
import functools
import time
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper

from compiler_core.codegen.target_machine import host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.ir import Graph, Node, Value
from compiler_core.kernels.conv import winograd_schedule
from compiler_core.passes.assign_schedules import assign_schedules_for
from compiler_core.passes.pipeline import split_at_schedules
from compiler_core.tune import RecordStore, Tuner, TuningRequest
from compiler_core.tune.builder import BuildTask, ModelVariant
from compiler_core.tune.runner import run_batch
from compiler_core.tune.tuner import collect_workloads

from .helpers import make_model, rand
from .tune_probe_kernels import OP, ProbeSchedule

FAST_LIMITS = {"candidate_seconds": 3.0, "build_seconds": 60.0}


def probe_graph() -> Graph:
    x = Value("x", (1, 4096), np.float32)
    y = Value("y", (1, 4096), np.float32)
    graph = Graph([x], [y], [Node(OP, [x], [y], {}, "probe")])
    return assign_schedules_for(host_spec())(graph)


def test_runner_records_each_kind_of_failure():
    node = probe_graph().nodes[0]
    modes = ["slow", "crash", "fast", "hang", "wrong"]
    task = BuildTask(node, [ProbeSchedule(m) for m in modes], host_spec(), 3, [0])
    got = dict(zip(modes, run_batch(task, **FAST_LIMITS)))
    assert got["slow"].ok and got["fast"].ok
    assert got["fast"].seconds < got["slow"].seconds
    assert "crashed (killed by signal 11)" in got["crash"].error
    assert "hang" in got["hang"].error
    assert "wrong result" in got["wrong"].error


def test_tuner_survives_bad_candidates_and_picks_the_fast_one(tmp_path):
    graph = probe_graph()
    store = RecordStore(tmp_path / "records.jsonl")
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, store,
                  run=functools.partial(run_batch, **FAST_LIMITS))
    tuner(graph)
    summary = tuner.summary()
    assert graph.nodes[0].schedule == ProbeSchedule("fast")
    # 2: the head-to-head, 2: the model check
    assert summary["trials"] == 5 + 2 + 2 and summary["failures"] == 3
    (kernel,) = summary["kernels"]
    assert kernel["chosen_ms"] < kernel["default_ms"]
    failed = {r["schedule"]["mode"] for r in store.all() if r["error"]}
    assert failed == {"crash", "hang", "wrong"}


def test_records_make_a_second_tuning_measure_nothing(tmp_path):
    path = tmp_path / "records.jsonl"
    first = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(path),
                  run=functools.partial(run_batch, **FAST_LIMITS))
    first(probe_graph())

    def no_measuring(task):
        raise AssertionError("measured a workload the records already hold")
    again = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(path), run=no_measuring)
    graph = again(probe_graph())
    assert graph.nodes[0].schedule == ProbeSchedule("fast")
    assert again.summary()["trials"] == 0 and again.summary()["reused"] == 1


def padded_conv_graph(channels: int = 16, size: int = 12) -> Graph:
    """A 3x3 conv with padding, after the passes up to schedule assignment: its input is
    a ConvPad's output, which Winograd does without (it reads the unpadded input)."""
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        [("x", np.float32, [1, channels, size, size])], [("y", np.float32, None)],
        [("w", rand(channels, channels, 3, 3, seed=1)), ("b", rand(channels, seed=2))])
    graph = import_model(model)
    for p in split_at_schedules(3, host_spec())[0]:
        graph = p(graph)
    return graph


def test_winograd_and_direct_candidates_of_a_padded_conv_are_measured_alike():
    """Each candidate is built from the conv's ConvPad on: the direct conv reads the padded
    planes, Winograd reads the unpadded input; both see the same input, and agree."""
    workload = next(w for w in collect_workloads(padded_conv_graph(), host_spec())
                    if w.op == "Conv")
    assert [n.op for n in workload.prologue] == ["ConvPad"]
    lanes = host_spec().vector_bits // 32
    node = workload.nodes[0]
    direct = next(s for s in workload.space if not s.winograd)
    schedules = [workload.space[0], direct, winograd_schedule(node, 2, lanes),
                 winograd_schedule(node, 4, lanes)]
    task = BuildTask(node, schedules, host_spec(), 3, workload.checked,
                     prologue=workload.prologue)
    measured = run_batch(task, **FAST_LIMITS)
    assert [m.error for m in measured] == [None] * 4


def test_a_blocked_kernel_is_timed_without_the_layout_conversions_it_needs_alone(monkeypatch):
    """Alone, a conv in the blocked layout has its input converted into the layout and its
    output back; in the model a region converts at its edges only. The conversions run in
    the check, and only the conv's own kernels are timed, as the model check times them
    in the model."""
    from compiler_core.kernels import conv
    from compiler_core.passes import blocked_layout
    from compiler_core.tune.builder import finished_nodes
    from compiler_core.tune.measure_child import timed_part
    monkeypatch.setattr(blocked_layout, "blocked_candidate",
                        lambda node, spec, lanes: conv.blocked_eligible(node, lanes))
    monkeypatch.setattr(blocked_layout, "BLOCKED_MIN_FLOPS_PER_ELEMENT", 0)
    workload = next(w for w in collect_workloads(padded_conv_graph(), host_spec())
                    if w.op == "Conv")
    node = workload.nodes[0]
    assert node.attrs["layout"] == "blocked"
    task = BuildTask(node, workload.space[:3], host_spec(), 3, workload.checked,
                     prologue=workload.prologue)
    nodes = finished_nodes(task, workload.space[0])
    assert "Transpose" in [n.op for n in nodes]
    timed, kernels = timed_part(task, nodes, list(range(len(nodes))))
    assert [n.op for n in timed] == ["ConvBlocked"]
    assert kernels == [nodes.index(timed[0])]
    assert len(task.schedules) > 1
    assert [m.error for m in run_batch(task, **FAST_LIMITS)] == [None] * len(task.schedules)


def test_candidates_are_timed_going_round_copies_of_their_weights():
    """As in a model, where a layer's weights were last read a whole run ago."""
    from compiler_core.tune.measure_child import (COLD_BYTES, MAX_COPIES, arrays_for,
                                                  cold_copies, rotating)
    node = next(w for w in collect_workloads(padded_conv_graph(), host_spec())
                if w.op == "Conv").nodes[0]
    arrays = arrays_for([node])
    copies = cold_copies([node], arrays)
    weights = [v.name for v in node.inputs if v is not None and v.is_const]
    size = sum(arrays[name].nbytes for name in weights)
    assert len(copies) + 1 == min(MAX_COPIES, COLD_BYTES // size) > 1
    for copy in copies:
        for name, a in copy.items():
            assert np.array_equal(a, arrays[name])
            assert (a is arrays[name]) == (name not in weights), name
    seen = []
    call = rotating([functools.partial(seen.append, k) for k in range(3)])
    for _ in range(7):
        call()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


def test_candidates_are_timed_in_rounds_so_a_slow_spell_hits_them_alike(monkeypatch):
    """The machine is slow for the first calls of the timing: timed back to back, the
    first candidates' runs all fell in that spell; in rounds, every candidate has runs
    after it. Each run is announced, so a hang is blamed on the candidate running."""
    from compiler_core.tune import measure_child
    events = []
    monkeypatch.setattr(measure_child, "say", lambda **event: events.append(event))
    monkeypatch.setattr(measure_child, "REPEAT_SECONDS", 0.004)  # one call per run
    calls = []

    def call():
        calls.append(None)
        time.sleep(0.01 if len(calls) <= 12 else 0.001)
    times = measure_child.seconds_in_rounds({0: call, 1: call, 2: call})
    assert max(times.values()) < 3 * min(times.values()), times
    assert [e["start"] for e in events] == [0, 1, 2] * (1 + measure_child.REPEATS)


def test_a_model_check_builds_and_profiles_whole_models():
    """Candidates that are whole models: built as cc.compile builds them, checked against
    the first, and timed per kernel; each kernel names the ONNX nodes it computes (the
    padding the conv's own, so that it counts with the conv)."""
    graph = padded_conv_graph()
    conv = next(w for w in collect_workloads(graph, host_spec()) if w.op == "Conv")
    lanes = host_spec().vector_bits // 32
    default = ModelVariant(tuple(n.schedule for n in graph.nodes))
    winograd = ModelVariant(tuple(winograd_schedule(n, 2, lanes) if n is conv.nodes[0]
                                  else n.schedule for n in graph.nodes))
    task = BuildTask(graph.nodes[0], [default, winograd], host_spec(), 3, [], graph=graph)
    measured = run_batch(task)
    assert [m.error for m in measured] == [None, None]
    conv_name = conv.nodes[0].onnx_nodes[0]
    for m in measured:
        assert m.seconds > 0 and all(names == [conv_name] for names, _ in m.parts)
        assert 0 < sum(t for _, t in m.parts) <= 1.5 * m.seconds


def slower_in_the_model(task):
    """run_batch, except that whole models report the tuned one's kernels at twice the
    default's time: a choice that wins alone and loses in the model."""
    measured = run_batch(task, **FAST_LIMITS)
    if task.graph is None:
        return measured
    default, chosen = measured
    return [default, replace(chosen, parts=[[names, 2 * t] for names, t in default.parts])]


def tuned_keeping_the_default(path, run) -> Tuner:
    """The probe graph tuned with `run` into the records at `path`: it keeps its default."""
    graph = probe_graph()
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(path), run=run)
    tuner(graph)
    assert graph.nodes[0].schedule == ProbeSchedule("slow")
    return tuner


def assert_the_records_keep_the_default(path) -> None:
    """A second tuning from the records measures nothing and keeps the default too."""
    def no_measuring(task):
        raise AssertionError("measured a workload the records already hold")
    again = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(path), run=no_measuring)
    assert again(probe_graph()).nodes[0].schedule == ProbeSchedule("slow")


def test_a_choice_slower_in_the_model_is_not_kept_now_or_from_the_records(tmp_path):
    path = tmp_path / "records.jsonl"
    summary = tuned_keeping_the_default(path, slower_in_the_model).summary()
    assert summary["model_check"]["checked"] and summary["model_check"]["kept"] == 0
    (kernel,) = summary["kernels"]
    assert kernel["default"] and kernel["in_model_ms"]["chosen"] == kernel["in_model_ms"]["default"]
    in_model = [r for r in RecordStore(path).all() if r["workload"].endswith("@model")]
    assert sorted(r["schedule"]["mode"] for r in in_model) == ["fast", "slow"]
    assert_the_records_keep_the_default(path)


def tuned_model_lucky(task):
    """run_batch, except that the tuned model's rounds win only 5 of 9 (by 10%, losing the
    others by 5%) though every kernel of it reports half the default's time."""
    measured = run_batch(task, **FAST_LIMITS)
    if task.graph is None:
        return measured
    default, chosen = measured
    default = replace(default, rounds=[default.seconds] * len(default.rounds))
    rounds = [default.seconds * (0.9 if k % 2 == 0 else 1.05) for k in range(len(default.rounds))]
    return [default, replace(chosen, parts=[[names, t / 2] for names, t in default.parts],
                             rounds=rounds, seconds=float(np.median(rounds)))]


def test_a_tuned_model_that_does_not_win_round_by_round_keeps_the_defaults(tmp_path):
    """5 wins of 9 may be chance: timed again, the 18 rounds decide (10 wins: no)."""
    path = tmp_path / "records.jsonl"
    check = tuned_keeping_the_default(path, tuned_model_lucky).summary()["model_check"]
    assert check["checked"] and check["kept"] == 0
    assert "over 18 rounds, faster in 10 (needs 1.000 or less and 14 rounds)" in check["why"]
    assert check["tuned_ms"] < check["default_ms"]  # by its median: the rounds overrule it
    rejected = [r for r in RecordStore(path).all() if r["workload"].endswith("@model")
                and r["error"]]
    assert [r["schedule"]["mode"] for r in rejected] == ["fast"]
    assert_the_records_keep_the_default(path)


def drifting(factors):
    """run_batch, with every time the k-th child measures multiplied by factors[k] (by the
    last factor after that): a shared machine that gets faster between children."""
    calls = iter(factors)

    def run(task):
        f = next(calls, factors[-1])
        return [replace(m, seconds=m.seconds * f) if m.ok else m
                for m in run_batch(task, **FAST_LIMITS)]
    return run


def test_each_childs_times_are_put_in_the_units_of_the_defaults_first_time(tmp_path):
    store = RecordStore(tmp_path / "records.jsonl")
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, store, run=drifting([1.0, 0.1]))
    graph = tuner(probe_graph())
    assert graph.nodes[0].schedule == ProbeSchedule("fast")
    kernel = [r for r in store.all() if not r["workload"].endswith("@model")]
    default = [r["seconds"] for r in kernel if r["default"]]
    fast = [r["seconds"] for r in kernel if r["schedule"]["mode"] == "fast"]
    # the first batch, then the head-to-head in a child ten times as fast
    assert len(default) == len(fast) == 2
    assert default[1] == pytest.approx(default[0], rel=1e-9)
    assert fast[1] > 0.3 * fast[0]
    (summary,) = tuner.summary()["kernels"]
    assert summary["default_ms"] == pytest.approx(default[0] * 1e3, abs=1e-5)  # ms to 5 places


def test_a_choice_faster_in_the_model_is_kept():
    graph = probe_graph()
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(),
                  run=functools.partial(run_batch, **FAST_LIMITS))
    tuner(graph)
    assert graph.nodes[0].schedule == ProbeSchedule("fast")
    check = tuner.summary()["model_check"]
    assert check["checked"] and check["kept"] == 1 and check["tuned_ms"] < check["default_ms"]
    assert check["rounds"] == 9  # won outright: timed once
    (kernel,) = tuner.summary()["kernels"]
    assert kernel["in_model_ms"]["chosen"] < kernel["in_model_ms"]["default"]


def test_a_tuned_model_short_of_wins_is_timed_again_and_kept_on_all_its_rounds():
    """A noisy host: the first model check sees the tuned model 5% faster in 6 of 9 rounds,
    the second in all 9; 15 of 18 keep it."""
    checks = []

    def noisy_then_quiet(task):
        measured = run_batch(task, **FAST_LIMITS)
        if task.graph is None:
            return measured
        checks.append(len(checks))
        default, chosen = measured
        default = replace(default, rounds=[default.seconds] * 9)
        wins = [k < 6 or len(checks) > 1 for k in range(9)]
        rounds = [default.seconds * (0.95 if win else 1.02) for win in wins]
        return [default, replace(chosen, rounds=rounds, seconds=float(np.median(rounds)))]
    graph = probe_graph()
    tuner = Tuner(TuningRequest(trials=20), host_spec(), 3, RecordStore(), run=noisy_then_quiet)
    tuner(graph)
    assert checks == [0, 1] and graph.nodes[0].schedule == ProbeSchedule("fast")
    check = tuner.summary()["model_check"]
    assert check["checked"] and check["kept"] == 1 and "why" not in check
    assert check["rounds"] == 18


def test_outputs_are_compared_against_their_largest_magnitude():
    from compiler_core.tune.measure_child import mismatch
    want = np.array([300.0, 1e-3, np.nan, -np.inf], np.float32)
    rounding = np.array([300.0 + 3e-3, 2e-3, np.nan, -np.inf], np.float32)  # 1e-3 apart at 0
    assert mismatch([rounding], [want]) is None
    assert "max abs err" in mismatch([rounding + 1.0], [want])
    assert "not finite" in mismatch([np.array([300.0, 1e-3, 0.0, -np.inf], np.float32)], [want])
    assert mismatch([np.array([1, 2])], [np.array([1, 3])]) is not None
