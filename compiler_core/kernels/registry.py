"""Which function lowers which graph op to a loop-nest Kernel."""
from __future__ import annotations

from typing import Callable

from ..ir import Node
from ..ir.loops import Buf, Kernel, KernelBuilder

Lowering = Callable[[Node, KernelBuilder, list, list], None]
LOWERINGS: dict[str, Lowering] = {}


def lowering(*ops: str):
    """Register `fn(node, kb, inputs, outputs)`; inputs are Bufs (None for absent inputs)."""
    def register(fn: Lowering) -> Lowering:
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"two lowerings for {op}")
            LOWERINGS[op] = fn
        return fn
    return register


def kernel_params(node: Node) -> list:
    """Graph values bound to a kernel's params: present inputs, then outputs."""
    return [v for v in node.inputs if v is not None] + list(node.outputs)


def lower_node(node: Node, name: str) -> Kernel:
    kb = KernelBuilder(name)
    ins: list[Buf | None] = [None if v is None else kb.buf(f"in{k}", v.dtype, v.shape)
                             for k, v in enumerate(node.inputs)]
    outs = [kb.buf(f"out{k}", v.dtype, v.shape) for k, v in enumerate(node.outputs)]
    LOWERINGS[node.op](node, kb, ins, outs)
    return kb.build(outputs=len(outs))
