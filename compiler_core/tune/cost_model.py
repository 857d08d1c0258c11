"""The learned cost model: gradient-boosted trees (LightGBM) over tune/features.py, trained
again as measurements arrive, predicting log(time / the default schedule's time).

Relative times let one model per op learn from every workload of that op (and from records
of earlier compiles): what a knob does to a kernel carries over between sizes far better
than absolute times. Failed candidates train as much slower than the default
(FAILURE_PENALTY) so the search steers away from what crashes or hangs.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .features import features

MIN_SAMPLES = 12          # below this many measurements of an op, rank at random
FAILURE_PENALTY = 2.0     # log-ratio a failed candidate trains as (7x slower)
ROUNDS = 80
PARAMS = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15,
          "min_data_in_leaf": 3, "bagging_fraction": 0.9, "bagging_freq": 1,
          "num_threads": 1, "verbose": -1}


class CostModel:
    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rows: dict[str, list[tuple[list[float], float]]] = {}
        self.models: dict[str, object] = {}
        self._stale: set[str] = set()

    def add(self, node, schedule, seconds: float | None, default_seconds: float) -> None:
        target = (math.log(seconds / default_seconds) if seconds else FAILURE_PENALTY)
        self.rows.setdefault(node.op, []).append((features(node, schedule), target))
        self._stale.add(node.op)

    def trained(self, op: str) -> bool:
        self._fit(op)
        return op in self.models

    def predict(self, node, schedules: list) -> np.ndarray:
        """Predicted log time ratios (lower is faster); zeros before there is a model."""
        if not self.trained(node.op):
            return np.zeros(len(schedules))
        x = np.array([features(node, s) for s in schedules])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lightgbm's feature-name chatter
            return self.models[node.op].predict(x)

    def _fit(self, op: str) -> None:
        rows = self.rows.get(op, [])
        if op not in self._stale or len(rows) < MIN_SAMPLES:
            return
        import lightgbm
        x = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = lightgbm.Dataset(x, y, params={"min_data_in_bin": 1, "verbose": -1})
            self.models[op] = lightgbm.train(PARAMS | {"seed": self.seed}, data,
                                             num_boost_round=ROUNDS)
        self._stale.discard(op)
