"""What the sandboxed child does to itself before it reads anything a user sent.

Order matters: resource limits first (a fork bomb or a disk filler meets them at once), then
dropping root (when the worker runs as root; the kernel ignores RLIMIT_NPROC for root) to the
user the runner chose for this child alone (sandbox/runner.child_uid), then
the parent-death signal (a change of user clears it, so it comes after), and last the seccomp
filter, which also forbids the set-up calls above.
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import stat
import sys
import threading
from pathlib import Path

import pyseccomp as seccomp  # imported before any filter: it runs ldconfig to find libseccomp

from .limits import Limits

NOBODY = 65534
PR_SET_PDEATHSIG = 1
CLONE_NEWUSER = 0x10000000

# Calls a compiler or a benchmark never needs; each fails with EPERM/EACCES.
DENIED = [
    "socket", "socketpair",                                  # no network, no local sockets
    "ptrace", "process_vm_readv", "process_vm_writev",       # no peeking at other processes
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsmount", "fspick",                           # no new namespaces or mounts
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # io_uring bypasses seccomp
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "setresgid", "setgroups", "personality",
]
NO_EXEC = ["execve", "execveat"]
# The runner kills the child's process group; without namespaces nothing else would reach a
# process that left it. Helpers that exec (linker, measure children) start sessions of their own.
NO_NEW_GROUP = ["setsid", "setpgid"]


def apply(limits: Limits, allow_exec: bool = False) -> None:
    """Everything at once, for a child that needs no helper process."""
    set_rlimits(limits)
    drop_root()
    die_with_parent()
    install_seccomp(allow_exec)


def set_rlimits(limits: Limits) -> None:
    mb = 2**20
    _limit(resource.RLIMIT_AS, limits.memory_mb * mb)
    # soft: SIGXCPU, which Python reports; hard a little later: SIGKILL
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
    _limit(resource.RLIMIT_FSIZE, limits.file_mb * mb)
    _limit(resource.RLIMIT_NPROC, limits.processes)
    _limit(resource.RLIMIT_NOFILE, limits.open_files)
    _limit(resource.RLIMIT_CORE, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails with EFBIG instead


def _limit(which: int, value: int) -> None:
    if value > 0:
        resource.setrlimit(which, (value, value))


def drop_root() -> None:
    """Become the runner's user for this child ($TF_SANDBOX_UID, else `nobody`) when started
    as root and the interpreter stays readable for others."""
    if os.geteuid() != 0 or not _readable_by_others(Path(sys.base_prefix)):
        return
    uid = int(os.environ.get("TF_SANDBOX_UID", NOBODY))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _readable_by_others(path: Path) -> bool:
    """Every directory down to `path` lets others through (bwrap makes its own parents 0755)."""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def die_with_parent() -> None:
    """SIGKILL when the parent dies. Without namespaces the runner names its pid, which
    also catches a parent that died before the signal was armed; inside bwrap the parent is
    bwrap's own init, which --die-with-parent ties to the worker. That misses a worker that
    died before bwrap armed its signal (seen on a slow host: bwrap and the child outlived a
    killed worker), so the child also exits when the runner's lifeline pipe reaches
    end-of-file, which happens however and whenever the worker died."""
    parent = int(os.environ.get("TF_SANDBOX_PARENT", os.getppid()))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)
    lifeline = os.environ.get("TF_SANDBOX_LIFELINE")
    if lifeline is not None:
        threading.Thread(target=_exit_at_end_of_file, args=(int(lifeline),), daemon=True).start()


def _exit_at_end_of_file(fd: int) -> None:
    while os.read(fd, 1):  # the runner never writes: only end-of-file comes
        pass
    os._exit(1)


def install_seccomp(allow_exec: bool = False) -> None:
    f = seccomp.SyscallFilter(seccomp.ALLOW)  # also kills calls from a foreign ABI (x32, i386)
    for name in DENIED + ([] if allow_exec else NO_EXEC + NO_NEW_GROUP):
        f.add_rule(seccomp.ERRNO(errno.EACCES if name in NO_EXEC else errno.EPERM), name)
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone,
    # whose flags it can, and a new user namespace is refused there.
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(seccomp.ERRNO(errno.EPERM), "clone",
               seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.load()
