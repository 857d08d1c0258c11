"""A kernel family for autotuner tests, y = 2x, whose schedules misbehave on purpose: one
segfaults, one never ends, one computes the wrong result, one is slow (the default) and one
is fast. Real generated kernels, run by the real runner: the tuner must survive the first
three, never choose them, and pick the fast one."""
from __future__ import annotations

from dataclasses import dataclass

from compiler_core.kernels.registry import lowering
from compiler_core.kernels.schedule import default_rule, search_space

OP = "TuneProbe"
MODES = ("crash", "hang", "wrong", "slow", "fast")


@dataclass(frozen=True)
class ProbeSchedule:
    mode: str


@default_rule(OP)
def default_probe(node, spec) -> ProbeSchedule:
    return ProbeSchedule("slow")


@search_space(OP)
def probe_space(node, spec) -> list[ProbeSchedule]:
    return [ProbeSchedule(m) for m in MODES]


@lowering(OP)
def lower_probe(node, kb, ins, outs):
    x, y = ins[0], outs[0]
    mode = node.schedule.mode
    n = x.shape[-1]
    spin = kb.local(x.dtype, 0.0, name="spin")
    rounds = {"hang": 1 << 62, "slow": 200_000}.get(mode, 1)
    # a recurrence (each round waits for the last), not a sum LLVM may reassociate into
    # vector lanes: 200k rounds are a fraction of a millisecond on any core
    with kb.loop(rounds, name="r"):
        kb.set(spin, kb.get(spin) * 0.5 + 1.0)
    with kb.loop(n) as i:
        value = x[0, i] * 2.0 + kb.get(spin) * 0.0
        if mode == "wrong":
            value = value + 1.0
        where = i + (1 << 40) if mode == "crash" else i
        kb.store(y, (0, where), value)
