"""The layout search (compiler_core/tune/layouts.py): each region's layout timed in the whole
model, the rule's kept unless another saves MIN_GAIN, the choice reused from the records."""
from __future__ import annotations

import itertools
import time

import numpy as np
from onnx import helper

from compiler_core.codegen.target_machine import host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.passes.blocked_layout import search_lanes
from compiler_core.passes.pipeline import split_at_schedules
from compiler_core.tune import RecordStore, Tuner, TuningRequest
from compiler_core.tune.builder import BuildTask, finished_model
from compiler_core.tune.layouts import RULE, apply_layout, collect_regions, layout_variant
from compiler_core.tune.paired import NOT_FASTER
from compiler_core.tune.runner import Measurement, run_batch

from .helpers import make_model, rand

FAST_LIMITS = {"candidate_seconds": 10.0, "build_seconds": 120.0}


def conv_graph(channels: int = 32, size: int = 16):
    """A 3x3 conv and a 1x1 conv after it, after the passes up to schedule assignment: the
    1x1 conv could run blocked in any of search_lanes' blocks, and by the rule runs plain."""
    c = channels
    model = make_model(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Conv", ["r", "w2", "b2"], ["y"])],
        [("x", np.float32, [1, c, size, size])], [("y", np.float32, None)],
        [("w1", rand(c, c, 3, 3, seed=1)), ("b1", rand(c, seed=2)),
         ("w2", rand(c, c, 1, 1, seed=3)), ("b2", rand(c, seed=4))])
    graph = import_model(model)
    for p in split_at_schedules(3, host_spec())[0]:
        graph = p(graph)
    return graph


def option_of(variant) -> dict:
    """The layout a variant puts its region in (no attrs: the rule's)."""
    if not variant.attrs:
        return RULE
    updates = dict(variant.attrs[0][1])
    return {"layout": "blocked", "block": updates["block"]} if updates["layout"] \
        else {"layout": "plain"}


def timed_as(seconds_of):
    """A runner giving each whole-model variant seconds_of(its option): None fails it; a
    list is its time in each round."""
    calls = []

    def run(task):
        if task.graph is None:  # a kernel's candidates: all alike
            return [Measurement(s, 1e-3) for s in task.schedules]
        calls.append(len(task.schedules))
        out = []
        for v in task.schedules:
            s = seconds_of(option_of(v))
            if isinstance(s, list):
                out.append(Measurement(v, float(np.median(s)), rounds=s))
            else:
                out.append(Measurement(v, s) if s else Measurement(v, error="check: wrong"))
        return out
    run.calls = calls
    return run


def region_layouts(graph, region) -> set:
    return {(graph.nodes[k].attrs.get("layout"), graph.nodes[k].attrs.get("block"))
            for k in region.indices}


def test_regions_offer_the_rule_and_every_other_layout_their_channels_fill():
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    assert [graph.nodes[k].op for k in region.indices] == ["Conv"]
    assert region.options[0] == RULE
    assert region.options[1:] == [{"layout": "blocked", "block": b}
                                  for b in search_lanes(host_spec())]
    assert region_layouts(graph, region) == {(None, None)}  # the rule: too little work


def test_the_fastest_layout_is_kept_and_reused_from_the_records(tmp_path):
    path = tmp_path / "records.jsonl"
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    fastest = region.options[-1]
    run = timed_as(lambda o: 0.9e-3 if o == fastest else 1e-3 if o == RULE else 1.1e-3)
    tuner = Tuner(TuningRequest(trials=len(region.options)), host_spec(), 3, RecordStore(path),
                  run=run)
    tuner(graph)
    assert run.calls == [len(region.options)]
    assert region_layouts(graph, region) == {("blocked", fastest["block"])}
    conv = graph.nodes[region.indices[0]]
    assert conv.schedule.blocked  # the blocked layout's default schedule
    layouts = tuner.summary()["layouts"]
    assert (layouts["regions"], layouts["changed"], layouts["reused"]) == (1, 1, 0)
    assert layouts["choices"][0]["chosen"] == fastest
    records = [r for r in RecordStore(path).all() if r["op"] == "Layout"]
    assert sorted(r["seconds"] for r in records if r["seconds"]) == [0.9e-3, 1e-3]
    # any other layout (blocks of 8 beside 16 on AVX-512) was slower than the rule's
    rejected = [r for r in records if not r["seconds"]]
    assert len(rejected) == len(region.options) - 2
    assert all(r["error"].startswith(NOT_FASTER) for r in rejected)

    again = conv_graph()
    tuner = Tuner(TuningRequest(records=str(path)), host_spec(), 3, RecordStore(path),
                  measure=False, run=timed_as(lambda o: 1 / 0))  # measures nothing
    tuner(again)
    assert region_layouts(again, region) == {("blocked", fastest["block"])}
    assert tuner.summary()["layouts"]["reused"] == 1 and tuner.trials == 0


def test_the_rule_stays_unless_another_layout_saves_enough():
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    tuner = Tuner(TuningRequest(trials=len(region.options)), host_spec(), 3, RecordStore(),
                  run=timed_as(lambda o: 1e-3 if o == RULE else 0.99e-3))
    tuner(graph)
    assert region_layouts(graph, region) == {(None, None)}
    assert tuner.summary()["layouts"]["changed"] == 0


def test_a_layout_faster_only_in_a_few_lucky_rounds_is_rejected_now_and_from_the_records(
        tmp_path):
    path = tmp_path / "records.jsonl"
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    rule = [1e-3, 1.4e-3, 1e-3, 1e-3, 1.2e-3, 1e-3, 1e-3, 1e-3, 1e-3]
    lucky = [t * (0.9 if k % 2 == 0 else 1.05) for k, t in enumerate(rule)]  # median 0.9
    tuner = Tuner(TuningRequest(trials=len(region.options)), host_spec(), 3, RecordStore(path),
                  run=timed_as(lambda o: rule if o == RULE else lucky))
    tuner(graph)
    assert region_layouts(graph, region) == {(None, None)}
    assert tuner.summary()["failures"] == 0  # rejected, not failed
    records = [r for r in RecordStore(path).all() if r["op"] == "Layout"]
    assert [r["error"] is None for r in records] == [o == RULE for o in region.options]
    assert all("faster in 5" in r["error"] for r in records if r["error"])

    again = conv_graph()
    tuner = Tuner(TuningRequest(records=str(path)), host_spec(), 3, RecordStore(path),
                  measure=False, run=timed_as(lambda o: 1 / 0))
    tuner(again)
    assert region_layouts(again, region) == {(None, None)} and tuner.trials == 0


def test_a_failed_layout_is_never_chosen_and_a_failed_rule_keeps_the_rule():
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    Tuner(TuningRequest(trials=len(region.options)), host_spec(), 3, RecordStore(),
          run=timed_as(lambda o: 1e-3 if o == RULE else None))(graph)
    assert region_layouts(graph, region) == {(None, None)}
    graph = conv_graph()
    Tuner(TuningRequest(trials=len(region.options)), host_spec(), 3, RecordStore(),
          run=timed_as(lambda o: None if o == RULE else 1e-4))(graph)
    assert region_layouts(graph, region) == {(None, None)}


def test_a_trials_budget_too_small_for_every_option_times_no_layout():
    graph = conv_graph()
    run = timed_as(lambda o: 1e-3)
    tuner = Tuner(TuningRequest(trials=1), host_spec(), 3, RecordStore(), run=run)
    tuner(graph)
    assert run.calls == [] and tuner.summary()["layouts"]["done"] == 0


def test_every_layout_of_a_region_builds_and_computes_what_the_rule_does():
    """Real builds: the region blocked in each block, then (from there) back in the plain
    layout, each checked in the child against the first variant's outputs."""
    graph = conv_graph()
    (region,) = collect_regions(graph, host_spec())
    variants = [layout_variant(graph, region, o, host_spec()) for o in region.options]
    measured = run_batch(BuildTask(graph.nodes[0], variants, host_spec(), 3, [], graph=graph),
                         **FAST_LIMITS)
    assert [m.error for m in measured] == [None] * len(variants)

    region.chosen = region.options[1]
    apply_layout(graph, region, host_spec())
    (blocked,) = collect_regions(graph, host_spec())
    assert {"layout": "plain"} in blocked.options
    plain = layout_variant(graph, blocked, {"layout": "plain"}, host_spec())
    task = BuildTask(graph.nodes[0], [layout_variant(graph, blocked, RULE, host_spec()), plain],
                     host_spec(), 3, [], graph=graph)
    ops = [[n.op for n in finished_model(task, v).nodes] for v in task.schedules]
    assert "ConvBlocked" in ops[0] and "ConvBlocked" not in ops[1]
    assert [m.error for m in run_batch(task, **FAST_LIMITS)] == [None, None]


def test_a_model_slow_to_build_keeps_its_model_check_within_a_seconds_budget():
    """The layout search shows how long the model takes to build and time; the kernel
    search stops early enough for the model check to take that long within the budget."""
    build = 1.0  # seconds per whole-model build: the variants of a batch share the cores
    budget = 7.0  # the layout search takes 3 builds; the kernel search has 1.3 s after it
    gains = itertools.count(1)
    model_builds = []  # when each whole-model batch started: the layouts', the model check's

    def run(task):
        if task.graph is None:  # each candidate faster than the last: only time ends it
            time.sleep(0.2)
            return [Measurement(s, 1e-3 if k == 0 else 1e-3 * 0.95 ** next(gains))
                    for k, s in enumerate(task.schedules)]
        model_builds.append(time.monotonic() - started)
        time.sleep(build * len(task.schedules))
        return [Measurement(v, 1e-3, rounds=[1e-3] * 9, parts=[]) for v in task.schedules]

    tuner = Tuner(TuningRequest(seconds=budget), host_spec(), 3, RecordStore(), run=run)
    graph = conv_graph()
    started = time.monotonic()
    tuner(graph)
    summary = tuner.summary()
    assert summary["layouts"]["done"] == 1 and summary["model_check"]["checked"]
    assert summary["model_check"]["seconds"] >= 2 * build
    # kept to the share alone (1.05 s), the model check starts at about 5.5 s
    _, check_started = model_builds
    assert check_started <= budget - 2 * build + 0.2
    assert tuner.seconds <= budget + 0.5
