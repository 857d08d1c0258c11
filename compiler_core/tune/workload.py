"""What a tuning record is about: the workload (one kernel as the lowering sees it, minus its
schedule) and the target (the machine code is generated for and timed on).

The workload key is a digest of `driver.kernel_key` of the node with no schedule, taken
before weight packing (packing follows the schedule). Two nodes with the same key get the
same kernel for the same schedule, so a record measured for one serves the other, in this
model or any other. The target key is the LLVM triple, CPU and features, plus the thread
count the kernels were timed with (a parallel split tuned for one core is not the one for
eight).
"""
from __future__ import annotations

import dataclasses
import hashlib

from ..codegen.target_machine import MachineSpec
from ..ir import Node


def workload_key(node: Node, weight_dtype: str = "float32") -> str:
    """`<op>-<digest>`: the op stays readable in records files. Weights stored at reduced
    precision (passes/weight_precision.py) make other kernels: another workload."""
    from ..driver import kernel_key  # the driver imports the tuner
    key = kernel_key(dataclasses.replace(node, schedule=None))
    if weight_dtype != "float32":
        key = (key, weight_dtype)
    return f"{node.op}-{hashlib.sha256(repr(key).encode()).hexdigest()[:24]}"


def target_key(spec: MachineSpec, threads: int = 1) -> str:
    features = ",".join(sorted(f for f in spec.features.split(",") if f.startswith("+")))
    digest = hashlib.sha256(features.encode()).hexdigest()[:12]
    return f"{spec.triple}/{spec.cpu}/{digest}/t{threads}"


def schedule_fields(schedule) -> dict:
    return dataclasses.asdict(schedule)


def schedule_from_fields(fields: dict, candidates: list):
    """The candidate equal to a recorded schedule, or None: records only ever select one of
    the node's own candidates, so a stale or hand-edited file cannot inject a schedule the
    kernel family does not offer."""
    for c in candidates:
        if dataclasses.asdict(c) == fields:
            return c
    return None
