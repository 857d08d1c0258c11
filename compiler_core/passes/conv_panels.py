"""Give each Conv whose schedule packs its input (kernels/conv.py, ConvSchedule.pack) the
scratch its panels go to: an extra last output (attrs["panels"]), like the wide output's
scratch, so the memory plan places it in the arena and reuses it after the kernel.

Runs after the schedules are final (they set the panels' width and whether to pack).
"""
from __future__ import annotations

import dataclasses

from ..ir import Graph, Node, Value
from ..kernels.conv import conv_gemm_shape, panels_size


def add_conv_panels(graph: Graph) -> Graph:
    nodes = [_with_panels(n) if _packs(n) else n for n in graph.nodes]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _packs(n: Node) -> bool:
    return n.op == "Conv" and getattr(n.schedule, "pack", False) and not n.attrs.get("panels")


def _with_panels(n: Node) -> Node:
    shape, pieces = conv_gemm_shape(n)
    y = n.outputs[0]
    panels = Value(f"{n.name or 'conv'}_panels", (panels_size(n.schedule, shape, pieces),),
                   y.dtype)
    return dataclasses.replace(n, outputs=[*n.outputs, panels], attrs=dict(n.attrs, panels=True))
