"""The bubblewrap command line that gives a child its own namespaces and filesystem view.

Inside: no network (only a loopback device), its own PID namespace (the child's processes die
with it), a root file system that is an empty read-only tmpfs with read-only binds of the few
system paths Python and the linker need, and the job's work directory as the only writable
place. The repository is not bound whole: only the Python packages the child imports, so
files beside them (var/ with the database and keys, .env files) stay out of reach.

Run as root, bwrap creates the namespaces directly and the child then drops to a user of its
own (confine.drop_root); run as another user, bwrap also creates a user namespace.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

SYSTEM_DIRS = ["/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf",
               "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group",
               "/sys/devices/system/cpu"]
MERGED_USR = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    """(usable, why not): bwrap present and allowed to create namespaces here."""
    if os.environ.get("TENSORFORGE_SANDBOX_NAMESPACES", "1") == "0":
        return False, "turned off by TENSORFORGE_SANDBOX_NAMESPACES=0"
    path = bwrap_path()
    if path is None:
        return False, "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    probe = [path, *_namespace_args(), "--ro-bind", "/usr", "/usr", *_usr_links(),
             "--", "/usr/bin/true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    if proc.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {proc.stderr.strip()[:300]}"
    return True, ""


def announce() -> bool:
    """Log, once at worker start, how children will be confined."""
    ok, why = availability()
    if ok:
        log.info("sandbox: bubblewrap namespaces (pid, net, mount, ipc, uts) + seccomp + "
                 "rlimits for every compile and benchmark")
    else:
        log.warning("sandbox: namespaces UNAVAILABLE (%s); children still run with an "
                    "allow-listed environment, rlimits, seccomp and parent-death signal, but "
                    "see the network and the whole file system", why)
    return ok


def _namespace_args() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    return [*user, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]


def _usr_links() -> list[str]:
    """Debian's /bin, /lib, ... are links into /usr: recreate them, or bind real ones."""
    args = []
    for path in MERGED_USR:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _ro_binds(paths) -> list[str]:
    args = []
    for p in dict.fromkeys(str(p) for p in paths):
        if os.path.exists(p):
            args += [*_open_parents(p), "--ro-bind", p, p]
    return args


def _open_parents(path: str) -> list[str]:
    """bwrap copies the modes of a bind's parents (/root is 0700): make them passable, so
    the child can still reach the interpreter once it is no longer root."""
    args = []
    for parent in reversed(Path(path).parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def python_paths(packages: list[Path]) -> list[Path]:
    """The interpreter, its standard library, the virtualenv and the child's own packages."""
    prefixes = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return [*sorted(prefixes), *packages]


def _venv_link(args: list[str]) -> list[str]:
    """A virtualenv reached through a symlink keeps its path inside (pyvenv.cfg is found
    next to the interpreter that was invoked)."""
    if Path(sys.prefix) != Path(sys.prefix).resolve():
        return args + ["--symlink", str(Path(sys.prefix).resolve()), sys.prefix]
    return args


def command(inner: list[str], workdir: Path, packages: list[Path]) -> list[str]:
    """bwrap ... -- inner, with `workdir` the only writable path."""
    args = [bwrap_path(), *_namespace_args(),
            *_ro_binds(SYSTEM_DIRS), *_usr_links(), *_ro_binds(python_paths(packages)),
            "--dev", "/dev", "--proc", "/proc",
            *_open_parents(str(workdir)), "--bind", str(workdir), str(workdir),
            "--chdir", str(workdir)]
    return _venv_link(args) + ["--remount-ro", "/", "--", *inner]
