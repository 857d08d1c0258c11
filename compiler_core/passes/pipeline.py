"""Named pass pipelines, one per opt level."""
from __future__ import annotations

from typing import Callable

from ..ir import Graph
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .finalize_outputs import finalize_outputs
from .fold_batchnorm import fold_batchnorm
from .fuse_activation import fuse_activation
from .fuse_elementwise import fuse_elementwise
from .pack_weights import pack_weights

Pass = Callable[[Graph], Graph]

PIPELINES: dict[str, list[Pass]] = {
    "O0": [finalize_outputs, eliminate_dead_code],
    "O1": [eliminate_dead_code, fold_batchnorm, fuse_activation, eliminate_common_subexpressions,
           finalize_outputs, eliminate_dead_code, pack_weights],
}
PIPELINES["O2"] = PIPELINES["O1"] + [fuse_elementwise]
PIPELINES["O3"] = PIPELINES["O2"]


def get_pipeline(name: str) -> list[Pass]:
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; valid: {', '.join(sorted(PIPELINES))}")
    return PIPELINES[name]


def run_pipeline(graph: Graph, opt_level: int) -> Graph:
    for p in get_pipeline(f"O{min(max(opt_level, 0), 3)}"):
        graph = p(graph)
    return graph
