"""tune_graph: spend a tuning budget over a graph's kernels and give every node its best
known schedule.

First the layout search (tune/layouts.py) gives each blocked-layout region its layout, from
the records or timed in the whole model: the kernels' workloads follow it.

Nodes that share a workload (tune/workload.py) are tuned once. A workload with a successful
record for the target is reused as it is (a kernel is tuned once per target); the others
share the budget by their share of the model's time: the next batch always goes to the
workload with the most estimated time per trial spent on it (node_cost's guess, calibrated
against the timed kernels of the same op, until the default schedule has been timed; then
the measured time times the number of calls); each op's biggest guess is timed first. A
workload stops early when PATIENCE candidates in a row improved on its best by less than
1%, or when its space is exhausted. Every measurement goes to the records store as it
arrives. Tuned for one thread, the candidates keep the default's parallel split
(tune/space.py).

Then each tuned workload's best is timed again against the default in one child (the best of
many noisy timings is flattered by the noise): a schedule's time is its latest measurement,
so these head-to-heads decide, in this compile and whenever the records are reused. They
count as trials, on top of a trials budget. A seconds budget is a limit, not a start line:
a batch starts only while one as long as the mean batch so far still ends within the
search's share of it (1 - CONFIRM_SHARE) and a batch of that workload as long as its
longest so far does too; the head-to-heads go in order of the time they may save while
one as long as the longest so far (or half the workload's longest batch) still fits; a
best left unconfirmed is chosen on its search timing (the kernel's summary says
`confirmed: false`).
Last, the model check (tune/model_check.py) builds the whole model with and without the new
choices and keeps only those whose kernels are faster in the model, and none unless the
tuned model as a whole wins round by round (tune/paired.py), timed again when the rounds
fall short and the budget allows (_time_again); it has the last
MODEL_CHECK_SHARE of a seconds budget, or more when the layout search showed that building and
timing the model takes longer (_model_check_reserve).

Slots: `run` times a batch here; each of `slots` times batches elsewhere (in the service,
another worker on the same hardware: tune/slots.py). Every slot is a thread that takes the
next batch as soon as its last one is back, so N slots keep N batches in flight; batches
are picked, recorded and judged for early stopping under one lock, counting the candidates
in flight against the budget and the workload's share. With one slot this is the plain
loop. A slot that fails (a worker died, a reply timed out) has its batch timed here and
retires; batches timed here never overlap (they would share the cores). Once the local slot
is done, the others' batches are awaited for GRACE_SECONDS (or three times the slowest
batch) and then dropped, so a lost worker never holds the compile up.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

from ..analysis.node_cost import node_cost
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node
from .builder import BuildTask, ModelVariant
from .layouts import (LAYOUT_SHARE, RULE, Region, apply_layout, collect_regions, judged,
                      layout_variant, region_summary)
from .model_check import (MAX_WEIGHT_BYTES, in_model_key, onnx_names, seconds_in_model,
                          weight_bytes)
from .paired import NOT_FASTER, more_rounds_could_decide, pooled, rounds_of, why_not_faster
from .records import RecordStore, make_record
from .request import TuningRequest
from .runner import Measurement, run_batch
from .search import Strategy, make_strategy
from .space import space_of, tunable
from .workload import schedule_fields, schedule_from_fields, target_key, workload_key

BATCH = 8          # candidates per child process (plus the reference)
PATIENCE = 24      # candidates without a 1% gain before a workload stops
PEAK_FLOPS = 50e9  # one core, for the a-priori estimate of a kernel's time
PEAK_BYTES = 20e9
CONFIRM_ROUNDS = 3    # head-to-head re-timings of the best against the default, at most
CONFIRM_SHARE = 0.1   # of a seconds budget
HEAD_TO_HEAD_OF_BATCH = 0.5  # a head-to-head's time at most, against its kernel's batch
MODEL_CHECK_SHARE = 0.15  # of a seconds budget, kept for the model check
GRACE_SECONDS = 30.0  # how long other slots' batches are awaited once the local slot is done
WAIT_SECONDS = 0.5    # a slot waiting for batches in flight looks at a seconds budget this often


@dataclass
class Workload:
    key: str
    nodes: list[Node]
    space: list                   # space[0] is the default schedule
    checked: list[int]            # outputs read by the graph (the others are scratch)
    guess: float                  # a-priori seconds per model run
    tried: dict = field(default_factory=dict)   # schedule -> Measurement (records included)
    source: str = "default"       # "records" | "tuned" | "default"
    trials: int = 0               # measurements made by this compile
    since_gain: int = 0
    done: bool = False
    pending: set = field(default_factory=set)  # candidates in flight
    in_flight: int = 0            # batches in flight
    confirmed: bool = False       # the choice stands after a head-to-head with the default
    prologue: list = field(default_factory=list)  # builder.BuildTask.prologue
    in_model: dict = field(default_factory=dict)  # schedule -> seconds per call in the model
    longest_batch: float = 0.0    # seconds, its longest batch so far
    out_of_time: bool = False     # a batch of it would end past a seconds budget

    @property
    def op(self) -> str:
        return self.nodes[0].op

    @property
    def default_seconds(self) -> float | None:
        m = self.tried.get(self.space[0])
        return m.seconds if m and m.ok else None

    @property
    def best(self) -> Measurement | None:
        ok = [m for m in self.tried.values() if m.ok]
        return min(ok, key=lambda m: m.seconds) if ok else None

    @property
    def choice(self):
        """The schedule to use: the faster in the model when the model check timed it, else
        the fastest alone when it beats the default."""
        if self.in_model:
            return min(self.in_model, key=self.in_model.get)
        best, default = self.best, self.default_seconds
        return best.schedule if best and default and best.seconds < default else self.space[0]

    @property
    def estimate(self) -> float:
        """Seconds per model run: measured once the default has been timed."""
        d = self.default_seconds
        return d * len(self.nodes) if d else self.guess


def collect_workloads(graph: Graph, spec: MachineSpec, weight_dtype: str = "float32",
                      threads: int = 1) -> list[Workload]:
    read = {v for n in graph.nodes for v in n.inputs if v is not None} | set(graph.outputs)
    producers = {v: n for n in graph.nodes for v in n.outputs}
    by_key: dict[str, Workload] = {}
    for n in graph.nodes:
        if not tunable(n):
            continue
        key = workload_key(n, weight_dtype)
        if key not in by_key:
            checked = [k for k, v in enumerate(n.outputs) if v in read] or [0]
            by_key[key] = Workload(key, [], space_of(n, spec, threads), checked, 0.0,
                                   prologue=_prologue(n, producers))
        by_key[key].nodes.append(n)
        by_key[key].guess += _guess(n)
    return list(by_key.values())


def _prologue(n: Node, producers: dict) -> list[Node]:
    """The ConvPad that pads a conv's input, which a Winograd candidate does without."""
    pad = producers.get(n.inputs[0]) if n.op == "Conv" else None
    return [pad] if pad is not None and pad.op == "ConvPad" else []


def _guess(n: Node) -> float:
    c = node_cost(n)
    return max(c.flops / PEAK_FLOPS, c.bytes / PEAK_BYTES)


class Tuner:
    """One compile's tuning: `run(graph)` picks schedules (a pipeline pass), `summary()`
    is meta.json's `tuning`."""

    def __init__(self, request: TuningRequest, spec: MachineSpec, opt_level: int,
                 store: RecordStore, measure: bool = True,
                 on_progress: Callable[[dict], None] | None = None,
                 strategy: Strategy | None = None, run: Callable = run_batch,
                 weight_dtype: str = "float32", slots: list[Callable] = ()):
        self.request, self.spec, self.opt_level, self.store = request, spec, opt_level, store
        self.target = target_key(spec, request.threads)
        self.measure, self.on_progress = measure, on_progress or (lambda event: None)
        self.strategy = strategy or make_strategy()
        self.run_batch, self.weight_dtype, self.slots = run, weight_dtype, list(slots)
        self._lock = threading.Condition()   # the tuner's state, shared by the slots
        self._local = threading.Lock()       # one batch at a time on this machine's cores
        self._failed: BaseException | None = None
        self._closed = False                  # slots abandoned
        self._batch_seconds: list[float] = []    # how long each batch took, any slot
        self._confirm_seconds: list[float] = []  # how long each head-to-head took
        self.measured_by: Counter = Counter()
        self.slot_failures: list[str] = []       # what went wrong with other slots
        self.workloads: list[Workload] = []
        self.trials, self.failures, self.seconds = 0, 0, 0.0
        self.curve: list[dict] = []
        self.note: str | None = None
        self.model_check: dict | None = None
        self.regions: list[Region] = []
        self._layout_seconds: list[float] = []  # how long each region's timing took
        self._model_build = 0.0  # seconds to build and time the model once (0: not seen)
        self._checks_model = True               # whether its weights allow a model check

    def __call__(self, graph: Graph) -> Graph:
        started = time.monotonic()
        self._checks_model = weight_bytes(graph) <= MAX_WEIGHT_BYTES
        if self.opt_level >= 1:  # below, no pass reads the layout
            self._choose_layouts(graph, started)
        self.workloads = collect_workloads(graph, self.spec, self.weight_dtype,
                                           self.request.threads)
        for w in self.workloads:
            self._load_records(w)
        if self.measure:
            self._spend(started)
            self._confirm_all(started)
            self._check_in_model(graph, started)
        self.seconds = time.monotonic() - started
        for w in self.workloads:
            self._apply(w)
        return graph

    # ---------------------------------------------------------------- layouts

    def _choose_layouts(self, graph: Graph, started: float) -> None:
        """tune/layouts.py: each region's layout from the records, else timed in the whole
        model while the budget's LAYOUT_SHARE lasts; the others keep the rule's."""
        self.regions = collect_regions(graph, self.spec)
        for region in self.regions:
            self._load_layout_records(region)
            apply_layout(graph, region, self.spec)
        r = self.request
        deadline = started + r.seconds * LAYOUT_SHARE if r.seconds is not None else float("inf")
        for region in self.regions:
            if not self.measure or region.source == "records":
                continue
            if r.trials is not None and self.trials + len(region.options) > r.trials:
                break
            if not self._fits(max(self._layout_seconds, default=0.0), deadline):
                break
            self._time_layouts(graph, region, started)
            apply_layout(graph, region, self.spec)

    def _load_layout_records(self, region: Region) -> None:
        """Each option's latest record (a stale file names no option: ignored)."""
        found = sorted(self.store.find(region.key, self.target), key=lambda r: r.get("at") or 0)
        for rec in found:
            option = next((o for o in region.options if o == rec["schedule"]), None)
            if option is not None:
                region.timed(option, rec["seconds"])
        if region.seconds:
            region.source, region.chosen = "records", region.best()

    def _time_layouts(self, graph: Graph, region: Region, started: float) -> None:
        variants = [layout_variant(graph, region, o, self.spec) for o in region.options]
        task = BuildTask(graph.nodes[0], variants, self.spec, self.opt_level, [],
                         self.request.threads, self.weight_dtype, graph=graph)
        began = time.monotonic()
        with self._local:
            measured = self.run_batch(task)
        took = time.monotonic() - began
        self._layout_seconds.append(took)
        # the variants' builds share the cores (each would take them all alone)
        self._model_build = max(self._model_build, took / len(variants))
        for option, m in zip(region.options, measured):
            error = judged(option, m, measured[0])
            seconds = None if error else m.seconds
            region.timed(option, seconds)
            self._store(region.key, "Layout", option, option == RULE, seconds, error, m.by)
        region.source, region.chosen = "tuned", region.best()
        self._progress("layout", started)

    # ---------------------------------------------------------------- records

    def _load_records(self, w: Workload) -> None:
        """A schedule's time is its latest measurement (a confirmation's, when there was
        one); a schedule that ever failed stays failed."""
        for r in sorted(self.store.find(w.key, self.target), key=lambda r: r.get("at") or 0):
            s = schedule_from_fields(r["schedule"], w.space)
            if s is not None and (s not in w.tried or w.tried[s].ok):
                w.tried[s] = Measurement(s, r["seconds"], r["error"])
        if w.best is not None:
            w.source, w.done = "records", True
            self.strategy.observe(w, list(w.tried.values()))
        for r in sorted(self.store.find(in_model_key(w.key), self.target),
                        key=lambda r: r.get("at") or 0):
            s = schedule_from_fields(r["schedule"], w.space)
            if s is not None and not r["error"]:
                w.in_model[s] = r["seconds"]

    def _record(self, w: Workload, m: Measurement) -> None:
        w.tried[m.schedule] = m
        w.trials += 1
        self._store(w.key, w.op, schedule_fields(m.schedule), m.schedule == w.space[0],
                    m.seconds, m.error, m.by)

    def _store(self, key: str, op: str, fields: dict, default: bool, seconds, error,
               by) -> None:
        """Any measurement (a kernel's, a model's, a layout's): a trial, and a record."""
        self.trials += 1
        self.measured_by[by or "local"] += 1
        self.failures += error is not None and not error.startswith(NOT_FASTER)
        self.store.add(make_record(key, self.target, op, fields, default, seconds, error))

    # ---------------------------------------------------------------- budget

    def _out_of_budget(self, started: float) -> bool:
        r = self.request
        pending = sum(len(w.pending) for w in self.workloads)
        return bool((r.trials is not None and self.trials + pending >= r.trials)
                    or (r.seconds is not None
                        and not self._fits(self._mean_batch(), self._search_deadline(started))))

    def _search_deadline(self, started: float) -> float:
        return (started + self.request.seconds * (1 - CONFIRM_SHARE)
                - self._model_check_reserve())

    def _batch_fits(self, w: Workload, started: float) -> bool:
        """Whether a batch of `w` as long as its longest so far still ends in time: a big
        kernel's batches take several times a small one's, and the mean batch alone let one
        start too late (AMD EPYC, LLVM: znver4, Inception v2: 1.7-2.2 s for the batches of
        its small convs, 4.0-6.6 s for its big ones')."""
        return self.request.seconds is None or self._fits(
            w.longest_batch or self._mean_batch(), self._search_deadline(started))

    def _model_check_reserve(self) -> float:
        """Seconds of a seconds budget kept for the model check: its share, or as long as the
        layout search says two builds of the model and their timing take, when longer.
        AMD EPYC (LLVM: znver4), DenseNet-121 tuned for 240 s: its model check took 59 s
        against the share's 36, and the compile 294 s; its layout search had built and
        timed three variants in 131 s."""
        if not self._checks_model:
            return 0.0
        share = self.request.seconds * MODEL_CHECK_SHARE
        return max(share, self._model_build * 2)

    @staticmethod
    def _fits(step_seconds: float, deadline: float) -> bool:
        return time.monotonic() + step_seconds <= deadline

    def _mean_batch(self) -> float:
        return sum(self._batch_seconds) / len(self._batch_seconds) if self._batch_seconds else 0.0

    def _pick(self) -> Workload | None:
        """The workload with most time per trial spent or in flight; one whose default is
        being timed waits for it (its estimate and its reference depend on it). An op none
        of whose kernels has been timed or is being timed first has its biggest guess timed:
        its guesses are calibrated from then on."""
        live = [w for w in self.workloads if not w.done and not w.out_of_time
                and not (w.in_flight and w.default_seconds is None)]
        if not live:
            return None
        seen = {w.op for w in self.workloads if w.default_seconds or w.in_flight}
        unseen = [w for w in live if w.op not in seen]
        if unseen:
            return max(unseen, key=lambda w: w.guess)
        scale = self._calibration()
        return max(live, key=lambda w: w.estimate
                   * (1.0 if w.default_seconds else scale.get(w.op, 1.0))
                   / (w.trials + len(w.pending) + BATCH))

    def _calibration(self) -> dict[str, float]:
        """Per op, how far the a-priori guesses are from the times measured so far (the
        median ratio over the op's timed kernels), so that untimed kernels compete fairly
        with timed ones for the budget. Per op, because the ops are far apart: MobileNetV3
        on Zen 1 ran its depthwise convs at 6 GFLOP/s and its convs at 33, and calibrated by
        the median over all kernels, a 150-s run never reached a depthwise conv."""
        ratios: dict[str, list[float]] = {}
        for w in self.workloads:
            if w.default_seconds and w.guess > 0:
                ratios.setdefault(w.op, []).append(w.estimate / w.guess)
        return {op: sorted(r)[len(r) // 2] for op, r in ratios.items()}

    def _spend(self, started: float) -> None:
        if not self.slots:
            self._slot(self.run_batch, started)
            return
        threads = [threading.Thread(target=self._guarded, args=(run, started), daemon=True)
                   for run in [self.run_batch, *self.slots]]
        for t in threads:
            t.start()
        threads[0].join()  # the local slot stops when the budget or the work runs out
        grace = time.monotonic() + max(GRACE_SECONDS, 3 * max(self._batch_seconds, default=0))
        for t in threads[1:]:
            t.join(max(0.0, grace - time.monotonic()))
        with self._lock:  # a slot still out is abandoned: its answer is dropped
            self._closed = True
            lost = sum(t.is_alive() for t in threads[1:])
            if lost:
                self.slot_failures.append(f"{lost} batches still out were dropped")
            for w in self.workloads:
                w.pending.clear()
                w.in_flight = 0
        if self._failed is not None:
            raise self._failed

    def _guarded(self, run: Callable, started: float) -> None:
        try:
            self._slot(run, started)
        except BaseException as exc:  # noqa: BLE001  raised again by _spend
            with self._lock:
                self._failed = self._failed or exc
                self._lock.notify_all()

    def _slot(self, run: Callable, started: float) -> None:
        """Batches for one slot until the budget or the workloads run out."""
        while True:
            with self._lock:
                batch = self._next_batch(started)
            if batch is None:
                return
            w, task, fresh = batch
            began = time.monotonic()
            measured, retire = self._measure(run, task)
            with self._lock:
                if self._closed:
                    return
                took = time.monotonic() - began
                self._batch_seconds.append(took)
                w.longest_batch = max(w.longest_batch, took)
                self._finish_batch(w, task, fresh, measured)
                self._progress(w.op, started)
                self._lock.notify_all()
            if retire:
                return

    def _next_batch(self, started: float):
        """(workload, task, fresh) under the lock; waits while only batches in flight can
        free work; None when there is nothing left to do."""
        while self._failed is None and not self._out_of_budget(started):
            w = self._pick()
            if w is None:
                if not any(x.in_flight for x in self.workloads):
                    return None
                self._lock.wait(WAIT_SECONDS)
                continue
            if not self._batch_fits(w, started):
                w.out_of_time = True
                continue
            pending = sum(len(x.pending) for x in self.workloads)
            room = BATCH if self.request.trials is None else \
                self.request.trials - self.trials - pending
            batch = self._start_batch(w, max(1, min(BATCH, room)))
            if batch is not None:
                return batch
            if w.in_flight:   # the rest of its space is in flight
                self._lock.wait(WAIT_SECONDS)
            else:
                self._progress(w.op, started)
        return None

    def _start_batch(self, w: Workload, size: int):
        fresh = w.default_seconds is None
        batch = self.strategy.propose(w, size - fresh)
        if not batch and not fresh:
            w.done = not w.in_flight
            return None
        w.pending.update([w.space[0]] + batch if fresh else batch)
        w.in_flight += 1
        task = BuildTask(w.nodes[0], [w.space[0]] + batch, self.spec, self.opt_level,
                         w.checked, self.request.threads, self.weight_dtype, w.prologue)
        return w, task, fresh

    def _measure(self, run: Callable, task: BuildTask) -> tuple[list, bool]:
        """(measurements, whether the slot retires): a failed slot's batch is timed here."""
        if run is not self.run_batch:
            try:
                measured = run(task)
                if len(measured) == len(task.schedules):
                    return measured, False
                why = "answered for another number of candidates"
            except Exception as exc:  # noqa: BLE001  a lost worker or reply: measured here
                why = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.slot_failures.append(f"a batch measured here instead: {why}"[:300])
        with self._local:
            return self.run_batch(task), run is not self.run_batch

    def _finish_batch(self, w: Workload, task: BuildTask, fresh: bool, measured: list) -> None:
        measured = _against_default(w, measured)
        w.in_flight -= 1
        w.pending.difference_update(task.schedules if fresh else task.schedules[1:])
        before = w.best.seconds if w.best else None
        for m in measured[0 if fresh else 1:]:
            self._record(w, m)
        self.strategy.observe(w, measured[0 if fresh else 1:])
        w.source = "tuned"
        self._after_batch(w, before, len(task.schedules) - 1, measured[0])

    def _after_batch(self, w: Workload, before, count: int, reference: Measurement) -> None:
        if not reference.ok:
            w.done = True  # nothing can be checked without the default
            return
        gained = before is not None and w.best.seconds < 0.99 * before
        w.since_gain = 0 if gained or before is None else w.since_gain + count
        w.done = w.since_gain >= PATIENCE or len(w.tried) >= len(w.space)

    def _confirm_all(self, started: float) -> None:
        """Head-to-heads, the workloads that may save the most time first."""
        r = self.request
        deadline = started + r.seconds - self._model_check_reserve() if r.seconds is not None \
            else float("inf")
        for w in sorted(self.workloads, key=_possible_saving, reverse=True):
            trials = self.trials
            self._confirm(w, deadline)
            if self.trials != trials:  # live progress and the curve count head-to-heads too
                self._progress(w.op, started)

    def _confirm(self, w: Workload, deadline: float) -> None:
        """The best candidate against the default once more, in one child: the fastest of
        many noisy timings is flattered by the noise (the winner's curse), so the choice
        rests on this head-to-head, which also becomes both schedules' latest record."""
        confirmed: set = set()
        for _ in range(CONFIRM_ROUNDS):  # the next best may now lead on a lucky timing
            best = w.best
            if w.source != "tuned" or best is None or best.schedule in confirmed | {w.space[0]}:
                break
            if not self._fits(self._confirm_estimate(w), deadline):
                break
            task = BuildTask(w.nodes[0], [w.space[0], best.schedule], self.spec, self.opt_level,
                             w.checked, self.request.threads, self.weight_dtype, w.prologue)
            began = time.monotonic()
            with self._local:
                measured = self.run_batch(task)
            self._confirm_seconds.append(time.monotonic() - began)
            for m in _against_default(w, measured):
                self._record(w, m)
            confirmed.add(best.schedule)
        w.confirmed = bool(confirmed) and w.best.schedule in confirmed | {w.space[0]}

    def _confirm_estimate(self, w: Workload) -> float:
        """Seconds a head-to-head of `w` may take: the longest so far (big kernels' take
        twice as long as small ones'), or, when longer, HEAD_TO_HEAD_OF_BATCH of its longest
        batch (2 candidates of up to 9, besides the child's start; AMD EPYC, LLVM: znver4,
        AlexNet's head-to-heads took 25-45% of their kernel's batch time)."""
        return max(max(self._confirm_seconds, default=self._mean_batch()),
                   w.longest_batch * HEAD_TO_HEAD_OF_BATCH)

    def _check_in_model(self, graph: Graph, started: float) -> None:
        """tune/model_check.py: the workloads whose choice the model has not confirmed yet
        keep it only if their kernels are faster in the tuned model than in the default."""
        unchecked = [w for w in self.workloads if w.choice != w.space[0] and not w.in_model]
        if not unchecked:
            return
        if not self._checks_model:
            self.model_check = {"checked": False, "why": "the model's weights are too big "
                                "to build it twice"}
            return
        self.model_check = {"checked": None, "kernels": len(unchecked)}  # under way
        self._progress("model check", started)
        began = time.monotonic()
        base = {id(n): w.choice for w in self.workloads if w not in unchecked for n in w.nodes}
        tuned = {**base, **{id(n): w.choice for w in unchecked for n in w.nodes}}
        schedules = [ModelVariant(tuple(choices.get(id(n), n.schedule) for n in graph.nodes))
                     for choices in (base, tuned)]
        task = BuildTask(graph.nodes[0], schedules, self.spec, self.opt_level, [],
                         self.request.threads, self.weight_dtype, graph=graph)
        with self._local:
            default, chosen = self.run_batch(task)
        if default.ok and chosen.ok and more_rounds_could_decide(chosen, default, 0.0):
            default, chosen = self._time_again(task, default, chosen, started, began)
        if not (default.ok and chosen.ok):
            self._model_check_failed(unchecked, default, chosen)
        elif why := why_not_faster(chosen, default, 0.0):
            self._model_check_rejected(unchecked, default, chosen, why)
        else:
            self._judge_in_model(unchecked, default, chosen)
        self.model_check["seconds"] = round(time.monotonic() - began, 2)
        self._progress("model check", started)

    def _time_again(self, task: BuildTask, default: Measurement, chosen: Measurement,
                    started: float, began: float) -> tuple[Measurement, Measurement]:
        """The model check's builds timed once more, when that fits in a seconds budget, and
        judged on the rounds of both (tune/paired.py)."""
        r = self.request
        if r.seconds is not None and not self._fits(time.monotonic() - began,
                                                    started + r.seconds):
            return default, chosen
        with self._local:
            again = self.run_batch(task)
        if not all(m.ok for m in again):
            return default, chosen
        return pooled(default, again[0]), pooled(chosen, again[1])

    def _judge_in_model(self, unchecked: list, default: Measurement,
                        chosen: Measurement) -> None:
        for w in unchecked:
            w.in_model = {w.space[0]: self._seconds_in_model(w, default.parts),
                          w.choice: self._seconds_in_model(w, chosen.parts)}
            for s, seconds in w.in_model.items():
                self._record_in_model(w, s, seconds, None, default.by)
        self.model_check = _checked(unchecked, default, chosen)

    def _model_check_failed(self, unchecked: list, default: Measurement,
                            chosen: Measurement) -> None:
        """A tuned model that is wrong or does not run keeps the defaults (each kernel passed
        its own check, so this is rare: the model's outputs differ past rounding); when the
        default build failed, the choices stay as the kernels' own timings made them."""
        self.model_check = {"checked": False, "why": (default.error or chosen.error)[:300]}
        if default.ok:
            self._keep_defaults(unchecked, default, chosen.error)

    def _model_check_rejected(self, unchecked: list, default: Measurement,
                              chosen: Measurement, why: str) -> None:
        """A tuned model the rounds do not show faster (tune/paired.py) keeps the defaults:
        whatever its kernels' times say, tuning never ships a model it has not seen win."""
        self._keep_defaults(unchecked, default, why)
        self.model_check = {**_checked(unchecked, default, chosen), "why": why}

    def _keep_defaults(self, unchecked: list, default: Measurement, why: str) -> None:
        """Each workload's choice recorded as failed in the model for `why`, and its default
        timed there, so that a compile from the records keeps the default too."""
        for w in unchecked:
            self._record_in_model(w, w.choice, None, why, default.by)
            w.in_model = {w.space[0]: self._seconds_in_model(w, default.parts)}
            self._record_in_model(w, w.space[0], w.in_model[w.space[0]], None, default.by)

    @staticmethod
    def _seconds_in_model(w: Workload, parts: list) -> float:
        """Per call: the workload's nodes' kernels, and their prologues', in the model."""
        return seconds_in_model(onnx_names(w.nodes + w.prologue), parts) / len(w.nodes)

    def _record_in_model(self, w: Workload, schedule, seconds, error, by) -> None:
        self._store(in_model_key(w.key), w.op, schedule_fields(schedule),
                    schedule == w.space[0], seconds, error, by)

    # ---------------------------------------------------------------- results

    def _apply(self, w: Workload) -> None:
        for n in w.nodes:
            n.schedule = w.choice

    def _progress(self, op: str, started: float) -> None:
        point = {"trials": self.trials, **self._estimate()}
        if point["default_ms"]:  # not before a kernel's default has been timed
            self.curve.append(point)
        self.on_progress({
            "layouts": self._layouts_progress(),
            "kernels_total": len(self.workloads),
            "kernels_done": sum(x.done for x in self.workloads),
            "trials": self.trials, "trials_budget": self.request.trials,
            "seconds": round(time.monotonic() - started, 2),
            "seconds_budget": self.request.seconds, "op": op, "failures": self.failures,
            "model_check": self.model_check,
            **point})

    def _layouts_progress(self) -> dict:
        return {"regions": len(self.regions),
                "done": sum(r.source != "default" for r in self.regions),
                "changed": sum(r.chosen != RULE for r in self.regions)}

    def _estimate(self) -> dict:
        """Time of the kernels whose default has been timed: as tuned so far, and default."""
        timed = [w for w in self.workloads if w.default_seconds]
        best = sum(w.best.seconds * len(w.nodes) for w in timed)
        default = sum(w.default_seconds * len(w.nodes) for w in timed)
        return {"estimate_ms": round(best * 1e3, 4), "default_ms": round(default * 1e3, 4)}

    def summary(self) -> dict:
        kernels = [self._kernel_summary(w) for w in self.workloads]
        return {"enabled": True, "request": self.request.as_dict(), "target": self.target,
                "trials": self.trials, "failures": self.failures,
                "reused": sum(w.source == "records" for w in self.workloads),
                "tuned_kernels": sum(w.source == "tuned" for w in self.workloads),
                "tunable_kernels": len(self.workloads), "seconds": round(self.seconds, 2),
                "note": self.note, "model_check": self.model_check,
                "layouts": {**self._layouts_progress(),
                            "reused": sum(r.source == "records" for r in self.regions),
                            "seconds": round(sum(self._layout_seconds), 2),
                            "choices": [region_summary(r) for r in self.regions]},
                "kernels": kernels, "curve": self.curve,
                "measured_by": dict(self.measured_by),
                "slot_failures": self.slot_failures[:10]}

    @staticmethod
    def _kernel_summary(w: Workload) -> dict:
        chosen = w.nodes[0].schedule
        m = w.tried.get(chosen)
        return {"workload": w.key, "op": w.op, "calls": len(w.nodes), "source": w.source,
                "trials": w.trials,
                "default_ms": _ms(w.default_seconds),
                "chosen_ms": _ms(m.seconds if m and m.ok else None),
                "schedule": schedule_fields(chosen), "default": chosen == w.space[0],
                "confirmed": w.confirmed,
                "in_model_ms": {"default": _ms(w.in_model.get(w.space[0])),
                                "chosen": _ms(w.in_model.get(chosen))} if w.in_model else None}


def _checked(unchecked: list, default: Measurement, chosen: Measurement) -> dict:
    """meta.json's tuning.model_check once the model check has decided (`rounds`: 18 when
    it timed the models again)."""
    return {"checked": True, "kernels": len(unchecked),
            "kept": sum(w.choice != w.space[0] for w in unchecked),
            "default_ms": _ms(default.seconds), "tuned_ms": _ms(chosen.seconds),
            "rounds": len(rounds_of(chosen))}


def _against_default(w: Workload, measured: list) -> list:
    """A batch's times (measured[0] is the default's) in the units of the default's recorded
    time: every child times the default too, and a shared machine drifts between children.
    Xeon Emerald Rapids, 1 thread, one of ResNet-50's 512-channel 3x3 convs at 7x7: the
    default schedule took 2.47 ms in one child and 1.62 in its head-to-head two minutes
    later. Compared raw, the candidates timed in a quiet moment lead the search and take
    the head-to-heads, and a schedule's latest time depends on when it was timed."""
    reference, default = measured[0], w.default_seconds
    if default is None or not reference.ok or not reference.seconds:
        return measured
    scale = default / reference.seconds
    return [replace(m, seconds=m.seconds * scale) if m.ok else m for m in measured]


def _possible_saving(w: Workload) -> float:
    """Seconds per model run the best would save over the default, by the search's timings."""
    best, default = w.best, w.default_seconds
    return (default - best.seconds) * len(w.nodes) if best and default else 0.0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 5)


def tune_graph(graph: Graph, spec: MachineSpec, request: TuningRequest, opt_level: int = 3,
               store: RecordStore | None = None,
               on_progress: Callable[[dict], None] | None = None) -> dict:
    """Give the graph's nodes (schedules assigned, weights not yet packed) their tuned
    schedules in place; returns the summary (meta.json's `tuning`)."""
    tuner = Tuner(request, spec, opt_level, store or RecordStore(request.records),
                  on_progress=on_progress)
    tuner(graph)
    return tuner.summary()
