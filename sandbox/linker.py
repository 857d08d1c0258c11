"""The link helper: the compile child's only way to run a program.

The compile child forks this helper before it installs its seccomp filter, so the helper may
still exec the system linker while the child may not. The child sends a request (paths of the
object file and the weights it wrote, the output path) over a pipe; the helper runs
compiler_core's own `link_shared` on them and answers with an error message or nothing. It
has the child's resource limits and the filter without the exec rule.

The autotuner's runner needs exec too (it starts compiler_core.tune.measure_child to time
candidate kernels): `measure(task)` sends it a pickled BuildTask and gets its measurements
back the same way.
"""
from __future__ import annotations

import json
import os
import pickle
import tempfile
from pathlib import Path

from . import confine


class LinkHelper:
    def __init__(self, pid: int, requests: int, replies: int):
        self.pid, self.requests, self.replies = pid, requests, replies

    @classmethod
    def start(cls) -> "LinkHelper":
        from_parent, to_helper = os.pipe()  # (read end, write end)
        from_helper, to_parent = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(to_helper)
                os.close(from_helper)
                _serve(from_parent, to_parent)
            finally:
                os._exit(1)  # never return into the compile child's code
        os.close(from_parent)
        os.close(to_parent)
        return cls(pid, to_helper, from_helper)

    def link(self, objects: list[bytes], weights: bytes, workdir: Path, out: Path,
             threads: bool, triple: str | None = None) -> None:
        """The signature of compiler_core.codegen.link.link_shared, run by the helper."""
        from compiler_core.codegen.link import LinkError, write_inputs

        write_inputs(objects, weights, workdir)
        _send(self.requests, {"workdir": str(workdir), "objects": len(objects), "out": str(out),
                              "threads": threads, "triple": triple})
        reply = _receive(self.replies)
        if reply is None or reply.get("error"):
            raise LinkError((reply or {}).get("error") or "the link helper died")

    def measure(self, task) -> list:
        """compiler_core.tune.runner.run_batch, run by the helper."""
        with tempfile.TemporaryDirectory(prefix="tensorforge-measure-") as tmp:
            task_path, out = Path(tmp) / "task.pickle", Path(tmp) / "measured.pickle"
            task_path.write_bytes(pickle.dumps(task))
            _send(self.requests, {"measure": str(task_path), "out": str(out)})
            reply = _receive(self.replies)
            if reply is None or reply.get("error"):
                raise RuntimeError((reply or {}).get("error") or "the helper died measuring")
            return pickle.loads(out.read_bytes())

    def measure_file(self, task_path: Path) -> list[dict]:
        """Another worker's pickled batch, loaded and timed by the helper only; plain JSON
        back, so the measure child itself never imports the compiler (it saves a second)."""
        out = task_path.with_name("measured.json")
        _send(self.requests, {"measure": str(task_path), "out": str(out), "json": True})
        reply = _receive(self.replies)
        if reply is None or reply.get("error"):
            raise RuntimeError((reply or {}).get("error") or "the helper died measuring")
        return json.loads(out.read_text())

    def close(self) -> None:
        os.close(self.requests)
        os.waitpid(self.pid, 0)


def _send(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _receive(fd: int) -> dict | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _serve(requests: int, replies: int) -> None:
    confine.install_seccomp(allow_exec=True)
    from compiler_core.codegen.link import LinkError, link_written

    while (request := _receive(requests)) is not None:
        if "measure" in request:
            _send(replies, _measure(request))
            continue
        try:
            link_written(Path(request["workdir"]), int(request["objects"]), Path(request["out"]),
                         bool(request["threads"]), request.get("triple"))
            _send(replies, {})
        except (LinkError, OSError) as exc:
            _send(replies, {"error": str(exc)})
    os._exit(0)


def _measure(request: dict) -> dict:
    """A pickle written by a compile child: this one's a moment ago, or another worker's
    (a measure child's; sandboxed like this helper, the only place it is loaded)."""
    from compiler_core.tune.builder import BuildTask
    from compiler_core.tune.runner import run_batch
    try:
        task = pickle.loads(Path(request["measure"]).read_bytes())
        if not isinstance(task, BuildTask):
            return {"error": f"the batch holds a {type(task).__name__}, not a BuildTask"}
        measured = run_batch(task)
        out = Path(request["out"])
        if request.get("json"):
            out.write_text(json.dumps([{"seconds": m.seconds, "error": m.error}
                                       for m in measured]))
        else:
            out.write_bytes(pickle.dumps(measured))
        return {}
    except Exception as exc:  # noqa: BLE001  a bad pickle fails its batch, not the helper
        return {"error": f"measuring: {type(exc).__name__}: {exc}"}
