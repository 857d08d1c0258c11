"""Running an artifact built for another CPU architecture under user-mode emulation.

A worker compiling for aarch64 cannot load an aarch64 model.so into its own process, but it
can check that the code computes the right thing. QEMU's user-mode emulator (`qemu-aarch64`,
Debian package qemu-user or qemu-user-static) runs tf_runner.c, a small native program built
with the target's cross gcc on first use and cached: it dlopens model.so, runs it on raw
input files and writes raw output files, in the artifact's I/O order. The target's libc
comes from the cross toolchain's sysroot (`qemu-<arch> -L /usr/<arch>-linux-gnu`).
Python for the target is not needed.

    outputs = run_emulated("out/", {"x": x})        # dict name -> numpy array, like cc.load

Emulation translates every target instruction on the host's CPU: it is tens of times slower
than the device and its timings follow the host, not the target. They mean nothing.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..codegen.link import LinkError, cross_packages, find_cross_cc
from .artifact_dir import check_feeds, model_error, read_meta
from .elf import elf_arch

RUNNER_SOURCE = Path(__file__).with_name("tf_runner.c")
EMULATION_NOTE = ("run under user-mode emulation (qemu) for a correctness check only: timings "
                  "under emulation mean nothing about the device; benchmark on the device")


class EmulationError(RuntimeError):
    """The emulated run could not be made or failed outside the model."""


def run_emulated(artifact_dir, feeds: dict, threads: int = 1) -> dict[str, np.ndarray]:
    """Run a foreign-architecture artifact once under emulation: outputs by name, in order.
    Raises RuntimeInputError for bad feeds (as cc.load's models do), EmulationError when the
    emulator or cross toolchain is missing (the message says what to install) or the run fails."""
    return EmulatedModel(artifact_dir, threads).run(feeds)


def emulation_missing(arch: str) -> str | None:
    """What this machine lacks to run `arch` artifacts (an install hint), or None."""
    lacking = []
    try:
        find_cross_cc(arch)
    except LinkError:
        lacking += cross_packages(arch)
    if _qemu(arch) is None:
        lacking.append("qemu-user")
    if not lacking:
        return None
    return (f"running {arch} code here needs its cross toolchain and user-mode emulator: "
            f"apt-get install {' '.join(lacking)} (or `make setup` as root)")


def _qemu(arch: str) -> str | None:
    return shutil.which(f"qemu-{arch}") or shutil.which(f"qemu-{arch}-static")


class EmulatedModel:
    """An artifact of another architecture, run under emulation; `run` as LoadedModel's."""
    emulated = True

    def __init__(self, directory, threads: int = 1):
        self.directory = Path(directory)
        self.meta = read_meta(self.directory)
        self.arch = elf_arch(self.directory / "model.so")
        self.threads = max(int(threads), 1)
        self.inputs = self.meta["inputs"]
        self.outputs = self.meta["outputs"]

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        return self.timed_run(feeds, runs=1)[0]

    def timed_run(self, feeds: dict, runs: int) -> tuple[dict[str, np.ndarray], list[float]]:
        """Outputs of the last of `runs` runs, and each run's emulated wall time in ms."""
        arrays = check_feeds(self.inputs, feeds)
        with tempfile.TemporaryDirectory(prefix="tensorforge-emulated-") as tmp:
            ins = _write_inputs(Path(tmp), arrays, self.inputs)
            outs = [(Path(tmp) / f"output{k}.bin", _nbytes(s)) for k, s in enumerate(self.outputs)]
            stdout = self._invoke(ins, outs, runs)
            outputs = {s["name"]: _read_output(path, s) for s, (path, _) in zip(self.outputs, outs)}
        return outputs, [float(line.split()[1]) for line in stdout if line.startswith("run_ms ")]

    def _invoke(self, ins, outs, runs: int) -> list[str]:
        cmd = [*emulator_command(self.arch), str(runner_binary(self.arch)),
               str((self.directory / "model.so").resolve()), str(self.threads), str(max(runs, 1)),
               str(len(ins)), str(len(outs))]
        cmd += [str(x) for pair in ins + outs for x in pair]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = proc.stdout.splitlines()
        if proc.returncode == 3 and lines and lines[-1].startswith("model_error "):
            raise model_error(self.meta, int(lines[-1].split()[1]))
        if proc.returncode != 0:
            raise EmulationError(f"the emulated {self.arch} run failed (exit status "
                                 f"{proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return lines


def _nbytes(spec: dict) -> int:
    return int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize


def _write_inputs(tmp: Path, arrays: list[np.ndarray], specs: list[dict]):
    """Raw input files, each paired with the size meta.json gives it (the runner checks)."""
    pairs = []
    for k, (a, spec) in enumerate(zip(arrays, specs)):
        a.tofile(tmp / f"input{k}.bin")
        pairs.append((tmp / f"input{k}.bin", _nbytes(spec)))
    return pairs


def _read_output(path: Path, spec: dict) -> np.ndarray:
    data = np.fromfile(path, np.dtype(spec["dtype"]))
    if data.nbytes != _nbytes(spec):
        raise EmulationError(f"output {spec['name']!r}: the runner wrote {data.nbytes} bytes, "
                             f"meta.json says {_nbytes(spec)}")
    return data.reshape(spec["shape"])


def emulator_command(arch: str) -> list[str]:
    """The command prefix that runs a dynamically linked `arch` Linux program here."""
    missing = emulation_missing(arch)
    if missing:
        raise EmulationError(missing)
    return [_qemu(arch), "-L", f"/usr/{arch}-linux-gnu"]


def runner_binary(arch: str) -> Path:
    """tf_runner built for `arch`, cached by the source's hash (built once per machine)."""
    source = RUNNER_SOURCE.read_bytes()
    path = cache_dir() / f"tf_runner-{arch}-{hashlib.sha256(source).hexdigest()[:12]}"
    if not path.is_file():
        _build_runner(arch, path)
    return path


def _build_runner(arch: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # then renamed: concurrent builds
    cmd = [find_cross_cc(arch), "-std=gnu11", "-O2", "-Wall", "-o", str(tmp),
           str(RUNNER_SOURCE), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EmulationError(f"building the {arch} runner failed: {proc.stderr.strip()[:2000]}")
    os.replace(tmp, path)


def cache_dir() -> Path:
    """$TENSORFORGE_CACHE_DIR, else $XDG_CACHE_HOME/tensorforge, else ~/.cache/tensorforge."""
    if os.environ.get("TENSORFORGE_CACHE_DIR"):
        return Path(os.environ["TENSORFORGE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tensorforge"
