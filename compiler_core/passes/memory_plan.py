"""Static memory planning: every intermediate tensor gets an offset in one arena.

Buffers are reused by liveness (first fit over a free list, 64-byte aligned). View ops
(Reshape and friends) share their input's storage instead of copying. Graph inputs,
graph outputs and constants live outside the arena.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node, Value

ALIGN = 64
VIEW_OPS = {"Reshape"}


@dataclass
class Location:
    kind: str  # input | output | const | arena
    index: int  # input/output position, or byte offset in weights/arena


@dataclass
class MemoryPlan:
    locations: dict[Value, Location] = field(default_factory=dict)
    views: dict[Value, Value] = field(default_factory=dict)  # view -> storage owner
    arena_size: int = 0
    weights: list[tuple[Value, int]] = field(default_factory=list)
    weights_size: int = 0

    def storage(self, v: Value) -> Value:
        while v in self.views:
            v = self.views[v]
        return v


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def is_view(node: Node, pinned: set[Value]) -> bool:
    """A view shares storage, unless that would make a pinned buffer alias another."""
    return (node.op in VIEW_OPS and not node.guards and node.inputs[0] is not None
            and node.outputs[0] not in pinned)


class _Arena:
    def __init__(self):
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted by offset
        self.top = 0

    def alloc(self, size: int) -> int:
        size = _align(max(size, 1))
        for k, (off, sz) in enumerate(self.free):
            if sz >= size:
                self.free[k:k + 1] = [(off + size, sz - size)] if sz > size else []
                return off
        off, self.top = self.top, self.top + size
        return off

    def release(self, off: int, size: int) -> None:
        self.free.append((off, _align(max(size, 1))))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for o, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.free = merged


def plan_memory(graph: Graph) -> MemoryPlan:
    plan = MemoryPlan()
    for k, v in enumerate(graph.inputs):
        plan.locations[v] = Location("input", k)
    for k, v in enumerate(graph.outputs):
        if v not in plan.locations:
            plan.locations[v] = Location("output", k)
    for v in graph.values():
        if v.is_const and v not in plan.locations:
            plan.locations[v] = Location("const", plan.weights_size)
            plan.weights.append((v, plan.weights_size))
            plan.weights_size += _align(v.nbytes)
    pinned = set(plan.locations)
    for n in graph.nodes:
        if is_view(n, pinned):
            plan.views[n.outputs[0]] = n.inputs[0]
    _assign_arena(graph, plan)
    return plan


def _last_uses(graph: Graph, plan: MemoryPlan) -> dict[Value, int]:
    last: dict[Value, int] = {}
    for step, n in enumerate(graph.nodes):
        for v in [*n.inputs, *(g.cond for g in n.guards), *n.outputs]:
            if v is not None:
                last[plan.storage(v)] = step
    return last


def _assign_arena(graph: Graph, plan: MemoryPlan) -> None:
    arena, last = _Arena(), _last_uses(graph, plan)
    live: dict[Value, int] = {}
    for step, n in enumerate(graph.nodes):
        for v in n.outputs:
            owner = plan.storage(v)
            if owner not in plan.locations:
                plan.locations[owner] = Location("arena", arena.alloc(owner.nbytes))
                live[owner] = step
        for owner in [o for o in live if last.get(o, -1) <= step]:
            arena.release(plan.locations[owner].index, owner.nbytes)
            del live[owner]
    plan.arena_size = arena.top
    for v, owner in plan.views.items():
        plan.locations[v] = plan.locations[owner]
