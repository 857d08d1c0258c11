"""cc.compile: ONNX model -> CompiledModel (the artifact files, in memory until saved)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .analysis.node_cost import graph_costs, node_cost
from .artifact import Artifact, artifact_files
from .codegen.link import link_shared
from .codegen.module_builder import Step
from .codegen.split_build import build_objects
from .codegen.target_machine import MachineSpec
from .errors import CompileError
from .frontend.limits import check_arena
from .frontend.onnx import import_model
from .ir import Graph
from .kernels import (LOWERINGS, add_error_flags, error_message, has_error_flag, kernel_params,
                      lower_node)
from .passes.memory_plan import MemoryPlan, plan_memory
from .passes.pipeline import run_pipeline
from .passes.weight_precision import check_weight_dtype, reduced_layers
from .precision_check import weight_precision_report
from .targets import get_target
from .tune import RecordStore, Tuner, parse_tuning
from .tune.runner import run_batch


def compile(model, input_shapes: dict | None = None, target: str = "native", opt_level: int = 3,
            tuning=None, progress: Callable[[str], None] | None = None,
            link: Callable = link_shared, weight_dtype: str = "float32",
            sample_inputs: dict | None = None, on_tune: Callable[[dict], None] | None = None,
            records=None, measure: Callable | None = None,
            measure_slots: list[Callable] = ()) -> Artifact:
    """`progress(stage)` is called as each stage starts: validate, optimize, [tune,] build.
    `link` runs the system linker (link_shared's signature); a sandbox that forbids exec
    passes one that asks a helper process. `weight_dtype` "float16" or "int8" stores dense
    and recurrent weights at that precision (passes/weight_precision.py); the error this
    costs is measured against a float32 build on `sample_inputs` (default: random ones) and
    reported in meta.json's `weight_precision`. `tuning` (tune/request.py) makes the
    autotuner pick schedules; `on_tune(event)` follows its progress; `records` is a records
    store (tune/records.py) used instead of the request's records file (the service's table);
    `measure` replaces tune/runner.run_batch (a sandbox without exec asks a helper);
    `measure_slots` time batches elsewhere at the same time (the service's other workers)."""
    tuner = make_tuner(parse_tuning(tuning), get_target(target), opt_level, weight_dtype,
                       on_tune, records, measure, measure_slots)
    artifact, graph, tgt = _compile(model, input_shapes, target, opt_level, tuner, progress,
                                    link, weight_dtype)
    if weight_dtype == "float32":
        return artifact

    def build(target_name, dtype):
        return _compile(model, input_shapes, target_name, opt_level, None, None, link, dtype)[0]
    return artifact.with_meta(weight_precision=weight_precision_report(
        artifact, tgt, weight_dtype, build, reduced_layers(graph), sample_inputs))


def _compile(model, input_shapes, target, opt_level, tuner, progress, link, weight_dtype):
    """(artifact, optimized graph, target)."""
    report = progress or (lambda stage: None)
    if opt_level not in (0, 1, 2, 3):
        raise CompileError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    tgt = get_target(target)
    check_weight_dtype(weight_dtype, tgt.spec)
    started = time.perf_counter()
    report("validate")
    graph = import_model(model, input_shapes)
    layers = graph_costs(graph.nodes)  # before fusion: one entry per ONNX node
    onnx_ops = graph.onnx_ops
    report("optimize")
    graph = run_pipeline(graph, opt_level, tgt.spec, weight_dtype,
                         tuner and _stage(report, "tune", tuner))
    report("build")
    so_bytes, steps, step_nodes, plan = build_model(graph, tgt.spec, opt_level, link)
    analysis = work_analysis(layers, onnx_ops, steps, step_nodes)
    stats = {"compile_seconds": round(time.perf_counter() - started, 3),
             "arena_bytes": plan.arena_size, "weights_bytes": plan.weights_size,
             "nodes": len(graph.nodes), "kernels": len(steps),
             "flops": sum(k["flops"] for k in analysis["kernels"])}
    return Artifact(artifact_files(graph, tgt, opt_level, steps, so_bytes, stats,
                                   tuner and tuner.summary(), analysis)), graph, tgt


def build_model(graph: Graph, spec: MachineSpec, opt_level: int, link: Callable = link_shared):
    """(model.so's bytes, the entry point's steps, the node behind each, the memory plan) of
    a graph whose passes have all run."""
    plan = plan_memory(add_error_flags(graph))
    check_arena(plan.arena_size)  # before the arena or any kernel exists
    steps, step_nodes = lower_graph(graph, plan, spec)
    objects, threads = build_objects(graph.name, spec, opt_level, steps, plan)
    with tempfile.TemporaryDirectory(prefix="tensorforge-") as tmp:
        so_path = Path(tmp) / "model.so"
        link(objects, pack_weights(plan), Path(tmp) / "build", so_path, threads, spec.triple)
        return so_path.read_bytes(), steps, step_nodes, plan


def make_tuner(request, tgt, opt_level, weight_dtype, on_tune, records,
               measure=None, slots=()) -> Tuner | None:
    """The tuning pass for this compile; it only applies records when the target's code
    cannot run (and so cannot be timed) on this machine."""
    if request is None:
        return None
    runs = request.measures and tgt.runs_here
    tuner = Tuner(request, tgt.spec, opt_level, records or RecordStore(request.records),
                  measure=runs, on_progress=on_tune, weight_dtype=weight_dtype,
                  run=measure or run_batch, slots=slots)
    if request.measures and not runs:
        tuner.note = (f"not tuned: code for {tgt.name} cannot be timed on this machine; "
                      "records for it were applied")
    return tuner


def _stage(report, stage: str, fn):
    def run(graph):
        report(stage)
        return fn(graph)
    run.__name__ = fn.__class__.__name__
    return run


def work_analysis(layers: dict, onnx_ops: dict, steps: list[Step], step_nodes: list) -> dict:
    """What meta.json says about the work done: per kernel call FLOPs, bytes and the ONNX
    nodes it computes; per ONNX node (as imported, before fusion) FLOPs and bytes."""
    kernels = [{**node_cost(n).as_dict(), "onnx_nodes": list(n.onnx_nodes)}
               for n, s in zip(step_nodes, steps) if s.kernel]
    return {"kernels": kernels,
            "layers": [{"onnx_node": name, "op": onnx_ops.get(name), **cost.as_dict()}
                       for name, cost in layers.items()]}


def lower_graph(graph: Graph, plan: MemoryPlan, spec: MachineSpec) -> tuple[list[Step], list]:
    """The entry point's steps, and the graph node behind each."""
    missing = sorted({n.op for n in graph.nodes if n.op not in LOWERINGS and n.op != "Unreachable"})
    if missing:
        raise CompileError(f"no kernel for graph ops {missing}")
    steps, nodes, errors = [], [], 0
    kernels: dict[tuple, object] = {}  # nodes that differ only in their data share code
    for n in graph.nodes:
        if n.op == "Unreachable":
            errors += 1
            steps.append(Step(None, [], n.guards, error=errors, message=n.attrs["message"]))
            nodes.append(n)
            continue
        if n.outputs[0] in plan.elided:
            continue
        key = kernel_key(n)
        if key not in kernels:
            kernels[key] = lower_node(n, f"k{len(kernels)}_{n.op}", spec)
        step = Step(kernels[key], kernel_params(n), n.guards)
        if has_error_flag(n):  # its kernel flags out-of-range run-time indices
            errors += 1
            step.error, step.message = errors, error_message(n)
        steps.append(step)
        nodes.append(n)
    return steps, nodes


def kernel_key(n) -> tuple:
    """What a lowering may depend on: op, attrs, the shapes and dtypes of its params, and
    the node's schedule (a frozen dataclass, so hashable)."""
    def sig(v):
        return None if v is None else (v.shape, v.dtype.str)
    return (n.op, _frozen(n.attrs), tuple(map(sig, n.inputs)), tuple(map(sig, n.outputs)),
            n.schedule)


def _frozen(value):
    """A hashable, exact stand-in for an attribute value (repr abbreviates big arrays)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    return (type(value).__name__, repr(value))


def pack_weights(plan: MemoryPlan) -> bytes:
    blob = bytearray(plan.weights_size)
    for v, offset in plan.weights:
        data = np.ascontiguousarray(v.const, dtype=v.dtype).tobytes()
        blob[offset:offset + len(data)] = data
    return bytes(blob)
