"""`make run`'s stack: comes up with its own Redis and S3, answers /healthz, gives a working
API token to `manage.py create_api_token` typed in a second shell with no variables set,
and Ctrl-C stops every process it started while keeping the data."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import psutil

from webapp import devstack


def token_from_a_second_shell(var_dir) -> str:
    """The README's token command in a shell that has none of the stack's variables."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    if var_dir != devstack.REPO / "var":
        env["TENSORFORGE_VAR_DIR"] = str(var_dir)  # the only difference from `make run`'s
    done = subprocess.run([sys.executable, "manage.py", "create_api_token", "admin"],
                          cwd=devstack.REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_stack_starts_reports_healthy_and_stops_cleanly(tmp_path):
    port = devstack.free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "S3_ENDPOINT_URL", "DJANGO_SECRET_KEY",
                        "S3_BUCKET", "TENSORFORGE_QUEUE")}
    env.update(TENSORFORGE_VAR_DIR=str(tmp_path / "var"), PORT=str(port),
               TENSORFORGE_REDIS_PORT=str(devstack.free_port()),
               TENSORFORGE_S3_PORT=str(devstack.free_port()))
    proc = subprocess.Popen([sys.executable, "-m", "webapp.devstack"], cwd=devstack.REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    banner = []
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            banner.append(line)
            if "Ctrl-C stops everything" in line or time.monotonic() > deadline:
                break
        text = "".join(banner)
        assert "Tensorforge is running" in text, text
        assert re.search(r"sign in as\s+admin / \S+", text)
        children = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        assert "redis-server" in names and "weed" in names and "celery" in names
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            health = json.loads(r.read())
        assert health["status"] == "ok", health
        token = token_from_a_second_shell(tmp_path / "var")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/models",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert json.loads(r.read())["count"] == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(90)
    assert "stopped; data is kept" in proc.stdout.read()
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert (tmp_path / "var" / "tensorforge.sqlite3").exists()
    assert (tmp_path / "var" / "first_user.txt").exists()
