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
machine wins nearly every round.
"""
from __future__ import annotations

import math

import numpy as np

from .runner import Measurement

WIN_SHARE = 0.75
NOT_FASTER = "not clearly faster"  # the start of a rejection's reason


def why_not_faster(candidate: Measurement, reference: Measurement, min_gain: float) -> str | None:
    """None when `candidate` beats `reference` by `min_gain` over their paired rounds, else
    the reason it does not (a measurement without rounds counts as one round)."""
    mine, theirs = _rounds(candidate), _rounds(reference)
    ratios = np.array(mine[:len(theirs)]) / np.array(theirs[:len(mine)])
    wins, needed = int((ratios < 1).sum()), math.ceil(WIN_SHARE * len(ratios))
    median = float(np.median(ratios))
    if median <= 1 - min_gain and wins >= needed:
        return None
    return (f"{NOT_FASTER}: {median:.3f} of the reference's time over {len(ratios)} rounds, "
            f"faster in {wins} (needs {1 - min_gain:.3f} or less and {needed} rounds)")


def _rounds(m: Measurement) -> list[float]:
    return list(m.rounds) if m.rounds else [m.seconds]
