"""The benchmark's models, in two groups that get a geometric mean each:

* "light CNNs": the nine full-size CNNs that ship with onnx (onnx/backend/test/data/light),
  on random [0, 1) inputs;
* "own models": the generated models of tests/models/catalog.py, on their realistic inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import onnx

from compiler_core.runtime.feeds import random_feeds
from tests.models import catalog

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"
GROUPS = ("light CNNs", "own models")


@dataclass(frozen=True)
class BenchModel:
    name: str
    group: str
    locate: Callable[[], Path]       # generated models are written on first use
    input_shapes: dict
    make_feeds: Callable[[], dict]


def _light(path: Path) -> BenchModel:
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    specs = [{"name": i.name, "dtype": "float32",
              "shape": [d.dim_value for d in i.type.tensor_type.shape.dim]}
             for i in graph.input if i.name not in initializers]
    return BenchModel(path.stem.removeprefix("light_"), GROUPS[0], lambda: path, {},
                      lambda: random_feeds(specs))


def _own(name: str) -> BenchModel:
    return BenchModel(name, GROUPS[1], lambda: catalog.model_path(name),
                      catalog.input_shapes(name), lambda: catalog.feeds(name))


def bench_models(name_filter: str = "") -> list[BenchModel]:
    """All models, or those whose name contains one of the comma-separated filter words."""
    words = [w for w in name_filter.split(",") if w] or [""]
    models = [_light(p) for p in sorted(LIGHT.glob("light_*.onnx"))]
    models += [_own(name) for name in catalog.MODELS]
    return [m for m in models if any(w in m.name for w in words)]
