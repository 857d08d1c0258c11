"""Which function lowers which graph op to a loop-nest Kernel.

Ops that index memory with run-time data (Gather's indices, RoiAlign's batch indices, ...)
register with `checks=`: before memory planning, `add_error_flags` gives each such node one
more output, a one-byte flag its kernel sets when an index is out of range (the access itself
is clamped, so memory stays safe), and the entry point returns the node's error code with the
message `checks` describes, as an untaken If branch does.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node, Value
from ..ir.loops import Buf, Kernel, KernelBuilder
from .schedule import default_schedule

Lowering = Callable[[Node, KernelBuilder, list, list], None]
LOWERINGS: dict[str, Lowering] = {}
CHECKS: dict[str, str] = {}  # op -> what its error flag means


def lowering(*ops: str, checks: str = ""):
    """Register `fn(node, kb, inputs, outputs)`; inputs are Bufs (None for absent inputs).
    With `checks`, the last output is the error flag (see the module docstring)."""
    def register(fn: Lowering) -> Lowering:
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"two lowerings for {op}")
            LOWERINGS[op] = fn
            if checks:
                CHECKS[op] = checks
        return fn
    return register


def add_error_flags(graph: Graph) -> Graph:
    """Checked ops get their error-flag output (after the graph passes, which never see it)."""
    for n in graph.nodes:
        if n.op in CHECKS and not has_error_flag(n):
            n.outputs.append(Value(f"{n.outputs[0].name}.index_error", (1,), np.bool_))
    return graph


def has_error_flag(node: Node) -> bool:
    return node.op in CHECKS and node.outputs[-1].name.endswith(".index_error")


def error_message(node: Node) -> str:
    return f"{node.op} node {node.name!r}: {CHECKS[node.op]}"


def kernel_params(node: Node) -> list:
    """Graph values bound to a kernel's params: present inputs, then outputs."""
    return [v for v in node.inputs if v is not None] + list(node.outputs)


def lower_node(node: Node, name: str, spec: MachineSpec) -> Kernel:
    """The node's kernel for `spec`; a node without a schedule gets the default one."""
    if node.schedule is None:
        node.schedule = default_schedule(node, spec)
    kb = KernelBuilder(name, spec.vector_bits)
    ins: list[Buf | None] = [None if v is None else kb.buf(f"in{k}", v.dtype, v.shape)
                             for k, v in enumerate(node.inputs)]
    outs = [kb.buf(f"out{k}", v.dtype, v.shape) for k, v in enumerate(node.outputs)]
    LOWERINGS[node.op](node, kb, ins, outs)
    return kb.build(outputs=len(outs))
