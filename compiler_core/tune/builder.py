"""Builder: candidate schedules of one kernel -> one shared library with their kernels.

A candidate is the workload's node carrying the candidate schedule, finished by the same
passes that follow schedule assignment in the real pipeline (weight packing, Winograd), so
the kernels built here are the kernels a model compiled with that schedule would call. The
node's `prologue` (the ConvPad that pads its input in the model) is finished with it: a
schedule may prepare its input differently (Winograd reads the unpadded input in place),
so every candidate starts from the same unpadded input and is timed with its padding. All candidates of a batch go into one KernelLibrary (one LLVM module, one link);
when that fails, each is built alone so that one bad candidate does not sink the batch.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..codegen.split_build import fork_and_run
from ..codegen.standalone import KernelLibrary, build_library
from ..codegen.target_machine import MachineSpec
from ..ir import Graph, Node
from ..kernels import add_error_flags, lower_node
from ..passes.pipeline import split_at_schedules


@dataclass(frozen=True)
class ModelVariant:
    """A whole-model candidate: every node's schedule, in the graph's order, and the attrs
    some nodes take on top of their own (a region's layout, tune/layouts.py) as
    (node index, ((attr, value or None to drop it), ...)) pairs."""
    schedules: tuple
    attrs: tuple = ()


def updated_attrs(attrs: dict, updates) -> dict:
    """A copy of attrs with (name, value) updates, a value of None dropping the attr."""
    out = dict(attrs)
    for name, value in updates:
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


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
    prologue: list = field(default_factory=list)  # nodes computing the node's inputs first
    # a whole model instead of one node (the model check, tune/model_check.py, and the
    # layout search, tune/layouts.py): each of `schedules` is then a ModelVariant
    graph: Graph | None = None

    @property
    def ops(self) -> set[str]:
        return {n.op for n in self.graph.nodes} if self.graph else {self.node.op}


def _copy(node: Node, **changes) -> Node:
    return dataclasses.replace(node, inputs=list(node.inputs), outputs=list(node.outputs),
                               attrs=dict(node.attrs), **changes)


def finished_nodes(task: BuildTask, schedule) -> list[Node]:
    """The prologue and the node as the model's build would lower them with this schedule,
    in order (the node's own kernel, or what replaced it, last)."""
    nodes = [_copy(n) for n in task.prologue] + [_copy(task.node, schedule=schedule)]
    made = {v for n in nodes for v in n.outputs}
    inputs = list(dict.fromkeys(v for n in nodes for v in n.inputs
                                if v is not None and not v.is_const and v not in made))
    graph = Graph(inputs, [task.node.outputs[k] for k in task.checked], nodes)
    for p in split_at_schedules(task.opt_level, task.spec, task.weight_dtype)[1]:
        graph = p(graph)
    return add_error_flags(graph).nodes


def finished_model(task: BuildTask, variant: ModelVariant) -> Graph:
    """The task's graph as the model's build would finish it as this variant."""
    nodes = [_copy(n, schedule=s) for n, s in zip(task.graph.nodes, variant.schedules)]
    for index, updates in variant.attrs:
        nodes[index].attrs = updated_attrs(nodes[index].attrs, updates)
    graph = dataclasses.replace(task.graph, inputs=list(task.graph.inputs),
                                outputs=list(task.graph.outputs), nodes=nodes)
    for p in split_at_schedules(task.opt_level, task.spec, task.weight_dtype)[1]:
        graph = p(graph)
    return graph


@dataclass
class Built:
    """Per candidate: its finished nodes, one (library, kernel index) per node, and the error
    that kept it from kernels (None when built)."""
    nodes: list
    libs: list
    errors: list


def build_batch(task: BuildTask) -> Built:
    nodes, kernels, errors = [], [], []
    for k, s in enumerate(task.schedules):
        try:
            finished = finished_nodes(task, s)
            kernels.append([lower_node(n, f"cand{k}_{j}_{n.op}", task.spec)
                            for j, n in enumerate(finished)])
            nodes.append(finished)
            errors.append(None)
        except Exception as exc:  # noqa: BLE001  a lowering refusing a candidate fails it alone
            nodes.append(None)
            kernels.append(None)
            errors.append(f"lowering: {type(exc).__name__}: {exc}")
    return Built(nodes, _libraries(kernels, task.spec, task.opt_level, errors), errors)


def _libraries(kernels: list, spec: MachineSpec, opt_level: int, errors: list) -> list:
    """Per candidate, its kernels' (library, index) list, or None. Half the candidates are
    built in a forked process meanwhile (LLVM holds a lock: threads would take turns)."""
    good = [k for k, kern in enumerate(kernels) if kern is not None]
    libs: list = [None] * len(kernels)
    with tempfile.TemporaryDirectory(prefix="tensorforge-batch-") as tmp:
        apart, here = good[:len(good) // 2], good[len(good) // 2:]
        path = Path(tmp) / "apart.so"
        pid = fork_and_run(lambda: build_library(_flat(kernels, apart), spec, opt_level, path)) \
            if apart else 0
        libs_here = _library(kernels, here, spec, opt_level, errors)
        built = pid and os.waitpid(pid, 0)[1] == 0
        for k, got in {**_library(kernels, apart, spec, opt_level, errors,
                                 path if built else None),
                       **libs_here}.items():
            libs[k] = got
    return libs


def _flat(kernels: list, share: list[int]) -> list:
    return [kern for k in share for kern in kernels[k]]


def _library(kernels: list, share: list[int], spec: MachineSpec, opt_level: int,
             errors: list, built: Path | None = None) -> dict:
    """{candidate: its kernels' (library, index) list} for the candidates in `share`: one
    library for all (`built` already, if given), else one each to find the one to blame."""
    if not share:
        return {}
    try:
        lib = KernelLibrary(_flat(kernels, share), spec, opt_level, built=built)
        libs, first = {}, 0
        for k in share:
            libs[k] = [(lib, first + j) for j in range(len(kernels[k]))]
            first += len(kernels[k])
        return libs
    except (RuntimeError, OSError):  # LLVM or the linker
        pass
    libs = {}
    for k in share:
        try:
            alone = KernelLibrary(kernels[k], spec, opt_level)
            libs[k] = [(alone, j) for j in range(len(kernels[k]))]
        except (RuntimeError, OSError) as exc:
            errors[k] = f"build: {type(exc).__name__}: {exc}"
    return libs
