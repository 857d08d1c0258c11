"""The generated test and benchmark models: one name -> a seeded generator script, the input
shapes to compile it at, and realistic inputs.

    from tests.models.catalog import model_path, input_shapes, feeds, MODELS
    path = model_path("yolo_320")          # generates var/models/yolo_detector-size320-<hash>.onnx
                                           # on first use
Big weight files are never committed: the scripts are. A model file is cached under
var/models/ keyed on the sha256 of its script, the shared builder and the parameters, so
changing a script regenerates its models and stale versions are removed.
"""
from __future__ import annotations

import hashlib
import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
CACHE = HERE.parents[1] / "var" / "models"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    script: str                    # module in tests/models/ with build(**params) -> ModelProto
    shapes: dict                   # input name -> shape to compile and run at
    make_feeds: Callable[[np.random.Generator, dict], dict]
    params: dict = field(default_factory=dict)
    slow: bool = False             # too slow for `make test`: in `make test-slow`

    @property
    def stem(self) -> str:
        return "-".join([self.script] + [f"{k}{v}" for k, v in sorted(self.params.items())])


def _image(rng, shapes):
    return {name: rng.random(shape, np.float32) for name, shape in shapes.items()}


def _normalized_image(rng, shapes):
    return {name: rng.standard_normal(shape, np.float32) for name, shape in shapes.items()}


def _tokens(rng, shapes):
    """Random token ids; the last eighth of the sequence is padding, masked out."""
    batch, seq = shapes["input_ids"]
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 8:] = 0
    return {"input_ids": rng.integers(0, 30522, (batch, seq), np.int64), "attention_mask": mask}


def _sampling_state(rng, shapes):
    return {"x": rng.standard_normal(shapes["x"], np.float32),
            "h": rng.uniform(-0.5, 0.5, shapes["h"]).astype(np.float32)}


_STEP = {"x": (1, 64), "h": (1, 384)}
MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    # 53 s of `make test` on Zen 1 (the suite took 20:36 there): with the 640 in test-slow
    ModelSpec("yolo_320", "yolo_detector", {"images": (1, 3, 320, 320)}, _image, {"size": 320},
              slow=True),
    ModelSpec("yolo_640", "yolo_detector", {"images": (1, 3, 640, 640)}, _image, {"size": 640},
              slow=True),
    ModelSpec("mobilenet_v3", "mobilenet_v3", {"input": (1, 3, 224, 224)}, _normalized_image),
    ModelSpec("bert_128", "bert_encoder",
              {"input_ids": (1, 128), "attention_mask": (1, 128)}, _tokens),
    ModelSpec("bert_384", "bert_encoder",
              {"input_ids": (1, 384), "attention_mask": (1, 384)}, _tokens, slow=True),
    ModelSpec("wavernn", "wavernn_step", _STEP, _sampling_state),
    ModelSpec("wavernn_sparse80", "wavernn_step", _STEP, _sampling_state, {"density": 0.2}),
]}


def spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def input_shapes(name: str) -> dict:
    return dict(spec(name).shapes)


def feeds(name: str, seed: int = 0) -> dict:
    s = spec(name)
    return s.make_feeds(np.random.default_rng(seed), s.shapes)


def model_path(name: str) -> Path:
    """The model file, generated now if its script changed since it was last written."""
    s = spec(name)
    path = CACHE / f"{s.stem}-{_source_hash(s)}.onnx"
    if not path.exists():
        _generate(s, path)
    return path


def _source_hash(s: ModelSpec) -> str:
    h = hashlib.sha256()
    for module in (s.script, "graph_builder"):
        h.update((HERE / f"{module}.py").read_bytes())
    h.update(repr(sorted(s.params.items())).encode())
    return h.hexdigest()[:12]


def _generate(s: ModelSpec, path: Path) -> None:
    model = importlib.import_module(f"{__package__}.{s.script}").build(**s.params)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{s.stem}-{'?' * 12}.onnx"):
        stale.unlink(missing_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # concurrent test workers never see half a file
    onnx.save(model, tmp)
    tmp.replace(path)
