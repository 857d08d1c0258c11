"""runtime/benchmark.interleave: rounds of turns, each runner timed on its own calls."""
from __future__ import annotations

import time

from compiler_core.runtime import benchmark
from compiler_core.runtime.benchmark import interleave


def sleeper(seconds: float, log: list, name: str):
    def call():
        log.append(name)
        time.sleep(seconds)
    return call


def disturbed_after_others(log: list, at_first: bool = True, slow=lambda since: since <= 3):
    """Runner "a": 10 ms for the calls that `slow` picks by how many calls ago another runner
    ran (another runtime's threads still spinning), by default its first 3 after another's,
    and before any other ran if `at_first`; else 1 ms."""
    def call():
        others = [k for k, n in enumerate(log) if n != "a"]
        since_other = len(log) - others[-1] if others else (0 if at_first else 99)
        log.append("a")
        time.sleep(0.010 if slow(since_other) else 0.001)
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


def test_settle_starts_each_turn_with_an_untimed_call(monkeypatch):
    # every call takes the same time here: a sleep that overslept by 15 % would rightly
    # earn a second untimed call (measured once on a loaded CI machine)
    monkeypatch.setattr(benchmark, "_call_ms", lambda fn: fn() or 1.0)
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
    # a call slower than usual (a sleep overslept) starts the 10 ms over
    assert log[0] == "a" and log[-1] == "b" and 5 <= log.count("a") <= 30


def test_settle_waits_until_a_runner_is_as_fast_as_it_has_been():
    """A runner disturbed for its first 3 calls after the other one ran (another runtime's
    threads still spinning) is timed only once it runs at its usual speed again."""
    log = []
    samples = interleave({"a": disturbed_after_others(log, at_first=False),
                          "b": sleeper(0.001, log, "b")},
                         warmup=1, min_runs=3, max_seconds=0.0, settle=True, settle_ms=1.0)
    assert max(samples["a"]) < 5.0
    turns = [k for k in range(1, len(log)) if log[k - 1:k + 1] == ["b", "a"]]
    assert turns and all(log[k:k + 4] == ["a"] * 4 for k in turns)


def test_settle_learns_a_runners_speed_when_it_always_follows_a_disturber():
    """Every warm-up call of "a" comes right after "b", whose threads slow "a"'s next 3
    calls: unless "a" is first timed alone for a while, its slow calls pass for settled."""
    log = []
    samples = interleave({"b": sleeper(0.001, log, "b"), "a": disturbed_after_others(log)},
                         warmup=2, min_runs=3, max_seconds=0.0, settle=True, settle_ms=1.0)
    assert max(samples["a"]) < 5.0


def test_settle_waits_out_a_disturbance_that_comes_and_goes():
    """After another runner, every other call of "a" is slow for a while (another runtime's
    threads spin on and off): one fast call does not end the settling, settle_ms of them do."""
    log = []
    a = disturbed_after_others(log, at_first=False, slow=lambda since: since <= 8 and since % 2)
    samples = interleave({"b": sleeper(0.001, log, "b"), "a": a}, warmup=1, min_runs=3,
                         max_seconds=0.0, settle=True, settle_ms=3.0)
    assert max(samples["a"]) < 5.0
