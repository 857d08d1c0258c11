"""The NCHW[x]c layout (kernels/conv_blocked.py): where it pays, and the rewrite into it.

`choose_blocked_layout_for(spec)` runs before the schedules are assigned. It finds the
convs that would run as the implicit GEMM and could run blocked, joins them into regions
through the tensors they pass each other (directly or through a Concat over channels),
and marks a region's convs and concats `layout: "blocked"` when its work outweighs the
layout changes at its border: at least BLOCKED_MIN_FLOPS_PER_ELEMENT conv FLOPs per
element converted. The default Conv schedule of a marked conv is a blocked one.

`use_blocked_layout_for(spec)` runs after the schedules are final (and after
use_winograd), before weight packing. Each Conv whose schedule says `blocked` becomes a
ConvBlocked node reading and writing blocked tensors, with its weights packed for it; a
marked Concat concatenates blocked tensors (axis 1 of (N, C / x, H, W, x): still a
Concat the memory plan makes free). A tensor changes layout only where a consumer needs
the other one:

* a blocked conv's output stays blocked for every blocked conv that reads it (as input or
  as residual), so chains of blocked convs never go back to NCHW between them;
* the NCHW tensor is made from it once, right after the conv, only if some other node or
  a graph output reads it; likewise an NCHW tensor is blocked once however many blocked
  convs read it.

A layout change is a Transpose between two Reshapes, which cost nothing (memory_plan's
views): (N, C, H, W) as (N, C / x, x, H * W) -> (N, C / x, H * W, x), and back.
"""
from __future__ import annotations

import itertools
import math

from ..analysis.node_cost import node_flops
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node, Value
from ..kernels.conv import blocked_candidate
from ..kernels.conv_blocked import BlockedConvSchedule, pack_blocked_weights
from .dce import eliminate_dead_code

_ids = itertools.count()


# A layout change (a Transpose) costs about as much per element as the blocked kernel
# saves on this many conv FLOPs. Intel Xeon (LLVM: rocketlake), whole models new/old, 1 | 2
# threads, regions by their FLOPs per converted element: ResNet-50 (one region of 31
# convs, 1524) 0.932 | 0.918; YOLOv8n-320 (one conv of 768; with its convs of 200-384
# too: 0.989 | 0.980); Inception v2 (28 convs, 287) 0.997 | 0.977; Inception v1 (221 and
# 231) 0.988 | 0.977; MobileNetV3 (275) 1.031 | 1.022; SqueezeNet (248) 1.008 | 1.012,
# (59-248) 1.11 | 1.08.
BLOCKED_MIN_FLOPS_PER_ELEMENT = 300


def choose_blocked_layout_for(spec: MachineSpec):
    def choose_blocked_layout(graph: Graph) -> Graph:
        lanes = spec.vector_bits // 32
        members = [n for n in graph.nodes
                   if (n.op == "Conv" and blocked_candidate(n, spec))
                   or (n.op == "Concat" and _channel_concat(n, lanes))]
        for region in _regions(graph, members):
            if _pays(region, graph):
                for n in region:
                    n.attrs["layout"] = "blocked"
        return graph
    return choose_blocked_layout


def _channel_concat(n: Node, lanes: int) -> bool:
    return (n.attrs["axis"] == 1 and not n.guards and len(n.outputs[0].shape) == 4
            and all(v is not None and v.shape[1] % lanes == 0 for v in n.inputs))


def _region_inputs(n: Node) -> list[Value]:
    """The tensors a region member reads in the blocked layout (a conv's ConvPad is its own)."""
    if n.op == "Concat":
        return list(n.inputs)
    return [v for v in (n.inputs[0], n.inputs[4] if len(n.inputs) > 4 else None)
            if v is not None]


def _regions(graph: Graph, members: list[Node]) -> list[list[Node]]:
    """Members joined when one reads (through at most a ConvPad) what the other writes."""
    producers = {v: n for n in graph.nodes for v in n.outputs}
    parent = {id(n): n for n in members}

    def root(n):
        while parent[id(n)] is not n:
            n = parent[id(n)]
        return n
    for n in members:
        for v in _region_inputs(n):
            p = _source(producers, v)
            if p is not None and id(p) in parent:
                parent[id(root(p))] = root(n)
    regions: dict[int, list[Node]] = {}
    for n in members:
        regions.setdefault(id(root(n)), []).append(n)
    return list(regions.values())


def _source(producers, v: Value):
    """The node whose output v is, looking through a ConvPad."""
    p = producers.get(v)
    if p is not None and p.op == "ConvPad":
        p = producers.get(p.inputs[0])
    return p


def _pays(region: list[Node], graph: Graph) -> bool:
    return flops_per_converted_element(region, graph) >= BLOCKED_MIN_FLOPS_PER_ELEMENT


def flops_per_converted_element(region: list[Node], graph: Graph) -> float:
    """The region's conv FLOPs over the elements of the tensors that change layout at its
    border (each once: blocked once for all readers, made plain once for all)."""
    producers = {v: n for n in graph.nodes for v in n.outputs}
    inside = {id(n) for n in region}
    made = {v for n in region for v in n.outputs}
    read = {_plain(producers, v) for n in region for v in _region_inputs(n)}
    converted = read - made
    readers: dict[Value, list[Node]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            readers.setdefault(v, []).append(n)

    def outside(n: Node) -> bool:  # a ConvPad is outside if a non-member reads its output
        if n.op == "ConvPad":
            return any(outside(r) for r in readers.get(n.outputs[0], []))
        return id(n) not in inside
    read_outside = {v for v in made if any(outside(r) for r in readers.get(v, []))}
    converted |= read_outside | (made & set(graph.outputs))
    flops = sum(node_flops(n) for n in region if n.op == "Conv")
    elements = sum(v.size for v in converted)
    return flops / max(elements, 1)


def _plain(producers, v: Value) -> Value:
    """What a region member's input is before its ConvPad."""
    p = producers.get(v)
    return p.inputs[0] if p is not None and p.op == "ConvPad" else v


def use_blocked_layout_for(spec: MachineSpec):
    def use_blocked_layout(graph: Graph) -> Graph:
        return _Rewrite(graph, spec.vector_bits // 32).run()
    return use_blocked_layout


def blocked_shape(shape: tuple, lanes: int) -> tuple:
    n, c, *spatial = shape
    return (n, c // lanes, *spatial, lanes)


class _Rewrite:
    def __init__(self, graph: Graph, lanes: int):
        self.graph, self.lanes = graph, lanes
        self.producers = {v: n for n in graph.nodes for v in n.outputs}
        self.blocked: dict[Value, Value] = {}   # NCHW value -> the same tensor blocked
        self.unplain: set[Value] = set()        # NCHW values not made from their blocked form yet
        self.nodes: list[Node] = []

    def run(self) -> Graph:
        for n in self.graph.nodes:
            if n.op == "Conv" and getattr(n.schedule, "blocked", False):
                self._conv(n)
                continue
            if n.op == "Concat" and n.attrs.get("layout") == "blocked":
                self._concat(n)
                continue
            for v in n.inputs:
                self._need_plain(v)
            self.nodes.append(n)
        for v in self.graph.outputs:
            self._need_plain(v)
        g = self.graph
        return eliminate_dead_code(Graph(g.inputs, g.outputs, self.nodes, g.name, g.opset))

    def _conv(self, conv: Node) -> None:
        xq, w, bias = conv.inputs[:3]
        residual = conv.inputs[4] if len(conv.inputs) > 4 else None
        pad = self.producers.get(xq)
        if pad is None or pad.op != "ConvPad":
            pad = None
        x = xq if pad is None else pad.inputs[0]
        y = conv.outputs[0]
        sched = conv.schedule
        attrs = conv.attrs
        pads = pad.attrs["pads_begin"] if pad is not None else [0, 0]
        xb = self._as_blocked(x)
        if _strided_pointwise(attrs, pads, x.shape[2:], y.shape[2:]):
            # its windows are every s-th pixel: gathered once, instead of every panel of
            # channels reading whole cache lines for a quarter of them
            xb = self._every(xb, attrs["strides"], y.shape[2:])
            attrs = dict(attrs, strides=[1, 1])
        xb = self._padded(xb, y.shape[2:], attrs, pads)
        packed = pack_blocked_weights(w.const, self.lanes, sched.vectors)
        weights = Value(f"{w.name}_nchw{self.lanes}c", packed.shape, w.dtype, const=packed)
        yb = Value(f"{y.name}_nchw{self.lanes}c", blocked_shape(y.shape, self.lanes), y.dtype)
        ins = [xb, weights, bias, None if residual is None else self._as_blocked(residual)]
        keep = {k: attrs[k] for k in ("strides", "dilations", "kernel_shape", "activation")
                if k in attrs}
        self.nodes.append(Node("ConvBlocked", ins, [yb], keep, name=conv.name,
                               schedule=BlockedConvSchedule(sched.vectors, sched.positions,
                                                            sched.parallel,
                                                            sched.split == "columns"),
                               sources=conv.onnx_nodes))
        self.blocked[y] = yb
        self.unplain.add(y)

    def _concat(self, concat: Node) -> None:
        y = concat.outputs[0]
        yb = Value(f"{y.name}_nchw{self.lanes}c", blocked_shape(y.shape, self.lanes), y.dtype)
        self.nodes.append(Node("Concat", [self._as_blocked(v) for v in concat.inputs], [yb],
                               {"axis": 1}, name=concat.name, sources=concat.onnx_nodes))
        self.blocked[y] = yb
        self.unplain.add(y)

    def _padded(self, xb: Value, out_spatial, attrs, pads_begin) -> Value:
        """xb with the zero border the conv's windows reach into (none: xb itself)."""
        spatial = xb.shape[2:4]
        need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
                zip(out_spatial, attrs["strides"], attrs["kernel_shape"], attrs["dilations"])]
        padded = [max(n, p + x) for n, p, x in zip(need, pads_begin, spatial)]
        if not any(pads_begin) and list(padded) == list(spatial):
            return xb
        shape = (*xb.shape[:2], *padded, self.lanes)
        out = Value(f"{xb.name}_pad{next(_ids)}", shape, xb.dtype)
        self.nodes.append(Node("PadBlocked", [xb], [out], {"pads_begin": list(pads_begin)}))
        return out

    def _every(self, xb: Value, strides, out_spatial) -> Value:
        shape = (*xb.shape[:2], *out_spatial, self.lanes)
        out = Value(f"{xb.name}_every{next(_ids)}", shape, xb.dtype)
        self.nodes.append(Node("Slice", [xb], [out], {"starts": (0,) * 5,
                                                      "steps": (1, 1, *strides, 1)}))
        return out

    def _as_blocked(self, v: Value) -> Value:
        if v not in self.blocked:
            n, c, *spatial = v.shape
            hw = math.prod(spatial)
            grouped = self._view(v, (n, c // self.lanes, self.lanes, hw))
            moved = self._transpose(grouped, (n, c // self.lanes, hw, self.lanes))
            self.blocked[v] = self._view(moved, blocked_shape(v.shape, self.lanes))
        return self.blocked[v]

    def _need_plain(self, v: Value | None) -> None:
        if v is None or v not in self.unplain:
            return
        self.unplain.discard(v)
        n, c, *spatial = v.shape
        hw = math.prod(spatial)
        flat = self._view(self.blocked[v], (n, c // self.lanes, hw, self.lanes))
        moved = self._transpose(flat, (n, c // self.lanes, self.lanes, hw))
        self.nodes.append(Node("Reshape", [moved], [v], {"shape": tuple(v.shape)}))

    def _view(self, v: Value, shape: tuple) -> Value:
        out = Value(f"{v.name}_view{next(_ids)}", shape, v.dtype)
        self.nodes.append(Node("Reshape", [v], [out], {"shape": tuple(shape)}))
        return out

    def _transpose(self, v: Value, shape: tuple) -> Value:
        out = Value(f"{v.name}_t{next(_ids)}", shape, v.dtype)
        self.nodes.append(Node("Transpose", [v], [out], {"perm": [0, 1, 3, 2]}))
        return out


def _strided_pointwise(attrs, pads, in_spatial, out_spatial) -> bool:
    """A strided 1x1 conv whose windows all lie inside its input (no border to read)."""
    return (list(attrs["kernel_shape"]) == [1, 1] and max(attrs["strides"]) > 1
            and not any(pads) and all((o - 1) * s < i for o, s, i in
                                      zip(out_spatial, attrs["strides"], in_spatial)))


def blocked_layers(graph: Graph) -> list[dict]:
    """For meta.json: the convs run in the blocked layout."""
    return [{"onnx_node": n.name, "in_channels": n.inputs[0].shape[1] * n.inputs[0].shape[-1],
             "out_channels": n.outputs[0].shape[1] * n.outputs[0].shape[-1],
             "output": list(n.outputs[0].shape[2:4])}
            for n in graph.nodes if n.op == "ConvBlocked"]

