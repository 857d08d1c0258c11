"""runtime/benchmark.interleave: rounds of turns, each runner timed on its own calls."""
from __future__ import annotations

import time

from compiler_core.runtime.benchmark import interleave


def sleeper(seconds: float, log: list, name: str):
    def call():
        log.append(name)
        time.sleep(seconds)
    return call


def test_one_call_per_turn_alternates_runners():
    log = []
    samples = interleave({"a": sleeper(0.001, log, "a"), "b": sleeper(0.003, log, "b")},
                         warmup=1, min_runs=3, max_seconds=0.0)
    assert log == ["a", "b"] * 4
    assert len(samples["a"]) == len(samples["b"]) == 3
    assert sorted(samples["b"])[1] > sorted(samples["a"])[1] >= 1.0  # medians


def test_turns_of_block_ms_repeat_fast_runners():
    log = []
    samples = interleave({"fast": sleeper(0.001, log, "fast"), "slow": sleeper(0.02, log, "slow")},
                         warmup=2, min_runs=2, max_seconds=0.0, block_ms=10.0)
    assert len(samples["slow"]) == 2 and 2 < len(samples["fast"]) <= 20
    turns = [name for k, name in enumerate(log) if k == 0 or log[k - 1] != name]
    assert turns == ["fast", "slow"] * 4  # two warmup rounds, then two rounds


def test_settle_starts_each_turn_with_an_untimed_call():
    log = []
    samples = interleave({"a": sleeper(0.001, log, "a"), "b": sleeper(0.001, log, "b")},
                         warmup=0, min_runs=2, max_seconds=0.0, settle=True)
    assert log == ["a", "a", "b", "b"] * 2
    assert len(samples["a"]) == len(samples["b"]) == 2


def test_settle_ms_keeps_calling_untimed_until_the_time_is_up():
    log = []
    samples = interleave({"a": sleeper(0.001, log, "a"), "b": sleeper(0.001, log, "b")},
                         warmup=0, min_runs=1, max_seconds=0.0, settle=True, settle_ms=10.0)
    assert len(samples["a"]) == len(samples["b"]) == 1
    assert log[0] == "a" and log[-1] == "b" and 5 <= log.count("a") <= 12
