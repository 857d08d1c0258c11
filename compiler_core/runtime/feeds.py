"""Inputs for benchmarks: read from .npz, or made up deterministically from the model's specs."""
from __future__ import annotations

import numpy as np


def random_feeds(specs: list[dict], seed: int = 0) -> dict[str, np.ndarray]:
    """Values in ranges every op accepts: small non-negative ints (they may be indices), [0, 1) floats."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in specs:
        dtype, shape = np.dtype(s["dtype"]), tuple(s["shape"])
        if dtype == np.bool_:
            feeds[s["name"]] = rng.integers(0, 2, shape).astype(np.bool_)
        elif dtype.kind in "iu":
            feeds[s["name"]] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[s["name"]] = rng.random(shape).astype(dtype)
    return feeds


def load_feeds(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
