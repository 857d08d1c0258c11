"""The graph IR: a Graph of Nodes that read and write Values.

Nodes keep ONNX op names with attributes normalised by the frontend (one canonical form per
op, whatever the opset), so passes and kernels never look at opset versions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    const: np.ndarray | None = None

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        self.dtype = np.dtype(self.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self):
        kind = "const " if self.is_const else ""
        return f"<{kind}{self.name}: {self.dtype}{list(self.shape)}>"


@dataclass(frozen=True)
class Guard:
    """Run a node only when `cond` (a bool Value of one element) equals `when`."""
    cond: Value
    when: bool


@dataclass(eq=False)
class Node:
    op: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    guards: tuple[Guard, ...] = ()
    schedule: Any = None  # the kernel's knobs (kernels/schedule.py); None: not chosen yet
    # the ONNX nodes this node computes when a pass fused several into it (see `covering`)
    sources: tuple[str, ...] = ()

    @property
    def onnx_nodes(self) -> tuple[str, ...]:
        return self.sources or (self.name,)

    def __repr__(self):
        ins = ", ".join(v.name if v is not None else "_" for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"{outs} = {self.op}({ins}) {self.attrs or ''}"


def covering(*nodes: Node) -> tuple[str, ...]:
    """The ONNX nodes that a node fused from `nodes` computes: each once, in order. Passes
    that merge nodes set the result's `sources` to this, so per-kernel reports (meta.json)
    can name the ONNX nodes behind every kernel."""
    return tuple(dict.fromkeys(name for n in nodes for name in n.onnx_nodes))


@dataclass(eq=False)
class Graph:
    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    name: str = "model"
    opset: int = 0
    onnx_ops: dict[str, str] = field(default_factory=dict)  # ONNX node name -> op type, as imported

    def consumers(self) -> dict[Value, list[Node]]:
        uses: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    uses.setdefault(v, []).append(n)
            for g in n.guards:
                uses.setdefault(g.cond, []).append(n)
        return uses

    def values(self) -> list[Value]:
        seen: dict[Value, None] = dict.fromkeys(self.inputs)
        for n in self.nodes:
            seen.update(dict.fromkeys(v for v in n.inputs if v is not None))
            seen.update(dict.fromkeys(n.outputs))
        seen.update(dict.fromkeys(self.outputs))
        return list(seen)

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op] = hist.get(n.op, 0) + 1
        return dict(sorted(hist.items()))

    def dump(self) -> str:
        lines = [f"graph {self.name}({', '.join(map(repr, self.inputs))})"]
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append(f"  return {', '.join(v.name for v in self.outputs)}")
        return "\n".join(lines)
