"""Load an artifact directory and run it through its C ABI (ctypes).

`load` looks at model.so's ELF header: an artifact built for this CPU's architecture is
loaded into the process; one built for another (aarch64 on an x86-64 worker) cannot be, so
`load` returns an EmulatedModel instead, whose `run` gives the same outputs through user-mode
emulation (runtime/emulation.py) — seconds per call, for checking correctness only.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from ..codegen.target_machine import host_spec
from .artifact_dir import check_feeds, empty_outputs, model_error, read_meta
from .elf import elf_arch
from .emulation import EmulatedModel


class LoadedModel:
    emulated = False

    def __init__(self, directory, threads: int = 1):
        directory = Path(directory)
        self.meta = read_meta(directory)
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
        return check_feeds(self.inputs, feeds)

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        arrays = self._check(feeds)
        outs = empty_outputs(self.outputs)
        self.run_into(arrays, outs)
        return {s["name"]: o for s, o in zip(self.outputs, outs)}

    def profile(self, feeds: dict, runs: int = 10) -> list[dict]:
        """Mean wall time of each kernel over `runs` runs, in model order (profile_runs)."""
        means = self.profile_runs(feeds, runs).mean(axis=0)
        return [{"name": k["name"], "op": k["op"], "mean_ms": float(ms)}
                for k, ms in zip(self.meta["kernels"], means)]

    def profile_runs(self, feeds: dict, runs: int = 10) -> np.ndarray:
        """Milliseconds of each kernel (columns, model order) in each of `runs` runs (rows),
        after one untimed run. Profiles follow other work (an interleaved comparison whose
        last turn was ONNX Runtime's): our thread pool has gone to sleep, and the first
        kernel of the first run waits for it. AMD EPYC (LLVM: znver5), 2 threads,
        YOLOv8n-320's first kernel (the input's padding) took 0.1 to 7.9 ms in a first run
        right after ONNX Runtime's calls, 0.05 ms in the next ones; `make bench` reported
        0.636 ms."""
        arrays = self._check(feeds)
        outs = empty_outputs(self.outputs)
        fn = self._lib.tf_profile
        fn.restype = ctypes.c_int
        count = len(self.meta["kernels"])
        ns = np.zeros((runs + 1, max(count, 1)), np.int64)  # tf_profile adds to its row
        ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outp = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        for row in ns:
            fn(ins, outp, ctypes.c_void_p(self._arena_ptr), ctypes.c_void_p(row.ctypes.data))
        return ns[1:, :count] / 1e6

    def run_into(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        self.bind(arrays, outs)()

    def bind_feeds(self, feeds: dict):
        """`bind` on checked copies of `feeds` and fresh output buffers (call.buffers[1])."""
        outs = [np.empty(s["shape"], np.dtype(s["dtype"])) for s in self.outputs]
        return self.bind(self._check(feeds), outs)

    def outputs_of(self, call) -> dict[str, np.ndarray]:
        """What a bound call last wrote, by output name."""
        return {s["name"]: o for s, o in zip(self.outputs, call.buffers[1])}

    def bind(self, arrays: list[np.ndarray], outs: list[np.ndarray]):
        """A no-argument call running the model on these exact buffers (the benchmark path:
        marshalling pointers per call would cost more than a small model's whole run)."""
        ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outp = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        run, arena, meta = self._run, ctypes.c_void_p(self._arena_ptr), self.meta

        def call():
            rc = run(ins, outp, arena)
            if rc != 0:
                raise model_error(meta, rc)
        call.buffers = (arrays, outs)  # the buffers must live as long as the call
        call.model = self  # and so must the library and the arena it frees when collected
        return call


def load(directory, threads: int = 1) -> LoadedModel | EmulatedModel:
    """The artifact, in this process when it is built for this CPU, else under emulation."""
    so = Path(directory) / "model.so"
    if so.is_file() and elf_arch(so) != host_spec().arch:
        return EmulatedModel(directory, threads)
    return LoadedModel(directory, threads)
