"""Load an artifact directory and run it through its C ABI (ctypes)."""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from ..errors import RuntimeInputError


class LoadedModel:
    def __init__(self, directory, threads: int = 1):
        directory = Path(directory)
        meta_path = directory / "meta.json"
        if not meta_path.is_file() or not (directory / "model.so").is_file():
            raise FileNotFoundError(f"{directory} is not a Tensorforge artifact directory "
                                    "(model.so and meta.json expected)")
        self.meta = json.loads(meta_path.read_text())
        self.directory = directory
        self.threads = max(int(threads), 1)
        self._lib = ctypes.CDLL(str((directory / "model.so").resolve()))
        self._run = self._lib.tf_run_with_arena
        self._run.restype = ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._lib.tf_set_num_threads.argtypes = [ctypes.c_int]
        self._lib.tf_set_num_threads(self.threads)
        self._lib.tf_arena_size.restype = ctypes.c_size_t
        size = int(self._lib.tf_arena_size())
        self._arena = np.empty(size + 64, np.uint8)
        self._arena_ptr = (self._arena.ctypes.data + 63) // 64 * 64
        self.inputs = self.meta["inputs"]
        self.outputs = self.meta["outputs"]

    def _check(self, feeds: dict) -> list[np.ndarray]:
        names = [s["name"] for s in self.inputs]
        missing = [n for n in names if n not in feeds]
        extra = [n for n in feeds if n not in names]
        if missing or extra:
            raise RuntimeInputError(f"inputs must be exactly {names}; missing {missing}, "
                                    f"unexpected {extra}")
        arrays = []
        for spec in self.inputs:
            a = np.asarray(feeds[spec["name"]])
            if list(a.shape) != spec["shape"]:
                raise RuntimeInputError(f"input {spec['name']!r} has shape {list(a.shape)}, the "
                                        f"model was compiled for {spec['shape']}")
            if a.dtype != np.dtype(spec["dtype"]):
                raise RuntimeInputError(f"input {spec['name']!r} has dtype {a.dtype}, the model "
                                        f"expects {spec['dtype']}")
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        arrays = self._check(feeds)
        outs = [np.empty(s["shape"], np.dtype(s["dtype"])) for s in self.outputs]
        self.run_into(arrays, outs)
        return {s["name"]: o for s, o in zip(self.outputs, outs)}

    def profile(self, feeds: dict, runs: int = 10) -> list[dict]:
        """Mean wall time of each kernel over `runs` runs, in model order."""
        arrays = self._check(feeds)
        outs = [np.empty(s["shape"], np.dtype(s["dtype"])) for s in self.outputs]
        fn = self._lib.tf_profile
        fn.restype = ctypes.c_int
        count = len(self.meta["kernels"])
        ns = np.zeros(max(count, 1), np.int64)
        ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outp = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        for _ in range(runs):
            fn(ins, outp, ctypes.c_void_p(self._arena_ptr), ctypes.c_void_p(ns.ctypes.data))
        return [{"name": k["name"], "op": k["op"], "mean_ms": float(t) / runs / 1e6}
                for k, t in zip(self.meta["kernels"], ns)]

    def run_into(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        self.bind(arrays, outs)()

    def bind(self, arrays: list[np.ndarray], outs: list[np.ndarray]):
        """A no-argument call running the model on these exact buffers (the benchmark path:
        marshalling pointers per call would cost more than a small model's whole run)."""
        ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outp = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        run, arena = self._run, ctypes.c_void_p(self._arena_ptr)
        messages = self.meta.get("runtime_errors", [])

        def call():
            rc = run(ins, outp, arena)
            if rc != 0:
                known = 0 < rc <= len(messages)
                raise RuntimeInputError(messages[rc - 1] if known else f"model error code {rc}")
        call.buffers = (arrays, outs)  # the buffers must live as long as the call
        return call


def load(directory, threads: int = 1) -> LoadedModel:
    return LoadedModel(directory, threads)
