"""Typed helpers that read settings from the environment (one place, one style).

A variable that is not set falls back to the value the embedded stack (`make run`) wrote to
`var/devstack.json` when it started (its secret key, the ports it chose): so a second shell
can run `manage.py` commands against the running stack with no variables set.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}
STACK_FILE = "devstack.json"  # under the var directory; written by webapp/devstack.py
_stack: dict[str, str] = {}


def use_stack_file(var_dir: Path) -> None:
    """Take fallbacks from the embedded stack's file, when there is one."""
    try:
        _stack.update(json.loads((var_dir / STACK_FILE).read_text()))
    except FileNotFoundError:
        pass


def _raw(name: str) -> str | None:
    return os.environ.get(name, _stack.get(name))


def env_str(name: str, default: str = "") -> str:
    raw = _raw(name)
    return default if raw is None else raw


def env_bool(name: str, default: bool = False) -> bool:
    raw = _raw(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not a boolean (use 1/0)")


def env_int(name: str, default: int) -> int:
    raw = _raw(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = _raw(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = _raw(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def sqlite(path: str) -> dict:
    # The web server and the worker write concurrently: WAL lets readers go on during a
    # write, and IMMEDIATE transactions take the write lock up front instead of failing
    # with "database is locked" when a read lock cannot be upgraded.
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": path,
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}}


def database_from_url(url: str, sqlite_path: Path) -> dict:
    """DATABASE_URL (postgres://user:pass@host:port/db) -> Django DATABASES entry.

    Without a URL the embedded stack uses SQLite under ./var/.
    """
    if not url:
        return sqlite(str(sqlite_path))
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql", "sqlite"):
        raise ValueError(f"DATABASE_URL scheme {parsed.scheme!r} is not supported "
                         "(use postgres://... or sqlite:///path)")
    if parsed.scheme == "sqlite":
        return sqlite(parsed.path or str(sqlite_path))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
