"""Pre-pack constant weights into the order the kernels read them, as their schedules say.

PackedGemm: W (K, N) becomes panels of the schedule's width (kernels/packed_gemm.py) and
the bias is zero-padded to whole panels. With Strassen's schedule, the seven combinations
of W's quadrants (kernels/strassen.py) are packed one after another.

Conv:
A register tile multiplies MR output channels (the schedule's tiles.mr) at a time and walks k; in W's own layout
(OC, K) its MR weights per k lie in MR rows far apart, i.e. MR separate memory streams. The
packed layout puts them next to each other:
    packed[g, m // MR, k, m % MR] = W[g * OCg + m, k]      (rows padded with zeros to MR)
so each tile reads one sequential stream. The Conv node gets attrs["packed_mr"] = MR.
A Conv whose schedule says skinny (few output columns) gets panels of output channels instead
(kernels/conv_skinny.py) and attrs["skinny_width"].
Runs after fold_batchnorm, which needs the weights in ONNX layout.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node, Value
from ..kernels.conv import conv_gemm_shape
from ..kernels.conv_skinny import pack_skinny_weights
from ..kernels.matmul import SMALL_N
from ..kernels.packed_gemm import pack_panels
from ..kernels.strassen import weight_combinations


def pack_weights(graph: Graph) -> Graph:
    nodes = [_packed(n) if _packable(n) else n for n in graph.nodes]
    nodes = [_packed_dense(n) if n.op == "PackedGemm" and not n.attrs.get("packed") else n
             for n in nodes]
    return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)


def _packed_dense(n: Node) -> Node:
    w, bias = n.inputs[1], n.inputs[2]
    sched = n.schedule
    if sched.strassen:
        panels = np.stack([pack_panels(c, sched) for c in weight_combinations(w.const)])
    else:
        panels = pack_panels(w.const, sched)
    inputs = list(n.inputs)
    inputs[1] = Value(f"{w.name}_panels", panels.shape, w.dtype, const=panels)
    if bias is not None:
        # whole panels of the last columns a tile reads (Strassen's right half: N/2 more)
        size = panels.shape[-3] * sched.width + (bias.shape[0] // 2 if sched.strassen else 0)
        padded = np.zeros(size, bias.dtype)
        padded[:bias.shape[0]] = bias.const
        inputs[2] = Value(f"{bias.name}_padded", padded.shape, bias.dtype, const=padded)
    return dataclasses.replace(n, inputs=inputs, attrs=dict(n.attrs, packed=True))


def _packable(n: Node) -> bool:
    """Constant weights of a Conv not packed yet (a tiled GEMM, or a skinny one whose
    schedule says how wide its panels are)."""
    if n.op != "Conv" or not n.inputs[1].is_const:
        return False
    if "packed_mr" in n.attrs or "skinny_width" in n.attrs:
        return False
    return _columns(n) >= SMALL_N or n.schedule.lanes > 0


def _columns(n: Node) -> int:
    return conv_gemm_shape(n)[0].N


def packed_conv_weights(w: np.ndarray, group: int, mr: int) -> tuple[np.ndarray, int]:
    """(packed array of shape (group, OCg_padded // MR, K, MR), MR) for tiles of mr rows."""
    oc = w.shape[0]
    ocg = oc // group
    mr = min(mr, ocg)
    rows = -(-ocg // mr) * mr
    k = int(np.prod(w.shape[1:], dtype=np.int64))
    padded = np.zeros((group, rows, k), w.dtype)
    padded[:, :ocg] = w.reshape(group, ocg, k)
    packed = padded.reshape(group, rows // mr, mr, k).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(packed), mr


def _packed(n: Node) -> Node:
    w = n.inputs[1]
    if n.schedule.lanes:
        width = n.schedule.lanes * n.schedule.vectors
        data = pack_skinny_weights(w.const, n.attrs["group"], width)
        inputs = list(n.inputs)
        inputs[1] = Value(f"{w.name}_panels", data.shape, w.dtype, const=data)
        # its tiles store only real outputs, straight into y: no wide scratch
        return dataclasses.replace(n, inputs=inputs, outputs=n.outputs[:1],
                                   attrs=dict(n.attrs, skinny_width=width))
    data, mr = packed_conv_weights(w.const, n.attrs["group"], n.schedule.tiles.mr)
    packed = Value(f"{w.name}_packed", data.shape, w.dtype, const=data)
    inputs = list(n.inputs)
    inputs[1] = packed
    # by rows, its tiles store straight into y: the wide scratch goes unused
    outputs = n.outputs[:1] if n.schedule.by_rows else n.outputs
    return dataclasses.replace(n, inputs=inputs, outputs=outputs,
                               attrs=dict(n.attrs, packed_mr=mr))
