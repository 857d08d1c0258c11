"""The NCHW[x]c layout (kernels/conv_blocked.py): where it pays, and the rewrite into it.

`choose_blocked_layout_for(spec)` runs before the schedules are assigned. It finds the
nodes that could run blocked (`region_members`): convs that would run as the implicit
GEMM, depthwise convs, Concats and Slices (Split) over whole channel blocks, max and
average pools, and elementwise ops (and inference BatchNormalization) whose other operands
broadcast per channel or per position (squeeze-excite's gate, a scale). It joins them into
regions through the tensors they pass each other, and marks a region's members `layout:
"blocked"` when its work outweighs the layout changes at its border: at least
BLOCKED_MIN_FLOPS_PER_ELEMENT conv FLOPs per element converted (twice that in blocks of
8, see _pays). A region's channel block (attr `block`) is the widest of block_lanes(spec)
that all its members' channels fill. The default schedule of a marked conv or depthwise
conv is a blocked one.

`use_blocked_layout_for(spec)` runs after the schedules are final (and after
use_winograd), before weight packing. Each Conv whose schedule says `blocked` becomes a
ConvBlocked node reading and writing blocked tensors, with its weights packed for it (a
DepthwiseConv a DepthwiseBlocked, kernels/depthwise_blocked.py); a
marked Concat concatenates blocked tensors (axis 1 of (N, C / x, H, W, x): still a
Concat the memory plan makes free); pools become PoolBlocked and GlobalPoolBlocked
(kernels/pool_blocked.py), whose (N, C / x, 1, 1, x) result is the plain tensor already;
elementwise ops stay themselves over 5-D tensors, their per-channel operands viewed as
(N, C / x, 1, 1, x) and per-position ones as (N, 1, H, W, 1), and a BatchNormalization
becomes a multiply and add by its per-channel constants. After operator fusion a
ConvBlocked takes the elementwise chain after it (SiLU) into its stores. A tensor changes
layout only where a consumer needs the other one:

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

import numpy as np

from ..analysis.node_cost import node_flops
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node, Value
from ..kernels.conv import blocked_candidate
from ..kernels.conv_blocked import BlockedConvSchedule, pack_blocked_weights
from ..kernels.depthwise_blocked import pack_depthwise_weights
from ..kernels.elementwise import SCALAR
from ..kernels.fma_ports import two_wide_fma_ports
from .dce import eliminate_dead_code
from .fold_batchnorm import channel_affine

_ids = itertools.count()


# A layout change (a Transpose) costs about as much per element as the blocked kernels
# save on this many conv FLOPs. Intel Xeon (LLVM: rocketlake), 1 | 2 threads, regions by
# their FLOPs per converted element. ResNet-50 (one region of 31 convs) against the plain
# layout: 0.93 | 0.92. With pools, elementwise ops and Splits joining the regions, against
# regions of convs and Concats only (at 300 then): YOLOv8n-320 (29 convs with their SiLUs,
# Splits, Concats and pools, 641) 0.953 | 0.913, at 640 0.944 | 0.961; Inception v2 (30
# convs, 501) 0.944 | 0.917; v1 (28, 408) 0.940 | 0.920; DenseNet-121 (45 convs through
# their BatchNormalizations, 419) 0.958 | 0.946; SqueezeNet (18 convs, 171) 0.96-1.03 |
# 0.86-1.01 over five runs; MobileNetV3 (regions of 1-4 convs between its depthwise convs)
# 1.007 | 1.003 with those of 225-275 blocked too, 0.992 | 0.996 without, 1.24 | 1.16 with
# all (24-138).
BLOCKED_MIN_FLOPS_PER_ELEMENT = 150


def choose_blocked_layout_for(spec: MachineSpec):
    def choose_blocked_layout(graph: Graph) -> Graph:
        for region in _regions(graph, region_members(graph, spec)):
            lanes = next(x for x in block_lanes(spec) if all(_member(n, spec, x) for n in region))
            if _pays(region, graph, lanes):
                for n in region:
                    n.attrs.update(layout="blocked", block=lanes)
        return graph
    return choose_blocked_layout


def block_lanes(spec: MachineSpec) -> tuple[int, ...]:
    """The channel blocks a region may take, widest first: a region takes the widest that
    all its members' channels fill. Zen 4 splits each 512-bit FMA into two 256-bit halves,
    so blocks of 8 cost it next to nothing (ResNet-50 in blocks of 8 over blocks of 16:
    1.005 | 1.017 of the time at 1 | 2 threads) and take in a mobile net's 24, 40, 72,
    120 channels; cores with two 512-bit FMA ports would lose half their peak."""
    lanes = spec.vector_bits // 32
    return (lanes, lanes // 2) if lanes == 16 and not two_wide_fma_ports(spec) else (lanes,)


def search_lanes(spec: MachineSpec) -> tuple[int, ...]:
    """The channel blocks the layout search (tune/layouts.py) may try, widest first: the
    rule's, and half a 512-bit vector on any core with 512-bit vectors (the model decides
    whether the narrower block's kernels win on it)."""
    lanes = spec.vector_bits // 32
    return (lanes, lanes // 2) if lanes == 16 else (lanes,)


def layout_regions(graph: Graph, spec: MachineSpec) -> list[list[Node]]:
    """The regions the layout search chooses for: those of the nodes that could run
    blocked in the narrowest block it may try."""
    narrowest = search_lanes(spec)[-1]
    return _regions(graph, [n for n in graph.nodes if _member(n, spec, narrowest)])


def region_blocks(region: list[Node], spec: MachineSpec) -> list[int]:
    """The blocks of search_lanes(spec) that every member's channels fill."""
    return [x for x in search_lanes(spec) if all(_member(n, spec, x) for n in region)]


def member_block(n: Node) -> int | None:
    """The channel block a node runs in, None in the plain layout."""
    return n.attrs.get("block") if n.attrs.get("layout") == "blocked" else None


def layout_attrs(block: int | None) -> dict:
    """The attrs that put a region member in `block` (None: the plain layout), as
    dict.update takes them (None drops an attr)."""
    return {"layout": "blocked", "block": block} if block else {"layout": None, "block": None}


def region_members(graph: Graph, spec: MachineSpec) -> list[Node]:
    """The nodes that could run blocked (see the module's docstring), in the narrowest
    block the target takes."""
    return [n for n in graph.nodes if _member(n, spec, block_lanes(spec)[-1])]


def _member(n: Node, spec: MachineSpec, lanes: int) -> bool:
    return ((n.op == "Conv" and blocked_candidate(n, spec, lanes))
            or (n.op == "Concat" and _channel_concat(n, lanes)) or _depthwise(n, lanes)
            or _poolable(n, lanes) or _channel_slice(n, lanes) or _pointwise(n, lanes))


def _blocks_of(v: Value, lanes: int) -> bool:
    """A 4-D float tensor of whole channel blocks."""
    return len(v.shape) == 4 and v.dtype == np.float32 and v.shape[1] % lanes == 0


def _depthwise(n: Node, lanes: int) -> bool:
    """A 2-D depthwise conv (kernels/depthwise_blocked.py) with constant weights."""
    return (n.op == "DepthwiseConv" and not n.guards and n.inputs[1].is_const
            and "channel_shuffle" not in n.attrs
            and _blocks_of(n.inputs[0], lanes) and list(n.attrs["dilations"]) == [1, 1])


def _poolable(n: Node, lanes: int) -> bool:
    """A max or average pool (global, or by windows that all reach the input, no dilation)."""
    if n.guards or not _blocks_of(n.inputs[0], lanes) or n.attrs.get("kind") not in ("max", "avg"):
        return False
    if n.op == "GlobalPool":
        return True
    if n.op != "RowPool" or list(n.attrs["dilations"]) != [1, 1]:
        return False
    return all(p < k and (o - 1) * s - p < size for o, s, p, k, size in
               zip(n.outputs[0].shape[2:], n.attrs["strides"], n.attrs["pads_begin"],
                   n.attrs["kernel_shape"], n.inputs[0].shape[2:]))


def _channel_slice(n: Node, lanes: int) -> bool:
    """A run of whole channel blocks (a Split over channels: YOLO's C2f)."""
    if n.op != "Slice" or n.guards or not _blocks_of(n.inputs[0], lanes):
        return False
    x, y = n.inputs[0], n.outputs[0]
    starts, steps = n.attrs["starts"], n.attrs["steps"]
    return (all(s == 1 for s in steps) and starts[1] % lanes == 0 and y.shape[1] % lanes == 0
            and not any(starts[i] for i in (0, 2, 3)) and y.shape[0] == x.shape[0]
            and y.shape[2:] == x.shape[2:])


def _channel_concat(n: Node, lanes: int) -> bool:
    return (n.attrs["axis"] == 1 and not n.guards and len(n.outputs[0].shape) == 4
            and all(v is not None and v.shape[1] % lanes == 0 for v in n.inputs))


def _pointwise(n: Node, lanes: int) -> bool:
    """An elementwise op, or an inference BatchNormalization, making a 4-D float tensor of
    whole channel blocks from operands that are tensors of its shape or broadcast along
    the channels or along the positions: it runs on blocked tensors as it is."""
    if n.guards or len(n.outputs) != 1 or not _blocks_of(n.outputs[0], lanes):
        return False
    y = n.outputs[0]
    if n.op == "BatchNormalization":
        return (n.inputs[0].shape == y.shape
                and channel_affine(n, n.inputs[0], y.shape[1]) is not None)
    return n.op in SCALAR and all(v is None or _operand_kind(v, y.shape) is not None
                                  for v in n.inputs)


def _operand_kind(v: Value, shape: tuple) -> str | None:
    """How an elementwise op's operand meets its (N, C, H, W) output: "full" (that shape),
    "channel" (one value per channel), "position" (the same for every channel)."""
    if len(v.shape) > 4 or v.dtype != np.float32:
        return None
    if tuple(v.shape) == tuple(shape):
        return "full"
    n, c, h, w = _as_4d(v.shape)
    if n not in (1, shape[0]) or h not in (1, shape[2]) or w not in (1, shape[3]):
        return None
    if c == 1:
        return "position"
    return "channel" if c == shape[1] and h == w == 1 else None


def _as_4d(shape) -> tuple:
    return (1,) * (4 - len(shape)) + tuple(shape)


def _region_inputs(n: Node) -> list[Value]:
    """The tensors a region member reads in the blocked layout (a conv's ConvPad is its own)."""
    if n.op == "Concat":
        return list(n.inputs)
    if n.op in ("BatchNormalization", "RowPool", "GlobalPool", "Slice"):
        return [n.inputs[0]]
    if n.op == "DepthwiseConv":
        return [v for v in (n.inputs[0], n.inputs[3] if len(n.inputs) > 3 else None)
                if v is not None]
    if n.op != "Conv":
        return [v for v in n.inputs
                if v is not None and _operand_kind(v, n.outputs[0].shape) == "full"]
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


def _pays(region: list[Node], graph: Graph, lanes: int) -> bool:
    """BLOCKED_MIN_FLOPS_PER_ELEMENT holds for blocks of 16 channels; a region in blocks of
    8 needs twice the work, whether 8 lanes are half the vector or all of it. SqueezeNet's
    region (167) in blocks of 8, at 1 thread against the plain layout: on znver4 (half its
    512-bit vectors) 1.031 of the plain layout's time; on znver3 (AVX2) 1.058, 1.044, 1.030
    in three runs, and 1.046 with AVX2 code on znver5. MobileNetV3's (2099 on znver3, its
    depthwise convs with it) ran 1.061 of its time in the plain layout there."""
    return flops_per_converted_element(region, graph) >= BLOCKED_MIN_FLOPS_PER_ELEMENT * 16 / lanes


def flops_per_converted_element(region: list[Node], graph: Graph) -> float:
    """The region's conv FLOPs over the elements of the tensors that change layout at its
    border (each once: blocked once for all readers, made plain once for all)."""
    producers = {v: n for n in graph.nodes for v in n.outputs}
    inside = {id(n) for n in region}
    # a global pool's result is the plain tensor already
    made = {n.outputs[0] for n in region if n.op != "GlobalPool"}
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
    flops = sum(node_flops(n) for n in region if n.op in ("Conv", "DepthwiseConv"))
    elements = sum(v.size for v in converted)
    return flops / max(elements, 1)


def _plain(producers, v: Value) -> Value:
    """What a region member's input is before its ConvPad."""
    p = producers.get(v)
    return p.inputs[0] if p is not None and p.op == "ConvPad" else v


def use_blocked_layout_for(spec: MachineSpec):
    def use_blocked_layout(graph: Graph) -> Graph:
        return _Rewrite(graph, block_lanes(spec)[0]).run()
    return use_blocked_layout


def blocked_shape(shape: tuple, lanes: int) -> tuple:
    n, c, *spatial = shape
    return (n, c // lanes, *spatial, lanes)


class _Rewrite:
    def __init__(self, graph: Graph, widest: int):
        self.graph, self.widest = graph, widest
        self.lanes = widest                     # the block of the region being rewritten
        self.producers = {v: n for n in graph.nodes for v in n.outputs}
        self.blocked: dict[Value, Value] = {}   # NCHW value -> the same tensor blocked
        self.converted: dict[tuple, Value] = {}  # (NCHW value, lanes) -> blocked by a Transpose
        self.unplain: set[Value] = set()        # NCHW values not made from their blocked form yet
        self.nodes: list[Node] = []

    def run(self) -> Graph:
        for n in self.graph.nodes:
            rewrite = self._rewrite_of(n)
            if rewrite is not None:
                self.lanes = n.attrs.get("block", self.widest)
                rewrite(self, n)
                continue
            for v in n.inputs:
                self._need_plain(v)
            self.nodes.append(n)
        for v in self.graph.outputs:
            self._need_plain(v)
        g = self.graph
        return eliminate_dead_code(Graph(g.inputs, g.outputs, self.nodes, g.name, g.opset))

    def _rewrite_of(self, n: Node):
        """How n is rewritten into the blocked layout, None if it stays as it is: a conv
        runs blocked by its schedule (the tuner's may differ from the graph's choice)."""
        if n.op in ("Conv", "DepthwiseConv"):
            return self.REWRITES[n.op] if getattr(n.schedule, "blocked", False) else None
        if n.attrs.get("layout") != "blocked":
            return None
        return self.REWRITES.get(n.op, _Rewrite._pointwise)

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
        weights = self._packed(w, pack_blocked_weights(w.const, self.lanes, sched.vectors))
        ins = [xb, weights, bias, None if residual is None else self._as_blocked(residual)]
        keep = {k: attrs[k] for k in ("strides", "dilations", "kernel_shape", "activation")
                if k in attrs}
        self._emit_blocked(conv, "ConvBlocked", ins, keep,
                           BlockedConvSchedule(sched.vectors, sched.positions, sched.parallel,
                                               sched.split == "columns"))

    def _depthwise(self, n: Node) -> None:
        x, w, bias = n.inputs[:3]
        residual = n.inputs[3] if len(n.inputs) > 3 else None
        weights = self._packed(w, pack_depthwise_weights(w.const, self.lanes))
        keep = {k: n.attrs[k] for k in ("strides", "kernel_shape", "pads_begin", "activation")}
        ins = [self._as_blocked(x), weights, bias,
               None if residual is None else self._as_blocked(residual)]
        self._emit_blocked(n, "DepthwiseBlocked", ins, keep, n.schedule)

    def _concat(self, concat: Node) -> None:
        self._emit_blocked(concat, "Concat", [self._as_blocked(v) for v in concat.inputs],
                           {"axis": 1})

    def _slice(self, n: Node) -> None:
        starts = n.attrs["starts"]
        self._emit_blocked(n, "Slice", [self._as_blocked(n.inputs[0])],
                           {"starts": (0, starts[1] // self.lanes, 0, 0, 0), "steps": (1,) * 5})

    def _pool(self, pool: Node) -> None:
        keep = {k: pool.attrs[k] for k in ("kind", "kernel_shape", "strides", "pads_begin")}
        self._emit_blocked(pool, "PoolBlocked",
                           [self._as_blocked(pool.inputs[0]), *pool.inputs[1:2]], keep)

    def _global_pool(self, pool: Node) -> None:
        self._emit_blocked(pool, "GlobalPoolBlocked", [self._as_blocked(pool.inputs[0])],
                           {"kind": pool.attrs["kind"]})
        # (N, C / x, 1, 1, x) is (N, C, 1, 1) as it lies in memory: the plain result is a view
        y = pool.outputs[0]
        self.unplain.discard(y)
        self.nodes.append(Node("Reshape", [self.blocked[y]], [y], {"shape": tuple(y.shape)}))

    def _pointwise(self, n: Node) -> None:
        y = n.outputs[0]
        if n.op == "BatchNormalization":
            a, c = channel_affine(n, n.inputs[0], y.shape[1])
            scaled = Value(f"{y.name}_scaled", blocked_shape(y.shape, self.lanes), y.dtype)
            self.nodes.append(Node("Mul", [self._as_blocked(n.inputs[0]), self._per_channel(a)],
                                   [scaled], name=n.name, sources=n.onnx_nodes))
            self._emit_blocked(n, "Add", [scaled, self._per_channel(c)])
            return
        attrs = {k: v for k, v in n.attrs.items() if k not in ("layout", "block")}
        self._emit_blocked(n, n.op, [None if v is None else self._operand(v, y.shape)
                                     for v in n.inputs], attrs, n.schedule)

    def _emit_blocked(self, like: Node, op: str, ins: list, attrs=None, schedule=None) -> None:
        """A node `op` that makes the blocked form of like's (first) result."""
        y = like.outputs[0]
        yb = self._blocked_value(y)
        self.nodes.append(Node(op, ins, [yb], attrs or {}, name=like.name, schedule=schedule,
                               sources=like.onnx_nodes))
        self.blocked[y] = yb
        self.unplain.add(y)

    def _packed(self, w: Value, packed: np.ndarray) -> Value:
        """The constant holding weights w packed for a kernel of the current block."""
        return Value(f"{w.name}_nchw{self.lanes}c", packed.shape, w.dtype, const=packed)

    def _blocked_value(self, y: Value) -> Value:
        """The value that holds plain y in the blocked layout."""
        return Value(f"{y.name}_nchw{self.lanes}c", blocked_shape(y.shape, self.lanes), y.dtype)

    def _operand(self, v: Value, shape: tuple) -> Value:
        """An elementwise operand as the blocked output broadcasts it."""
        kind = _operand_kind(v, shape)
        if kind == "full" or (kind == "channel" and self._blocked_here(v)):
            return self._as_blocked(v)  # (N, C, 1, 1) blocked: (N, C / x, 1, 1, x) already
        self._need_plain(v)
        n, c, h, w = _as_4d(v.shape)
        # (N, C, 1, 1) is (N, C / x, 1, 1, x) as it lies in memory; a value the same for
        # every channel is the same for every lane
        target = (n, c // self.lanes, 1, 1, self.lanes) if kind == "channel" else (n, 1, h, w, 1)
        if v.is_const:
            return Value(f"{v.name}_nchw{self.lanes}c", target, v.dtype,
                         const=np.asarray(v.const).reshape(target))
        return self._view(v, target)

    def _per_channel(self, k: np.ndarray) -> Value:
        blocks = k.size // self.lanes
        data = k.astype(np.float32).reshape(1, blocks, 1, 1, self.lanes)
        return Value(f"channel_affine{next(_ids)}", data.shape, np.dtype(np.float32), const=data)

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

    def _blocked_here(self, v: Value) -> bool:
        """Whether v is made blocked in the current region's block."""
        return v in self.blocked and self.blocked[v].shape[-1] == self.lanes

    def _as_blocked(self, v: Value) -> Value:
        if self._blocked_here(v):
            return self.blocked[v]
        key = (v, self.lanes)
        if key not in self.converted:
            self._need_plain(v)  # made in another region's block
            n, c, *spatial = v.shape
            hw = math.prod(spatial)
            grouped = self._view(v, (n, c // self.lanes, self.lanes, hw))
            moved = self._transpose(grouped, (n, c // self.lanes, hw, self.lanes))
            self.converted[key] = self._view(moved, blocked_shape(v.shape, self.lanes))
        return self.converted[key]

    def _need_plain(self, v: Value | None) -> None:
        if v is None or v not in self.unplain:
            return
        self.unplain.discard(v)
        n, c, *spatial = v.shape
        hw, lanes = math.prod(spatial), self.blocked[v].shape[-1]
        flat = self._view(self.blocked[v], (n, c // lanes, hw, lanes))
        moved = self._transpose(flat, (n, c // lanes, lanes, hw))
        self.nodes.append(Node("Reshape", [moved], [v], {"shape": tuple(v.shape)}))

    def _view(self, v: Value, shape: tuple) -> Value:
        out = Value(f"{v.name}_view{next(_ids)}", shape, v.dtype)
        self.nodes.append(Node("Reshape", [v], [out], {"shape": tuple(shape)}))
        return out

    def _transpose(self, v: Value, shape: tuple) -> Value:
        out = Value(f"{v.name}_t{next(_ids)}", shape, v.dtype)
        self.nodes.append(Node("Transpose", [v], [out], {"perm": [0, 1, 3, 2]}))
        return out


_Rewrite.REWRITES = {"Conv": _Rewrite._conv, "DepthwiseConv": _Rewrite._depthwise,
                     "Concat": _Rewrite._concat, "Slice": _Rewrite._slice,
                     "RowPool": _Rewrite._pool, "GlobalPool": _Rewrite._global_pool}


def _strided_pointwise(attrs, pads, in_spatial, out_spatial) -> bool:
    """A strided 1x1 conv whose windows all lie inside its input (no border to read)."""
    return (list(attrs["kernel_shape"]) == [1, 1] and max(attrs["strides"]) > 1
            and not any(pads) and all((o - 1) * s < i for o, s, i in
                                      zip(out_spatial, attrs["strides"], in_spatial)))


def blocked_layers(graph: Graph) -> list[dict]:
    """For meta.json: the convs run in the blocked layout."""
    return [{"onnx_node": n.name, "op": n.op,
             "in_channels": n.inputs[0].shape[1] * n.inputs[0].shape[-1],
             "out_channels": n.outputs[0].shape[1] * n.outputs[0].shape[-1],
             "output": list(n.outputs[0].shape[2:4]), "block": n.outputs[0].shape[-1]}
            for n in graph.nodes if n.op in ("ConvBlocked", "DepthwiseBlocked")]

