"""cc.compile: ONNX model -> CompiledModel (the artifact files, in memory until saved)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .artifact import Artifact, artifact_files
from .codegen.link import emit_object, link_shared
from .codegen.module_builder import Step, build_module
from .codegen.parallel import uses_openmp
from .errors import CompileError
from .frontend.onnx import import_model
from .ir import Graph
from .kernels import LOWERINGS, kernel_params, lower_node
from .passes.memory_plan import MemoryPlan, plan_memory
from .passes.pipeline import run_pipeline
from .targets import get_target


def compile(model, input_shapes: dict | None = None, target: str = "native", opt_level: int = 3,
            tuning=None, progress: Callable[[str], None] | None = None) -> Artifact:
    """`progress(stage)` is called as each stage starts: validate, optimize, [tune,] build."""
    report = progress or (lambda stage: None)
    if opt_level not in (0, 1, 2, 3):
        raise CompileError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    tgt = get_target(target)
    started = time.perf_counter()
    report("validate")
    graph = import_model(model, input_shapes)
    report("optimize")
    graph = run_pipeline(graph, opt_level)
    if tuning:
        report("tune")
    report("build")
    plan = plan_memory(graph)
    steps = lower_graph(graph, plan)
    module = build_module(graph.name, tgt.spec.triple, steps, plan)
    obj = emit_object(str(module), tgt.spec, opt_level)
    with tempfile.TemporaryDirectory(prefix="tensorforge-") as tmp:
        so_path = Path(tmp) / "model.so"
        link_shared(obj, pack_weights(plan), Path(tmp) / "build", so_path, uses_openmp(module))
        so_bytes = so_path.read_bytes()
    stats = {"compile_seconds": round(time.perf_counter() - started, 3),
             "arena_bytes": plan.arena_size, "weights_bytes": plan.weights_size,
             "nodes": len(graph.nodes), "kernels": len(steps)}
    return Artifact(artifact_files(graph, tgt, opt_level, steps, so_bytes, stats, tuning))


def lower_graph(graph: Graph, plan: MemoryPlan) -> list[Step]:
    missing = sorted({n.op for n in graph.nodes if n.op not in LOWERINGS and n.op != "Unreachable"})
    if missing:
        raise CompileError(f"no kernel for graph ops {missing}")
    steps, errors = [], 0
    kernels: dict[tuple, object] = {}  # nodes that differ only in their data share code
    for n in graph.nodes:
        if n.op == "Unreachable":
            errors += 1
            steps.append(Step(None, [], n.guards, error=errors, message=n.attrs["message"]))
            continue
        if n.outputs[0] in plan.views:
            continue
        key = kernel_key(n)
        if key not in kernels:
            kernels[key] = lower_node(n, f"k{len(kernels)}_{n.op}")
        steps.append(Step(kernels[key], kernel_params(n), n.guards))
    return steps


def kernel_key(n) -> tuple:
    """What a lowering may depend on: op, attrs and the shapes and dtypes of its params."""
    def sig(v):
        return None if v is None else (v.shape, v.dtype.str)
    return (n.op, _frozen(n.attrs), tuple(map(sig, n.inputs)), tuple(map(sig, n.outputs)))


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
