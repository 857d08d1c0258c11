"""Whole-model variants judged over paired rounds (compiler_core/tune/paired.py)."""
import pytest

from compiler_core.tune.paired import NOT_FASTER, more_rounds_could_decide, pooled, why_not_faster
from compiler_core.tune.runner import Measurement

REFERENCE = [1.0, 1.3, 1.0, 1.6, 1.0, 1.0, 1.2, 1.0, 1.0]  # a machine slow now and then


def timed(rounds) -> Measurement:
    return Measurement("variant", sorted(rounds)[len(rounds) // 2], rounds=list(rounds))


def test_a_variant_faster_in_every_round_wins_through_the_machines_slow_stretches():
    faster = timed([0.97 * t for t in REFERENCE])
    assert why_not_faster(faster, timed(REFERENCE), 0.02) is None


def test_a_gain_below_the_one_asked_for_does_not_win():
    why = why_not_faster(timed([0.99 * t for t in REFERENCE]), timed(REFERENCE), 0.02)
    assert why.startswith(NOT_FASTER) and "0.990" in why


def test_a_median_gain_from_a_few_lucky_rounds_does_not_win():
    # faster by 10% in 5 rounds, slower by 5% in 4: the median saves 10%, the rounds disagree
    lucky = timed([t * (0.9 if k % 2 == 0 else 1.05) for k, t in enumerate(REFERENCE)])
    why = why_not_faster(lucky, timed(REFERENCE), 0.02)
    assert why.startswith(NOT_FASTER) and "faster in 5 (needs 0.980 or less and 7 rounds)" in why
    assert why_not_faster(timed(REFERENCE), timed(REFERENCE), 0.0).startswith(NOT_FASTER)


def test_measurements_without_rounds_count_as_one_round():
    assert why_not_faster(Measurement("a", 0.9), Measurement("b", 1.0), 0.02) is None
    assert why_not_faster(Measurement("a", 0.99), Measurement("b", 1.0), 0.02) is not None


def test_more_rounds_are_asked_for_only_where_the_median_wins_and_half_the_rounds_do():
    lucky = timed([t * (0.9 if k % 2 == 0 else 1.05) for k, t in enumerate(REFERENCE)])
    assert more_rounds_could_decide(lucky, timed(REFERENCE), 0.02)  # 5 of 9 at 0.9
    few = timed([t * (0.9 if k < 4 else 1.05) for k, t in enumerate(REFERENCE)])
    assert not more_rounds_could_decide(few, timed(REFERENCE), 0.02)  # 4 of 9
    faster = timed([0.97 * t for t in REFERENCE])
    assert not more_rounds_could_decide(faster, timed(REFERENCE), 0.02)  # already won
    assert not more_rounds_could_decide(timed(REFERENCE), timed(REFERENCE), 0.0)


def test_pooled_measurements_hold_both_rounds_and_the_kernels_mean_times():
    first = Measurement("v", 1.0, rounds=[1.0, 1.2, 0.9], parts=[[["a"], 0.2], [["b"], 0.4]])
    again = Measurement("v", 2.0, rounds=[2.0, 1.1, 3.0], parts=[[["a"], 0.4], [["b"], 0.6]])
    both = pooled(first, again)
    assert both.rounds == [1.0, 1.2, 0.9, 2.0, 1.1, 3.0] and both.seconds == 1.15
    assert [names for names, _ in both.parts] == [["a"], ["b"]]
    assert [t for _, t in both.parts] == pytest.approx([0.3, 0.5])
