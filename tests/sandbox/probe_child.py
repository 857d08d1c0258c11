"""A sandbox child that tries, on purpose, what a hostile model's code would try."""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox import child


def environment(args: dict) -> dict:
    return dict(os.environ)


def open_socket(args: dict) -> dict:
    outcomes = {}
    for name, family in (("inet", socket.AF_INET), ("inet6", socket.AF_INET6),
                         ("unix", socket.AF_UNIX)):
        try:
            socket.socket(family, socket.SOCK_STREAM).close()
            outcomes[name] = "opened"
        except OSError as exc:
            outcomes[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    return outcomes


def run_program(args: dict) -> str:
    try:
        return subprocess.run(["/bin/sh", "-c", "echo escaped"], capture_output=True,
                              text=True).stdout
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


def write_files(args: dict) -> dict:
    outcomes = {}
    for path in args["paths"]:
        try:
            Path(path).write_text("x")
            outcomes[path] = "written"
        except OSError as exc:
            outcomes[path] = errno.errorcode.get(exc.errno, str(exc.errno))
    return outcomes


def read_file(args: dict) -> str:
    try:
        return Path(args["path"]).read_text()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


def fork_bomb(args: dict) -> None:
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)


def leave_process_group(args: dict) -> dict:
    """What a forked process that wants to outlive its group's kill would try (the child
    itself leads its session, which setsid refuses anyway)."""
    outcomes = {}
    for name, call in (("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0))):
        pid = os.fork()
        if pid == 0:
            try:
                call()
                os._exit(0)
            except OSError as exc:
                os._exit(exc.errno)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        outcomes[name] = "left" if code == 0 else errno.errorcode.get(code, str(code))
    return outcomes


def start_threads(args: dict) -> dict:
    """Start threads as a compile does (ORT, OpenMP, BLAS); say who this child runs as."""
    started = []
    for _ in range(args["threads"]):
        t = threading.Thread(target=time.sleep, args=(0.2,))
        t.start()
        started.append(t)
    for t in started:
        t.join()
    return {"threads": len(started), "uid": os.getuid()}


def fill_file(args: dict) -> None:
    with open("filler.bin", "wb") as f:
        while True:
            f.write(b"\0" * 2**20)


def fill_directory(args: dict) -> None:
    k = 0
    while True:
        Path(f"filler-{k}.bin").write_bytes(b"\1" * 2**20)
        k += 1


def sleep_forever(args: dict) -> None:
    print(json.dumps({"sleeping": True}), flush=True)  # confined by now
    while True:
        time.sleep(1)


def priority(args: dict) -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


ENTRIES = {"env": environment, "priority": priority, "socket": open_socket, "exec": run_program,
           "write": write_files, "read": read_file, "fork_bomb": fork_bomb,
           "threads": start_threads, "new_group": leave_process_group, "fill_file": fill_file,
           "fill_directory": fill_directory, "sleep": sleep_forever}

if __name__ == "__main__":
    sys.exit(child.main(sys.argv, ENTRIES))
