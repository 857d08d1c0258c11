"""The accuracy cost of reduced-precision weights, measured on every such compile.

The artifact with float16/int8 weights and a float32 build of the same model (same opt
level, same machine code apart from the weights) run on the same sample inputs; per output
the report gives the largest absolute difference and the relative one (that difference over
the output's largest float32 magnitude, as `bench` reports its error against ONNX Runtime).

Generated code runs here, so both builds are for a target this machine runs: the requested
one when it can, else the host's (`measured_on` says which). The weights, and so the error,
are the same for every target; only the order of float32 additions differs.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .artifact import Artifact
from .runtime.feeds import random_feeds

Build = Callable[[str, str], Artifact]  # (target name, weight_dtype) -> artifact


def output_errors(got: dict, ref: dict) -> dict[str, dict]:
    """Per output: max_abs_err, and max_rel_err relative to the output's largest |ref|."""
    errors = {}
    for name, r in ref.items():
        diff = np.abs(np.asarray(got[name], np.float64) - np.asarray(r, np.float64))
        worst = float(np.max(diff, initial=0.0))
        scale = float(np.max(np.abs(r), initial=0.0))
        errors[name] = {"max_abs_err": worst, "max_rel_err": worst / max(scale, 1e-30)}
    return errors


def weight_precision_report(artifact: Artifact, target, weight_dtype: str, build: Build,
                            layers: list[dict], sample_inputs: dict | None = None) -> dict:
    """What meta.json's `weight_precision` holds: the dtype, the converted layers, and the
    error on `sample_inputs` (default: the benchmark's deterministic random inputs)."""
    runnable = artifact if target.runs_here else build("native", weight_dtype)
    reference = build(target.name if target.runs_here else "native", "float32")
    feeds = sample_inputs if sample_inputs is not None else random_feeds(artifact.meta["inputs"])
    errors = output_errors(runnable.run(feeds), reference.run(feeds))
    return {"weight_dtype": weight_dtype, "layers": layers,
            "accuracy": {"measured_on": target.name if target.runs_here else "native",
                         "inputs": "given" if sample_inputs is not None else "random (seed 0)",
                         "outputs": errors,
                         "max_abs_err": max((e["max_abs_err"] for e in errors.values()), default=0.0),
                         "max_rel_err": max((e["max_rel_err"] for e in errors.values()), default=0.0)}}
