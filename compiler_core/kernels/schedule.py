"""Schedules: a kernel's knobs, as a value its graph node carries.

A kernel family declares its knobs as a frozen dataclass (tile sizes, register block, loop
order, parallel split, algorithm...) and registers two functions for its ops: the default
schedule for a node on a target (today's heuristics) and the search space the autotuner
explores. passes/assign_schedules.py puts `node.schedule` on every node whose op has one
(tuning records may replace it there); weight packing and the lowering read the node's
schedule, never module constants, and `driver.kernel_key` includes it.
"""
from __future__ import annotations

from typing import Any, Callable

from ..codegen.target_machine import MachineSpec
from ..ir import Node

Rule = Callable[[Node, MachineSpec], Any]
DEFAULTS: dict[str, Rule] = {}
SPACES: dict[str, Callable[[Node, MachineSpec], list]] = {}


def default_rule(*ops: str):
    """Register `fn(node, spec) -> schedule` as the default for `ops`."""
    def register(fn: Rule) -> Rule:
        for op in ops:
            DEFAULTS[op] = fn
        return fn
    return register


def search_space(*ops: str):
    """Register `fn(node, spec) -> [schedule, ...]`, the candidates the autotuner may try."""
    def register(fn):
        for op in ops:
            SPACES[op] = fn
        return fn
    return register


def default_schedule(node: Node, spec: MachineSpec):
    rule = DEFAULTS.get(node.op)
    return rule(node, spec) if rule is not None else None


def candidates(node: Node, spec: MachineSpec) -> list:
    space = SPACES.get(node.op)
    return space(node, spec) if space is not None else []
