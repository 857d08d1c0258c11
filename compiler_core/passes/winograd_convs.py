"""Turn the Convs whose schedule says Winograd (kernels/conv.py's default rule or the
tuner) into WinogradConv nodes (kernels/winograd.py).

Runs after the schedules are final and before weight packing. For each such Conv:
* the weights become U = G g G^T, (36, OC, C) for F(4x4, 3x3), packed in register-tile
  rows like every conv weight (passes/pack_weights.packed_conv_weights, one "group" per
  transformed position);
* the kernel reads the conv's unpadded input in place (its padding, and the rows and
  columns past it up to whole tiles and items, read as zeros), so the Conv's ConvPad goes
  away when nothing else reads it;
* the kernel's scratch buffers (V, M, a row buffer) are extra outputs, as for the direct
  conv's wide output, so the memory plan places them in the arena.
Bias, residual and the fused activation carry over to the output transform's epilogue.
"""
from __future__ import annotations

import itertools

from ..ir import Graph, Node, Value
from ..kernels.winograd import scratch_shapes, transform_weights
from .dce import eliminate_dead_code
from .pack_weights import packed_conv_weights

_ids = itertools.count()


def use_winograd(graph: Graph) -> Graph:
    producers = {v: n for n in graph.nodes for v in n.outputs}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.op == "Conv" and getattr(n.schedule, "winograd", 0):
            nodes.extend(_winograd(n, producers))
        else:
            nodes.append(n)
    return eliminate_dead_code(Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset))


def _winograd(conv: Node, producers) -> list[Node]:
    sched = conv.schedule
    m, tile_rows = sched.winograd, sched.tile_rows
    xq, w, bias = conv.inputs[:3]
    residual = conv.inputs[4] if len(conv.inputs) > 4 else None
    y = conv.outputs[0]
    pad = producers.get(xq)
    x = pad.inputs[0] if pad is not None and pad.op == "ConvPad" else xq
    N, C = x.shape[:2]
    tag = f"{conv.name or 'conv'}_winograd{next(_ids)}"
    u = transform_weights(w.const, m)
    packed, mr = packed_conv_weights(u.reshape(-1, C), u.shape[0], sched.tiles.mr)
    weights = Value(f"{w.name}_winograd", packed.shape, w.dtype, const=packed)
    sizes = scratch_shapes(N, C, y.shape[1], y.shape[2:], m, tile_rows, sched.winograd_phases)
    scratch = [Value(f"{tag}_{k}", (sizes[k],), y.dtype) for k in ("v", "m", "rows")]
    attrs = dict(conv.attrs, packed_mr=mr, winograd_m=m, tile_rows=tile_rows)
    return [Node("WinogradConv", [x, weights, bias, residual], [y, *scratch], attrs,
                 name=conv.name, guards=conv.guards, schedule=sched, sources=conv.onnx_nodes)]


def winograd_layers(graph: Graph) -> list[dict]:
    """For meta.json: the convs computed by Winograd, with their tile and channels."""
    return [{"onnx_node": n.name, "algorithm": f"F({n.attrs['winograd_m']}x{n.attrs['winograd_m']},3x3)",
             "in_channels": n.inputs[0].shape[1], "out_channels": n.outputs[0].shape[1],
             "output": list(n.outputs[0].shape[2:]), "tile_rows": n.attrs["tile_rows"],
             "parallel": "phases" if n.schedule.winograd_phases else "items"}
            for n in graph.nodes if n.op == "WinogradConv"]
