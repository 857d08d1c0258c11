"""The layout search: which regions of a model run in the blocked layout, and in which
channel block, decided by timing the whole model (as TVM's graph tuner picks layouts).

passes/blocked_layout.py decides by a rule: a region runs blocked when its conv FLOPs per
converted element reach a threshold, in the widest block all its members fill. The
threshold was set on one machine and sits between models; on another target a model can
land on the wrong side of it. AMD EPYC (LLVM: znver5), AVX2 code (x86-64-v3), 1 thread:
SqueezeNet's one region (171 FLOPs per converted element) ran 0.956 of the rule's time in
the plain layout, while MobileNetV3's ran 1.075 of it (since then the rule asks more of
blocks of 8 and takes SqueezeNet's plain). So with a tuning budget each region
is built into the whole model in each of its layouts (the rule's, the plain one, and
every block its members fill: search_lanes) and the variants are timed taking turns
(tune/measure_model.py), one region at a time, the one with the most conv FLOPs first,
each with the regions before it as chosen. A layout replaces the rule's only when the model
runs at least MIN_GAIN faster with it, round by round (tune/paired.py). It runs before the
kernels are tuned: a conv's kernel, and so its workload, follows its layout.

Records: a region's key is `Layout-<digest>` of the whole model's nodes and the region's
place in it (a layout's worth is the model's time, so the choice is the model's); each
option's record has op "Layout", schedule {"layout": "rule" | "plain" | "blocked",
"block": ...}, and seconds the whole model's time in that variant. A compile that finds a
region's records takes their choice and measures nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

from ..analysis.node_cost import node_flops
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node
from ..kernels.schedule import default_schedule
from ..passes.blocked_layout import layout_attrs, layout_regions, member_block, region_blocks
from .builder import ModelVariant, updated_attrs
from .paired import why_not_faster
from .runner import Measurement

MIN_GAIN = 0.02         # a layout other than the rule's must save this share of the model
MIN_FLOPS_SHARE = 0.02  # a region with less of the model's conv FLOPs keeps the rule's
LAYOUT_SHARE = 0.3      # of a seconds budget, at most
RULE = {"layout": "rule"}
CONV_OPS = ("Conv", "DepthwiseConv")


@dataclass
class Region:
    key: str
    indices: list[int]            # its members' places in the graph
    options: list[dict]           # options[0] is RULE
    flops: float
    seconds: dict = field(default_factory=dict)  # option's name -> model seconds or None
    source: str = "default"       # "records" | "tuned" | "default"
    chosen: dict = field(default_factory=lambda: RULE)

    def timed(self, option: dict, seconds: float | None) -> None:
        self.seconds[option_name(option)] = seconds

    def best(self) -> dict:
        """The fastest option when it beats the rule's by MIN_GAIN; the rule's when that
        failed (nothing can be compared) or was never timed."""
        rule = self.seconds.get(option_name(RULE))
        if not rule:
            return RULE
        timed = [(s, o) for o in self.options if (s := self.seconds.get(option_name(o)))]
        seconds, option = min(timed, key=lambda t: t[0])
        return option if seconds <= (1 - MIN_GAIN) * rule else RULE


def judged(option: dict, m: Measurement, rule: Measurement) -> str | None:
    """Why the option's measurement cannot be chosen: its error, or for another layout than
    the rule's, the rounds not showing it MIN_GAIN faster (tune/paired.py). Recorded as the
    option's error, so that a compile from the records makes the same choice."""
    if m.error or option == RULE or not rule.ok:
        return m.error
    return why_not_faster(m, rule, MIN_GAIN)


def option_name(option: dict) -> str:
    block = option.get("block")
    return option["layout"] + (str(block) if block else "")


def option_block(option: dict) -> int | None:
    return option.get("block") if option["layout"] == "blocked" else None


def _option(block: int | None) -> dict:
    return {"layout": "blocked", "block": block} if block else {"layout": "plain"}


def collect_regions(graph: Graph, spec: MachineSpec) -> list[Region]:
    """The regions with a layout other than the rule's to try and enough of the model's
    conv FLOPs to matter."""
    index = {id(n): k for k, n in enumerate(graph.nodes)}
    total = sum(node_flops(n) for n in graph.nodes if n.op in CONV_OPS) or 1.0
    model = _model_digest(graph)
    regions = []
    for members in layout_regions(graph, spec):
        marks = {member_block(n) for n in members}
        others = [b for b in [None] + region_blocks(members, spec) if marks != {b}]
        flops = sum(node_flops(n) for n in members if n.op in CONV_OPS)
        if not others or flops < MIN_FLOPS_SHARE * total:
            continue
        indices = sorted(index[id(n)] for n in members)
        key = hashlib.sha256(repr((model, indices)).encode()).hexdigest()[:24]
        regions.append(Region(f"Layout-{key}", indices, [RULE] + [_option(b) for b in others],
                              flops))
    return sorted(regions, key=lambda r: -r.flops)


def _model_digest(graph: Graph) -> str:
    """The model's nodes as the lowering sees them, minus schedules and layouts."""
    from ..driver import kernel_key  # the driver imports the tuner
    keys = [kernel_key(dataclasses.replace(n, schedule=None, attrs=_with_layout(n.attrs, RULE)))
            for n in graph.nodes]
    return hashlib.sha256(repr(keys).encode()).hexdigest()


def _layout_updates(option: dict) -> tuple:
    """The (attr, value) updates that put a member in the option's layout (builder's
    updated_attrs); for RULE, the plain layout's: the rule's marks dropped."""
    return tuple(layout_attrs(option_block(option)).items())


def _with_layout(attrs: dict, option: dict) -> dict:
    return updated_attrs(attrs, _layout_updates(option))


def _moved(n: Node, option: dict, spec: MachineSpec) -> Node:
    """A copy of member n in the option's layout, with its default schedule there."""
    moved = dataclasses.replace(n, attrs=_with_layout(n.attrs, option))
    if n.schedule is not None:
        moved.schedule = default_schedule(moved, spec)
    return moved


def layout_variant(graph: Graph, region: Region, option: dict,
                   spec: MachineSpec) -> ModelVariant:
    """The model as it stands with the region in `option`: its members' layout attrs, and
    the default schedules of its convs in that layout."""
    schedules = [n.schedule for n in graph.nodes]
    if option == RULE:
        return ModelVariant(tuple(schedules))
    for k in region.indices:
        schedules[k] = _moved(graph.nodes[k], option, spec).schedule
    updates = _layout_updates(option)
    return ModelVariant(tuple(schedules), tuple((k, updates) for k in region.indices))


def apply_layout(graph: Graph, region: Region, spec: MachineSpec) -> None:
    """Puts the region's members in its chosen layout, with their default schedules."""
    if region.chosen == RULE:
        return
    for k in region.indices:
        moved = _moved(graph.nodes[k], region.chosen, spec)
        graph.nodes[k].attrs, graph.nodes[k].schedule = moved.attrs, moved.schedule


def region_summary(region: Region) -> dict:
    def ms(option):
        s = region.seconds.get(option_name(option))
        return None if s is None else round(s * 1e3, 4)
    return {"region": region.key, "nodes": len(region.indices),
            "mflops": round(region.flops / 1e6, 1), "source": region.source,
            "chosen": region.chosen, "rule_ms": ms(RULE), "chosen_ms": ms(region.chosen),
            "tried": sorted(region.seconds)}
