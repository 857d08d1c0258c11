"""The learned cost model: gradient-boosted trees (LightGBM) over tune/features.py, trained
again as measurements arrive, predicting log(time / the default schedule's time).

Relative times let one model per op and schedule class learn from every workload of that
op (and from records of earlier compiles): what a knob does to a kernel carries over
between sizes far better than absolute times. Failed candidates train as much slower than
the default (FAILURE_PENALTY) so the search steers away from what crashes or hangs.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict

import numpy as np

from .features import features

MIN_SAMPLES = 12          # below this many measurements of an op, rank at random
FAILURE_PENALTY = 2.0     # log-ratio a failed candidate trains as (7x slower)
ROUNDS = 80
PARAMS = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15,
          "min_data_in_leaf": 3, "bagging_fraction": 0.9, "bagging_freq": 1,
          "num_threads": 1, "verbose": -1}


def model_key(node, schedule) -> str:
    """One model per op and schedule class, whose knobs fix the feature layout: an op may
    have several (DepthwiseConv's blocked and plain kernels, 2 and 6 knobs), and one model
    fed both failed mid-tune (MobileNetV3 at 2 threads: LightGBM refused 8 features from a
    model trained on 4)."""
    return f"{node.op}/{type(schedule).__name__}"


class CostModel:
    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rows: dict[str, list[tuple[list[float], float]]] = {}
        self.models: dict[str, object] = {}
        self._stale: set[str] = set()

    def add(self, node, schedule, seconds: float | None, default_seconds: float) -> None:
        target = (math.log(seconds / default_seconds) if seconds else FAILURE_PENALTY)
        key = model_key(node, schedule)
        self.rows.setdefault(key, []).append((features(node, schedule), target))
        self._stale.add(key)

    def trained(self, node, schedule) -> bool:
        """Whether the model that ranks `schedule` of `node` has enough measurements."""
        key = model_key(node, schedule)
        self._fit(key)
        return key in self.models

    def predict(self, node, schedules: list) -> np.ndarray:
        """Predicted log time ratios (lower is faster); zeros where there is no model yet."""
        scores = np.zeros(len(schedules))
        by_key = defaultdict(list)
        for i, s in enumerate(schedules):
            by_key[model_key(node, s)].append(i)
        for key, picked in by_key.items():
            if self.trained(node, schedules[picked[0]]):
                x = np.array([features(node, schedules[i]) for i in picked])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # lightgbm's feature-name chatter
                    scores[picked] = self.models[key].predict(x)
        return scores

    def _fit(self, key: str) -> None:
        rows = self.rows.get(key, [])
        if key not in self._stale or len(rows) < MIN_SAMPLES:
            return
        import lightgbm
        x = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = lightgbm.Dataset(x, y, params={"min_data_in_bin": 1, "verbose": -1})
            self.models[key] = lightgbm.train(PARAMS | {"seed": self.seed}, data,
                                              num_boost_round=ROUNDS)
        self._stale.discard(key)
