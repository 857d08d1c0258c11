"""The cost model and the evolutionary search on the real PackedGemm space and features,
with a known synthetic time per schedule (so the test says what a good ranking is)."""
import random

import numpy as np

from compiler_core.codegen.target_machine import host_spec
from compiler_core.ir import Node, Value
from compiler_core.kernels.packed_gemm import default_gemm_schedule
from compiler_core.tune.cost_model import CostModel
from compiler_core.tune.runner import Measurement
from compiler_core.tune.search import EvolutionarySearch, untried
from compiler_core.tune.space import space_of
from compiler_core.tune.tuner import Workload


def gemm_workload() -> Workload:
    a = Value("a", (64, 512), np.float32)
    w = Value("w", (512, 256), np.float32, const=np.zeros((512, 256), np.float32))
    node = Node("PackedGemm", [a, w, None], [Value("y", (64, 256), np.float32)], {})
    node.schedule = default_gemm_schedule(node, host_spec())
    return Workload("k", [node], space_of(node, host_spec()), [0], 1.0)


def synthetic_seconds(s) -> float:
    """Fastest with 3 vectors per row, 4-row tiles and kc 256, then (so that one schedule is
    the fastest) the shortest items of the fewest panels, row tiles inside the panels; a crash
    at nr 1, mr 1."""
    return 1e-4 * (1 + abs(s.nr - 3) + 0.5 * abs(s.mr - 4) + abs(s.kc - 256) / 256
                   + 1e-3 * (s.mc + s.nc + s.rows_outer))


def measure(s) -> Measurement:
    return Measurement(s, synthetic_seconds(s))


def synthetic_measurement(task, schedule, by: str | None = None) -> Measurement:
    """A kernel's synthetic time; for a whole model (the model check), its kernels' times
    and their sum."""
    if task.graph is None:
        return Measurement(schedule, synthetic_seconds(schedule), by=by)
    parts = [[list(n.onnx_nodes), synthetic_seconds(s)]
             for n, s in zip(task.graph.nodes, schedule.schedules)]
    return Measurement(schedule, sum(t for _, t in parts), by=by, parts=parts)


def test_model_ranks_unseen_candidates_by_their_time():
    w = gemm_workload()
    rng = random.Random(1)
    seen = rng.sample(w.space[1:], 60)
    model = CostModel()
    for s in seen:
        model.add(w.nodes[0], s, synthetic_seconds(s), synthetic_seconds(w.space[0]))
    unseen = [s for s in w.space if s not in seen]
    order = np.argsort(model.predict(w.nodes[0], unseen))
    top = [synthetic_seconds(unseen[i]) for i in order[:10]]
    assert np.mean(top) < np.percentile([synthetic_seconds(s) for s in unseen], 20)


def test_evolutionary_search_finds_the_fast_region_sooner_than_random():
    def best_after(strategy, batches=6, n=8):
        w = gemm_workload()
        w.tried[w.space[0]] = measure(w.space[0])
        for _ in range(batches):
            batch = strategy.propose(w, n)
            assert batch and not set(batch) & set(w.tried)
            got = [measure(s) for s in batch]
            w.tried.update((m.schedule, m) for m in got)
            strategy.observe(w, got)
        assert len(untried(w)) == len(w.space) - 1 - batches * n
        return min(m.seconds for m in w.tried.values())
    from compiler_core.tune.search import RandomSearch
    evolved = [best_after(EvolutionarySearch(seed)) for seed in range(3)]
    randomly = [best_after(RandomSearch(seed)) for seed in range(3)]
    assert np.mean(evolved) <= np.mean(randomly)
    assert min(evolved) == min(synthetic_seconds(s) for s in gemm_workload().space)


def test_tuned_for_one_thread_every_candidate_keeps_the_defaults_parallel_split():
    """One thread runs a parallel loop as one call: serial or not is no choice there, and
    the kernels of a model tuned for one thread must still use more when given them."""
    from compiler_core.frontend.onnx import import_model
    from compiler_core.kernels.depthwise import default_depthwise_schedule

    from .test_depthwise import _model
    model, _ = _model(120, 28, 28, 5, 1, {"pads": [2, 2, 2, 2]})
    node = next(n for n in import_model(model).nodes if n.op == "DepthwiseConv")
    node.schedule = default_depthwise_schedule(node, host_spec())
    one, two = space_of(node, host_spec(), 1), space_of(node, host_spec(), 2)
    assert node.schedule.parallel and one[0] == two[0] == node.schedule
    assert {s.parallel for s in one} == {True} and {s.parallel for s in two} == {True, False}
    assert len(two) == 2 * len(one)


def test_one_op_with_two_schedule_classes_gets_a_model_for_each():
    """DepthwiseConv's plain and blocked kernels have different knobs, hence feature
    layouts: a model trained on one ranks the other's candidates without mixing them (a
    shared model failed a MobileNetV3 tuning at 2 threads)."""
    from compiler_core.frontend.onnx import import_model
    from compiler_core.kernels.depthwise import BlockedDepthwiseSchedule, DepthwiseSchedule

    from .test_depthwise import _model
    model_proto, _ = _model(64, 14, 14, 3, 1, {"pads": [1, 1, 1, 1]})
    node = next(n for n in import_model(model_proto).nodes if n.op == "DepthwiseConv")
    blocked = [BlockedDepthwiseSchedule(p, par) for p in range(1, 9) for par in (False, True)]
    plain = [DepthwiseSchedule(a, par, row_block=r) for a in (1, 2, 4) for par in (False, True)
             for r in (1, 2, 4)]
    model = CostModel()
    for s in blocked:  # faster with more positions
        model.add(node, s, 1e-4 / s.positions, 1e-4)
    assert model.trained(node, blocked[0]) and not model.trained(node, plain[0])
    assert not model.predict(node, plain).any()  # no model for them yet: all alike
    scores = model.predict(node, blocked + plain)
    assert scores[len(blocked) - 1] < scores[0] and not scores[len(blocked):].any()
    for s in plain:  # faster with more accumulators
        model.add(node, s, 1e-4 / s.accumulators, 1e-4)
    scores = model.predict(node, plain)
    assert scores[-1] < scores[0]
