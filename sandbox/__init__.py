"""Run code built from untrusted models in a confined child process.

Everything that parses, compiles or runs a user's model runs here, never in the web server or
the worker itself. The confinement has layers, each a separate module:

* `namespaces` (parent side): bubblewrap (`bwrap`) gives the child its own PID, network, IPC,
  UTS and mount namespaces: no network at all, a read-only view of only the system paths the
  interpreter needs, and the job's work directory as the one writable place. Where user or
  mount namespaces are unavailable (some containers) the worker says so at start and the
  other layers still apply.
* `runner` (parent side): an allow-listed environment (no secret reaches the child), a wall-time
  limit, caps on what the child may send back (event lines, result file, work directory size),
  and the process group killed on timeout, cancel or overflow.
* `confine` (child side, first thing the child does): RLIMIT_CPU/AS/FSIZE/NPROC/NOFILE/CORE, an
  unprivileged user when started as root, death with its parent, and a seccomp filter that
  refuses sockets, exec and namespace or tracing calls for the rest of the child's life.
* `linker`: the one thing a compile needs exec for is the system linker; a helper forked before
  the seccomp filter is installed runs it on the object file the compiler wrote.

`child` is the entry point inside the sandbox (compile, bench, inspect); `limits` is the
record both sides share.
"""
