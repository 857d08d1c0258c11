"""Static memory planning: every intermediate tensor gets an offset in one arena.

Buffers are reused by liveness (first fit over a free list, 64-byte aligned). View ops
(Reshape and friends) share their input's storage instead of copying. A Concat whose
inputs are whole slices of its output is assembled in place: each input is a view at its
offset in the output, written there by its producer, and the Concat has no kernel (a copy
that, at two threads, also pulls half of every input from the other core's cache). Likewise
a Slice that picks one contiguous range of its input (Split's channel groups at batch 1, as
in YOLO's C2f blocks) is a view at that range's offset. Graph inputs, graph outputs and
constants live outside the arena.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import Graph, Node, Value
from ..ir.loops import row_major_strides

ALIGN = 64
VIEW_OPS = {"Reshape"}


@dataclass
class Location:
    kind: str  # input | output | const | arena
    index: int  # input/output position, or byte offset in weights/arena


@dataclass
class MemoryPlan:
    locations: dict[Value, Location] = field(default_factory=dict)
    # view -> (the value whose storage it shares, its byte offset in that storage)
    views: dict[Value, tuple[Value, int]] = field(default_factory=dict)
    elided: set[Value] = field(default_factory=set)  # outputs of nodes that need no kernel
    arena_size: int = 0
    weights: list[tuple[Value, int]] = field(default_factory=list)
    weights_size: int = 0

    def storage(self, v: Value) -> Value:
        return self.storage_offset(v)[0]

    def storage_offset(self, v: Value) -> tuple[Value, int]:
        """The value owning v's storage, and v's byte offset in it."""
        offset = 0
        while v in self.views:
            v, step = self.views[v]
            offset += step
        return v, offset


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def is_view(node: Node, pinned: set[Value]) -> bool:
    """A view shares storage, unless that would make a pinned buffer alias another."""
    return (node.op in VIEW_OPS and not node.guards and node.inputs[0] is not None
            and node.outputs[0] not in pinned)


def concat_slices(node: Node, plan: MemoryPlan, pinned: set[Value]) -> list[tuple[Value, int]] | None:
    """Where a Concat's inputs go in its output, as (value, byte offset), when it can be
    assembled in place: nothing but extent 1 before the axis (each input is one contiguous
    slice), slices 64-byte aligned, and every input a distinct value of the arena. An input
    that is already a view goes in with the value it views, which must then be exactly
    tiled by consecutive inputs (YOLO's C2f concatenates both halves of a Split)."""
    out, ins = node.outputs[0], node.inputs
    if (node.op != "Concat" or node.guards or out in pinned
            or math.prod(out.shape[:node.attrs["axis"]]) != 1 or len(set(ins)) != len(ins)):
        return None
    placed, at, k = [], 0, 0
    while k < len(ins):
        if ins[k] is None or at % ALIGN:
            return None
        owner, count = _tiled_owner(ins, k, plan)
        if count == 0 or owner in pinned or owner in (v for v, _ in placed):
            return None
        placed.append((owner, at))
        at, k = at + owner.nbytes, k + count
    return placed


def _tiled_owner(ins: list, k: int, plan: MemoryPlan) -> tuple[Value, int]:
    """The value owning ins[k]'s storage, and how many inputs from k on tile it in order
    (0 when they do not cover it whole)."""
    owner, covered, j = plan.storage(ins[k]), 0, k
    while j < len(ins) and ins[j] is not None and plan.storage_offset(ins[j]) == (owner, covered):
        covered += ins[j].nbytes
        j += 1
        if covered == owner.nbytes:
            return owner, j - k
    return owner, 0


def slice_offset(node: Node, plan: MemoryPlan, pinned: set[Value]) -> int | None:
    """The byte offset of a Slice's output in its input, when the output is one contiguous,
    64-byte-aligned range of an arena value: unit steps, and extent 1 before the last axis
    that is cut (the ones after it are whole)."""
    if node.op != "Slice":
        return None
    x, y = node.inputs[0], node.outputs[0]
    if (node.guards or y in pinned or plan.storage(x) in pinned
            or any(s != 1 for s in node.attrs["steps"])):
        return None
    last_cut = max((d for d, (m, n) in enumerate(zip(y.shape, x.shape)) if m != n), default=0)
    if math.prod(y.shape[:last_cut]) != 1:
        return None
    first = sum(a * s for a, s in zip(node.attrs["starts"], row_major_strides(x.shape)))
    offset = first * y.dtype.itemsize
    return None if offset % ALIGN else offset


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
            plan.views[n.outputs[0]] = (n.inputs[0], 0)
            plan.elided.add(n.outputs[0])
        elif (placed := concat_slices(n, plan, pinned)) is not None:
            plan.views.update((v, (n.outputs[0], at)) for v, at in placed)
            plan.elided.add(n.outputs[0])
        elif (offset := slice_offset(n, plan, pinned)) is not None:
            plan.views[n.outputs[0]] = (n.inputs[0], offset)
            plan.elided.add(n.outputs[0])
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
    for v in plan.views:
        owner, offset = plan.storage_offset(v)
        root = plan.locations[owner]  # offsets are only ever into the arena
        plan.locations[v] = Location(root.kind, root.index + offset)
