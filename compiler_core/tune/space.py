"""Search space per node: the candidates its kernel family offers (kernels/schedule.SPACES),
and the neighbours of a schedule (one knob changed) for the evolutionary search."""
from __future__ import annotations

import dataclasses

from ..codegen.target_machine import MachineSpec
from ..ir import Node
from ..kernels.schedule import SPACES, candidates


def tunable(node: Node) -> bool:
    return node.op in SPACES and node.schedule is not None


def space_of(node: Node, spec: MachineSpec) -> list:
    """The candidates, the default (the node's current schedule) first and once."""
    rest = [c for c in dict.fromkeys(candidates(node, spec)) if c != node.schedule]
    return [node.schedule] + rest


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
