"""Reading an artifact directory and checking feeds against it, for every way of running it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import RuntimeInputError


def read_meta(directory: Path) -> dict:
    meta_path = directory / "meta.json"
    if not meta_path.is_file() or not (directory / "model.so").is_file():
        raise FileNotFoundError(f"{directory} is not a Tensorforge artifact directory "
                                "(model.so and meta.json expected)")
    return json.loads(meta_path.read_text())


def check_feeds(specs: list[dict], feeds: dict) -> list[np.ndarray]:
    """The feeds as C-contiguous arrays in the artifact's input order, or a clear error."""
    names = [s["name"] for s in specs]
    missing = [n for n in names if n not in feeds]
    extra = [n for n in feeds if n not in names]
    if missing or extra:
        raise RuntimeInputError(f"inputs must be exactly {names}; missing {missing}, "
                                f"unexpected {extra}")
    return [_checked(spec, feeds[spec["name"]]) for spec in specs]


def _checked(spec: dict, value) -> np.ndarray:
    a = np.asarray(value)
    if list(a.shape) != spec["shape"]:
        raise RuntimeInputError(f"input {spec['name']!r} has shape {list(a.shape)}, the "
                                f"model was compiled for {spec['shape']}")
    if a.dtype != np.dtype(spec["dtype"]):
        raise RuntimeInputError(f"input {spec['name']!r} has dtype {a.dtype}, the model "
                                f"expects {spec['dtype']}")
    return np.ascontiguousarray(a)


def empty_outputs(specs: list[dict]) -> list[np.ndarray]:
    return [np.empty(s["shape"], np.dtype(s["dtype"])) for s in specs]


def model_error(meta: dict, code: int) -> RuntimeInputError:
    """The error for the model's nonzero return code (meta.json runtime_errors[code-1])."""
    messages = meta.get("runtime_errors", [])
    known = 0 < code <= len(messages)
    return RuntimeInputError(messages[code - 1] if known else f"model error code {code}")
