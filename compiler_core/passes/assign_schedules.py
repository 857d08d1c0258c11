"""Give every node whose kernel has knobs its schedule for the target (kernels/schedule.py).

Runs late, after the passes that rewrite nodes and before the ones that follow schedules
(weight packing). A node that already carries a schedule (from tuning records) keeps it.
"""
from __future__ import annotations

from ..codegen.target_machine import MachineSpec
from ..ir import Graph
from ..kernels.schedule import default_schedule


def assign_schedules_for(spec: MachineSpec):
    def assign_schedules(graph: Graph) -> Graph:
        for n in graph.nodes:
            if n.schedule is None:
                n.schedule = default_schedule(n, spec)
        return graph
    return assign_schedules
