"""Search space per node: the candidates its kernel family offers (kernels/schedule.SPACES),
and the neighbours of a schedule (one knob changed) for the evolutionary search."""
from __future__ import annotations

import dataclasses

from ..codegen.target_machine import MachineSpec
from ..ir import Node
from ..kernels.schedule import SPACES, candidates


def tunable(node: Node) -> bool:
    return node.op in SPACES and node.schedule is not None


def space_of(node: Node, spec: MachineSpec, threads: int = 1) -> list:
    """The candidates, the default (the node's current schedule) first and once; tuned for
    one thread, each keeps the default's parallel split (_split_as)."""
    found = candidates(node, spec)
    if threads == 1:
        found = [_split_as(c, node.schedule) for c in found]
    rest = [c for c in dict.fromkeys(found) if c != node.schedule]
    return [node.schedule] + rest


def _split_as(candidate, default):
    """The candidate with the default's `parallel`. On one thread a parallel loop is one
    call over its whole range, so in the model the choice makes no difference, while a
    kernel timed alone ran faster serial: MobileNetV3's 5x5 depthwise conv over 120
    channels at 28x28 (znver5, 1 thread) 40.5 us serial against 53 us parallel alone,
    52.2 against 52.1 in the model. The search chased that, and the model it tuned for one
    thread then kept those kernels on one core when run on more."""
    if type(candidate) is not type(default) or not hasattr(default, "parallel"):
        return candidate
    return dataclasses.replace(candidate, parallel=default.parallel)


def flat_knobs(schedule) -> tuple:
    """Every knob's value, nested schedules (a Conv's GEMM tiles) flattened."""
    out: list = []
    for f in dataclasses.fields(schedule):
        v = getattr(schedule, f.name)
        out.extend(flat_knobs(v) if dataclasses.is_dataclass(v) else [v])
    return tuple(out)


def knob_distance(a, b) -> int:
    """How many knobs two schedules of one family set differently."""
    return sum(x != y for x, y in zip(flat_knobs(a), flat_knobs(b)))


def neighbours(schedule, space: list, within: int = 1) -> list:
    return [c for c in space if 0 < knob_distance(c, schedule) <= within]
