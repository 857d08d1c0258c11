"""The artifact directory: model.so, model.h, meta.json, README.txt."""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import numpy as np

from .kernels.packed_gemm import strassen_layers
from .passes.blocked_layout import blocked_layers
from .passes.winograd_convs import winograd_layers
from .version import __version__

C_TYPES = {"float32": "float", "float64": "double", "float16": "uint16_t /* half */",
           "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
           "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t",
           "bool": "uint8_t /* bool */"}


class Artifact:
    """A compiled model: its files, held in memory. `save(dir)` writes them; `run` loads them."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self._loaded = None
        self._tmp = None

    @property
    def meta(self) -> dict:
        return json.loads(self.files["meta.json"])

    def with_meta(self, **entries) -> "Artifact":
        """The same files with `entries` added to meta.json (whose sha256 list covers the
        other files only, so it stays right)."""
        return Artifact({**self.files, "meta.json": json.dumps({**self.meta, **entries},
                                                               indent=2).encode()})

    def save(self, directory) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (directory / name).write_bytes(data)
        return directory

    def load(self, threads: int = 1):
        from .runtime.loaded_model import load
        if self._loaded is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tensorforge-run-")
            self._loaded = load(self.save(self._tmp.name), threads=threads)
        return self._loaded

    def run(self, feeds: dict) -> dict:
        return self.load().run(feeds)


def io_spec(values) -> list[dict]:
    return [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name} for v in values]


def artifact_files(graph, target, opt_level, steps, so_bytes, stats, tuning,
                   analysis: dict) -> dict[str, bytes]:
    """`analysis`: "kernels", one dict per kernel step (FLOPs, bytes, ONNX nodes; see
    analysis/node_cost.py), and "layers", the same per ONNX node of the imported model."""
    inputs, outputs, target_info = io_spec(graph.inputs), io_spec(graph.outputs), target.as_dict()
    files = {"model.so": so_bytes,
             "model.h": header_text(graph.name, inputs, outputs, stats["arena_bytes"]).encode(),
             "README.txt": readme_text(inputs, outputs, target_info).encode()}
    meta = {
        "format": "tensorforge-artifact/1",
        "compiler_version": __version__,
        "model_name": graph.name,
        "opset": graph.opset,
        "inputs": inputs,
        "outputs": outputs,
        "target": target_info,
        "opt_level": opt_level,
        "kernels": [{"name": s.kernel.name, "op": s.kernel.name.split("_", 1)[1], **info}
                    for s, info in zip([s for s in steps if s.kernel], analysis["kernels"])],
        "layers": analysis["layers"],
        "sparse_layers": sparse_layers(graph),
        "winograd_layers": winograd_layers(graph),
        "strassen_layers": strassen_layers(graph),
        "blocked_layers": blocked_layers(graph),
        "runtime_errors": [s.message for s in steps if s.error],  # code k -> entry k-1
        "op_histogram": graph.op_histogram(),
        "tuning": tuning_summary(tuning),
        "stats": stats,
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    files["meta.json"] = json.dumps(meta, indent=2).encode()
    return files


def sparse_layers(graph) -> list[dict]:
    """The weight matrices multiplied block-sparse (passes/sparse_weights.py): ONNX node,
    weight, shape (outputs, inputs), block shape, density of nonzero blocks, estimated speedup."""
    return [{"onnx_node": n.name, **n.attrs["sparsity"]} for n in graph.nodes
            if n.op == "SparseGemm"]


def tuning_summary(tuning: dict | None) -> dict:
    """`tuning` is the tuner's summary (tune/tuner.py), None when the compile did not tune."""
    return tuning or {"enabled": False, "request": None}


def _c_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def header_text(model_name: str, inputs, outputs, arena_bytes: int) -> str:
    def lines(kind, specs):
        out = []
        for k, s in enumerate(specs):
            dims = "x".join(map(str, s["shape"])) or "scalar"
            count = int(np.prod(s["shape"], dtype=np.int64))
            out.append(f" *   {kind}[{k}] {s['name']!r}: {s['dtype']} {dims} "
                       f"({count} x {C_TYPES[s['dtype']]})")
            out.append(f"#define TF_{kind.upper()}_{_c_name(s['name']).upper()}_INDEX {k}")
            out.append(f"#define TF_{kind.upper()}_{_c_name(s['name']).upper()}_COUNT {count}")
        return out
    body = "\n".join(lines("input", inputs) + lines("output", outputs))
    body = re.sub(r"^(#define.*)$", r" */\n\1\n/*", body, flags=re.M)
    return f"""/* Generated by Tensorforge {__version__} for model {model_name!r}. */
#ifndef TENSORFORGE_MODEL_H
#define TENSORFORGE_MODEL_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

#define TF_NUM_INPUTS {len(inputs)}
#define TF_NUM_OUTPUTS {len(outputs)}
#define TF_ARENA_BYTES {arena_bytes}

/* Tensors are dense, row-major (C order).
{body}
 */

/* Runs the model using a static internal arena: not reentrant across threads. Returns 0, or
   k > 0 when the inputs take a path that cannot run at the compiled shapes: meta.json's
   runtime_errors[k-1] says which. */
int tf_run(const void *const *inputs, void *const *outputs);
/* Reentrant: the caller passes scratch memory of tf_arena_size() bytes, 64-byte aligned. */
int tf_run_with_arena(const void *const *inputs, void *const *outputs, void *arena);
size_t tf_arena_size(void);
/* Like tf_run_with_arena, adding each kernel's wall time in nanoseconds to ns[k]. */
int tf_profile(const void *const *inputs, void *const *outputs, void *arena, int64_t *ns);
int tf_num_kernels(void);
/* Threads for the model's parallel loops (default 1); returns the value in effect. */
int tf_set_num_threads(int n);

#ifdef __cplusplus
}}
#endif
#endif
"""


def readme_text(inputs, outputs, target: dict) -> str:
    feeds = ", ".join(f'"{s["name"]}": np.zeros({tuple(s["shape"])}, np.{s["dtype"]})'
                      for s in inputs)
    arch = target["arch"]
    return f"""Tensorforge compiled model
==========================

Files: model.so (the model: C ABI, weights embedded, needs only libc and libm; parallel
loops run on its own thread pool), model.h (entry points, tensor names, shapes and
dtypes), meta.json (details and checksums).

Built for target {target["name"]!r}: {target["description"]}.
Code: {arch} Linux (glibc), LLVM cpu {target["cpu"]}. Copy this directory to such a machine
and call it there as shown below. On a machine of another architecture, cc.load runs it
under user-mode emulation (qemu-{arch}): a correctness check, far slower than the device.

From Python (with the tensorforge compiler_core package installed):

    import numpy as np, compiler_core as cc
    m = cc.load("this/directory", threads=1)
    outputs = m.run({{{feeds}}})

From Python with ctypes only:

    import ctypes, numpy as np
    lib = ctypes.CDLL("./model.so")
    ins = [...]   # numpy arrays, C-contiguous, in model.h order
    outs = [...]  # preallocated numpy arrays, in model.h order
    arr = lambda xs: (ctypes.c_void_p * len(xs))(*[x.ctypes.data for x in xs])
    lib.tf_run(arr(ins), arr(outs))

From C:

    #include "model.h"
    const void *inputs[TF_NUM_INPUTS] = {{ /* pointers to input data */ }};
    void *outputs[TF_NUM_OUTPUTS] = {{ /* pointers to output buffers */ }};
    tf_run(inputs, outputs);
    /* build on the device: cc main.c ./model.so -o main
       or cross-compile on Debian: {arch}-linux-gnu-gcc main.c ./model.so -o main */

Inputs: {", ".join(f"{s['name']} {s['dtype']}{s['shape']}" for s in inputs)}
Outputs: {", ".join(f"{s['name']} {s['dtype']}{s['shape']}" for s in outputs)}
"""
