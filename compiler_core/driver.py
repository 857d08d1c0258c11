"""cc.compile: ONNX model -> CompiledModel (the artifact files, in memory until saved)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

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
            tuning=None) -> Artifact:
    if opt_level not in (0, 1, 2, 3):
        raise CompileError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    tgt = get_target(target)
    started = time.perf_counter()
    graph = run_pipeline(import_model(model, input_shapes), opt_level)
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
    missing = sorted({n.op for n in graph.nodes if n.op not in LOWERINGS})
    if missing:
        raise CompileError(f"no kernel for graph ops {missing}")
    steps = []
    for n in graph.nodes:
        if n.outputs[0] in plan.views:
            continue
        kernel = lower_node(n, f"k{len(steps)}_{n.op}")
        steps.append(Step(kernel, kernel_params(n), n.guards))
    return steps


def pack_weights(plan: MemoryPlan) -> bytes:
    blob = bytearray(plan.weights_size)
    for v, offset in plan.weights:
        data = np.ascontiguousarray(v.const, dtype=v.dtype).tobytes()
        blob[offset:offset + len(data)] = data
    return bytes(blob)
