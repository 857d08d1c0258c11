"""Whole-model variants judged over paired rounds (compiler_core/tune/paired.py)."""
from compiler_core.tune.paired import NOT_FASTER, why_not_faster
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
