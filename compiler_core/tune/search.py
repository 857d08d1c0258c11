"""Search strategies: which untried candidates of a workload to measure next.

A strategy has `propose(workload, n) -> [schedule, ...]` (never one already tried) and
`observe(workload, measurements)`. RandomSearch samples the space uniformly.
EvolutionarySearch (the default) breeds from the workload's fastest schedules: their
mutations (one or two knobs changed) and the rest of the space (a random sample of it, past
SAMPLE candidates) are ranked by the cost model (tune/cost_model.py), the best predicted are
measured, and a quarter of every batch stays random so that the model keeps seeing
unexplored corners.
Until the model of the op and schedule class has enough measurements to train, it samples
at random.
"""
from __future__ import annotations

import random
from typing import Protocol

import numpy as np

from .cost_model import CostModel
from .space import neighbours


class Strategy(Protocol):
    def propose(self, workload, n: int) -> list: ...

    def observe(self, workload, measurements: list) -> None: ...


def untried(workload) -> list:
    """Candidates not measured yet nor in flight (another slot is timing them), the default
    aside (it is the reference of every batch)."""
    pending = getattr(workload, "pending", ())
    return [s for s in workload.space[1:] if s not in workload.tried and s not in pending]


class RandomSearch:
    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def propose(self, workload, n: int) -> list:
        pool = untried(workload)
        return self.rng.sample(pool, min(n, len(pool)))

    def observe(self, workload, measurements: list) -> None:
        pass


class EvolutionarySearch:
    ELITES = 4        # parents: the workload's fastest schedules
    # untried candidates ranked alongside the children: every one in today's spaces (a
    # conv's has up to 700; featurizing them takes well under 0.1 s against seconds a batch).
    # A sample of 64 ranked a tenth of a conv's space.
    SAMPLE = 4096
    EXPLORE = 0.25    # share of each batch picked at random

    def __init__(self, seed: int = 0, model: CostModel | None = None):
        self.rng = random.Random(seed)
        self.model = model or CostModel(seed)

    def propose(self, workload, n: int) -> list:
        pool = untried(workload)
        node = workload.nodes[0]
        if n <= 0 or not pool:
            return []
        if len(pool) <= n:
            return pool
        if not self.model.trained(node, workload.space[0]):
            return self.rng.sample(pool, n)
        ranked = self._ranked(workload, pool)
        explore = int(n * self.EXPLORE) if n > 2 else 0
        chosen = ranked[:n - explore]
        taken = set(chosen)
        rest = [s for s in pool if s not in taken]
        return chosen + self.rng.sample(rest, min(explore, len(rest)))

    def _ranked(self, workload, pool: list) -> list:
        left = set(pool)
        children = {c for p in self._elites(workload) for c in neighbours(p, pool, within=2)}
        sample = self.rng.sample(pool, min(self.SAMPLE, len(pool)))
        population = list(dict.fromkeys([c for c in pool if c in children] + sample))
        scores = self.model.predict(workload.nodes[0], population)
        return [population[i] for i in np.argsort(scores, kind="stable") if population[i] in left]

    def _elites(self, workload) -> list:
        ok = sorted((m for m in workload.tried.values() if m.ok), key=lambda m: m.seconds)
        return [m.schedule for m in ok[:self.ELITES]]

    def observe(self, workload, measurements: list) -> None:
        default = workload.default_seconds
        if not default:
            return
        for m in measurements:
            self.model.add(workload.nodes[0], m.schedule, m.seconds if m.ok else None, default)


def make_strategy() -> Strategy:
    return EvolutionarySearch()
