"""Whole-model variants judged over paired rounds (the layout search, the model check).

The model child times its variants in rounds, each round one turn of every variant back to
back (tune/measure_model.py), so a stretch of a shared machine running slow falls on the
turns of the same round. A median of each variant's turns does not cancel that: on a
znver3 host whose neighbours slowed SqueezeNet from 8.5 to 13 ms for seconds at a time, two
builds of the same model came out up to 10% apart, and a 4-minute tuning whose model check
had seen the tuned model 0.8% faster (by medians) ran 0.95 of the untuned one's speed. So
a variant beats its reference only when the median of its per-round time ratios saves the
gain asked for *and* it was the faster in at least WIN_SHARE of the rounds: two equal
builds win 7 of 9 rounds by chance 9% of the time, and a variant even 1% faster on a quiet
machine wins nearly every round. A variant whose median saves the gain and that won at
least half the rounds, but not enough of them, may be timed again and judged on all its
rounds (more_rounds_could_decide, pooled): on AMD EPYC (LLVM: znver4) a tuned ShuffleNet
whose median was 0.954 of the default's won only 6 of 9 rounds, where other runs had kept
it at 0.937 and it ran 1.097x faster.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .runner import Measurement

WIN_SHARE = 0.75
NOT_FASTER = "not clearly faster"  # the start of a rejection's reason


def why_not_faster(candidate: Measurement, reference: Measurement, min_gain: float) -> str | None:
    """None when `candidate` beats `reference` by `min_gain` over their paired rounds, else
    the reason it does not (a measurement without rounds counts as one round)."""
    median, wins, rounds = _tally(candidate, reference)
    needed = math.ceil(WIN_SHARE * rounds)
    if median <= 1 - min_gain and wins >= needed:
        return None
    return (f"{NOT_FASTER}: {median:.3f} of the reference's time over {rounds} rounds, "
            f"faster in {wins} (needs {1 - min_gain:.3f} or less and {needed} rounds)")


def more_rounds_could_decide(candidate: Measurement, reference: Measurement,
                             min_gain: float) -> bool:
    """Whether the candidate's median saves `min_gain` and it won at least half the rounds,
    though not the WIN_SHARE that why_not_faster asks for."""
    median, wins, rounds = _tally(candidate, reference)
    return median <= 1 - min_gain and rounds <= 2 * wins and wins < math.ceil(WIN_SHARE * rounds)


def pooled(first: Measurement, again: Measurement) -> Measurement:
    """Two measurements of one whole-model variant as one: all their rounds, the median of
    those, and each kernel's time (`parts`, the same kernels in the same order) averaged."""
    rounds = rounds_of(first) + rounds_of(again)
    parts = [[names, (a + b) / 2] for (names, a), (_, b) in zip(first.parts, again.parts)] \
        if first.parts and again.parts else first.parts
    return replace(first, seconds=float(np.median(rounds)), rounds=rounds, parts=parts)


def _tally(candidate: Measurement, reference: Measurement) -> tuple[float, int, int]:
    """(median, wins, rounds) of the candidate's time over the reference's in each round
    they share: wins are the rounds where it was the faster."""
    mine, theirs = rounds_of(candidate), rounds_of(reference)
    ratios = np.array(mine[:len(theirs)]) / np.array(theirs[:len(mine)])
    return float(np.median(ratios)), int((ratios < 1).sum()), len(ratios)


def rounds_of(m: Measurement) -> list[float]:
    """A whole model's time in each round (one round when it was timed only once)."""
    return list(m.rounds) if m.rounds else [m.seconds]
