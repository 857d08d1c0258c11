"""The model check: tuned schedules against the defaults inside the whole model.

A kernel is tuned alone, on its own inputs, weights cycled through cold copies; in the model
its input comes warm from the kernel before, and its output feeds the next. Most of the time
the two agree, but a schedule that wins alone can lose in the model (znver4, MobileNetV3,
4 minutes of tuning: one run's tuned model was 0.963 of the untuned speed, all its kernels
faster alone). So once the search is over, the model is built twice, exactly as
cc.compile builds it: once with every newly chosen schedule, once with those kernels at
their default, and the two are profiled taking turns (tune/measure_model.py). Unless the
tuned model is faster round by round (tune/paired.py), every workload keeps its default;
if it is, a workload keeps its tuned schedule only when its kernels take less time in the
tuned model than in the default one.

Both in-model times go to the records store under the workload's key plus IN_MODEL, and
they outrank the kernel's own timings whenever those records are reused: a compile from
the records makes the same choice without measuring anything.
"""
from __future__ import annotations

MAX_WEIGHT_BYTES = 512 << 20  # a bigger model, pickled and built twice, may not fit a worker
IN_MODEL = "@model"


def in_model_key(workload_key: str) -> str:
    return workload_key + IN_MODEL


def weight_bytes(graph) -> int:
    seen = {v for n in graph.nodes for v in n.inputs if v is not None and v.is_const}
    return sum(v.nbytes for v in seen)


def onnx_names(nodes) -> set[str]:
    return {name for n in nodes for name in n.onnx_nodes}


def seconds_in_model(names: set[str], parts: list) -> float:
    """Time of the model's kernels that compute any of these ONNX nodes (a Winograd conv's
    transforms, a conv's padding: all of it)."""
    return sum(seconds for onnx_nodes, seconds in parts if names.intersection(onnx_nodes))
