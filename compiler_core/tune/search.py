"""Search strategies: which untried candidates of a workload to measure next.

A strategy has `propose(workload, n) -> [schedule, ...]` (never one already tried) and
`observe(workload, measurements)`. RandomSearch samples the space uniformly.
"""
from __future__ import annotations

import random
from typing import Protocol


class Strategy(Protocol):
    def propose(self, workload, n: int) -> list: ...

    def observe(self, workload, measurements: list) -> None: ...


def untried(workload) -> list:
    return [s for s in workload.space if s not in workload.tried]


class RandomSearch:
    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def propose(self, workload, n: int) -> list:
        pool = [s for s in untried(workload) if s != workload.space[0]]
        return self.rng.sample(pool, min(n, len(pool)))

    def observe(self, workload, measurements: list) -> None:
        pass


def make_strategy() -> Strategy:
    return RandomSearch()
