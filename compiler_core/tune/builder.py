"""Builder: candidate schedules of one kernel -> one shared library with a kernel each.

A candidate is the workload's node carrying the candidate schedule, finished by the same
passes that follow schedule assignment in the real pipeline (weight packing), so the kernel
built here is the kernel a model compiled with that schedule would call. All candidates of a
batch go into one KernelLibrary (one LLVM module, one link); when that fails, each is built
alone so that one bad candidate does not sink the batch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..codegen.standalone import KernelLibrary
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node
from ..kernels import add_error_flags, lower_node
from ..passes.pipeline import split_at_schedules


@dataclass
class BuildTask:
    """What a builder (and runner) needs: picklable, so it crosses process boundaries."""
    node: Node             # the workload's node before weight packing
    schedules: list        # candidate schedules; schedules[0] is the reference (the default)
    spec: MachineSpec
    opt_level: int
    checked: list[int]     # outputs compared with the reference (the others are scratch)
    threads: int = 1
    weight_dtype: str = "float32"


def finished_node(task: BuildTask, schedule) -> Node:
    """The node as the model's build would lower it with this schedule."""
    node = dataclasses.replace(task.node, schedule=schedule, inputs=list(task.node.inputs),
                               outputs=list(task.node.outputs), attrs=dict(task.node.attrs))
    graph = Graph([v for v in node.inputs if v is not None and not v.is_const],
                  list(node.outputs), [node])
    for p in split_at_schedules(task.opt_level, task.spec, task.weight_dtype)[1]:
        graph = p(graph)
    (node,) = add_error_flags(graph).nodes
    return node


@dataclass
class Built:
    """Per candidate: its finished node, (library, kernel index) and the error that kept it
    from a kernel (None when built)."""
    nodes: list
    libs: list
    errors: list


def build_batch(task: BuildTask) -> Built:
    nodes, kernels, errors = [], [], []
    for k, s in enumerate(task.schedules):
        try:
            node = finished_node(task, s)
            kernels.append(lower_node(node, f"cand{k}_{node.op}", task.spec))
            nodes.append(node)
            errors.append(None)
        except Exception as exc:  # noqa: BLE001  a lowering refusing a candidate fails it alone
            nodes.append(None)
            kernels.append(None)
            errors.append(f"lowering: {type(exc).__name__}: {exc}")
    return Built(nodes, _libraries(kernels, task.spec, errors), errors)


def _libraries(kernels: list, spec: MachineSpec, errors: list) -> list:
    good = [k for k, kern in enumerate(kernels) if kern is not None]
    try:
        lib = KernelLibrary([kernels[k] for k in good], spec)
        return [(lib, good.index(k)) if k in good else None for k in range(len(kernels))]
    except (RuntimeError, OSError):  # LLVM or the linker: find the candidate to blame
        pass
    libs: list = [None] * len(kernels)
    for k in good:
        try:
            libs[k] = (KernelLibrary([kernels[k]], spec), 0)
        except (RuntimeError, OSError) as exc:
            errors[k] = f"build: {type(exc).__name__}: {exc}"
    return libs
