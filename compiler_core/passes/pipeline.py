"""Named pass pipelines, one per opt level."""
from __future__ import annotations

from typing import Callable

from ..codegen.target_machine import MachineSpec, host_spec
from ..ir import Graph
from .assign_schedules import assign_schedules_for
from .conv_panels import add_conv_panels
from .blocked_layout import choose_blocked_layout_for, use_blocked_layout_for
from .cse import eliminate_common_subexpressions
from .dense_weights import use_packed_gemm
from .dce import eliminate_dead_code
from .defer_softmax_division import defer_softmax_division
from .finalize_outputs import finalize_outputs
from .fold_channel_shuffle import fold_channel_shuffle
from .fold_batchnorm import fold_batchnorm
from .fuse_activation import fuse_activation, fuse_epilogue
from .fuse_attention import fuse_attention
from .fuse_elementwise import fuse_elementwise
from .fuse_softmax import fuse_softmax
from .pack_weights import pack_weights
from .sparse_weights import use_sparse_weights_for
from .weight_precision import plain_products, store_weights_as
from .winograd_convs import use_winograd

Pass = Callable[[Graph], Graph]

# Entries are passes, or factories `(spec) -> pass` for the passes that follow the target
# (marked by the `_for` suffix of their names).
PIPELINES: dict[str, list] = {
    "O0": [finalize_outputs, eliminate_dead_code, assign_schedules_for],
    "O1": [eliminate_dead_code, fold_batchnorm, use_packed_gemm, fuse_activation,
           eliminate_common_subexpressions, fold_channel_shuffle, use_sparse_weights_for,
           finalize_outputs, eliminate_dead_code, choose_blocked_layout_for,
           assign_schedules_for, use_winograd, use_blocked_layout_for, pack_weights,
           add_conv_panels],
}
PIPELINES["O2"] = PIPELINES["O1"] + [fuse_elementwise, fuse_epilogue, fuse_softmax,
                                     defer_softmax_division, fuse_attention]
PIPELINES["O3"] = PIPELINES["O2"]


def get_pipeline(name: str, spec: MachineSpec | None = None) -> list[Pass]:
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; valid: {', '.join(sorted(PIPELINES))}")
    spec = spec or host_spec()
    return [p(spec) if p.__name__.endswith("_for") else p for p in PIPELINES[name]]


def split_at_schedules(opt_level: int, spec: MachineSpec | None = None,
                       weight_dtype: str = "float32") -> tuple[list[Pass], list[Pass]]:
    """(passes up to and including assign_schedules, the passes after it): the autotuner
    picks schedules in between, and finishes candidate nodes with the second list. First
    in it: int8 weights keep PackedGemm off Strassen's products; last (it converts the
    packed layouts): the weights stored as `weight_dtype` (passes/weight_precision.py)."""
    spec = spec or host_spec()
    passes = get_pipeline(f"O{min(max(opt_level, 0), 3)}", spec) + [store_weights_as(weight_dtype)]
    cut = next(i for i, p in enumerate(passes) if p.__name__ == "assign_schedules") + 1
    return passes[:cut], [plain_products(weight_dtype, spec)] + passes[cut:]


def run_pipeline(graph: Graph, opt_level: int, spec: MachineSpec | None = None,
                 weight_dtype: str = "float32", choose_schedules: Pass | None = None) -> Graph:
    """`choose_schedules` (the autotuner, or tuning records) runs right after the default
    schedules are assigned, before the passes that follow them (weight packing)."""
    before, after = split_at_schedules(opt_level, spec, weight_dtype)
    for p in before + ([choose_schedules] if choose_schedules else []) + after:
        graph = p(graph)
    return graph
