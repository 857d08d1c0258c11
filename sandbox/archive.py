"""Unpack an uploaded model folder (.zip, .tar, .tar.gz) safely, inside the sandbox.

A model whose weights live in external data files arrives as an archive of its folder. Every
member is checked before a byte is written: a relative path that stays inside the folder,
a regular file or directory (no links, devices or FIFOs), at most MAX_MEMBERS of them, and
their sizes added up against the byte cap as they are copied (the sizes an archive declares
may lie). The archive must hold exactly one .onnx file; its data files sit beside it.
"""
from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

MAX_MEMBERS = 1000


class ArchiveError(ValueError):
    """The archive is malformed or breaks a rule; the message says which."""


def kind_of(path: Path) -> str:
    """'zip', 'tar' or 'onnx' (anything else), from the first bytes, not the name."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x1f\x8b") or head.startswith(b"BZh") or head[257:262] == b"ustar":
        return "tar"
    return "onnx"


def safe_member_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if not name or path.is_absolute() or ".." in path.parts or ":" in path.parts[0]:
        raise ArchiveError(f"archive member {name!r} has an absolute path or leaves the folder")
    return path


class _Budget:
    def __init__(self, max_bytes: int):
        self.left = max_bytes
        self.max_bytes = max_bytes

    def copy(self, src, dst_path: Path) -> None:
        with open(dst_path, "wb") as dst:
            while chunk := src.read(1 << 20):
                self.left -= len(chunk)
                if self.left < 0:
                    raise ArchiveError(f"the archive unpacks to more than "
                                       f"{self.max_bytes / 2**20:.0f} MiB, the upload limit")
                dst.write(chunk)


def _target(dest: Path, name: str) -> Path:
    target = dest / safe_member_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _unzip(path: Path, dest: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(path) as z:
        members = z.infolist()
        _check_count(len(members))
        for info in members:
            mode = info.external_attr >> 16
            if mode and (mode & 0o170000) not in (0o100000, 0o040000, 0):
                raise ArchiveError(f"archive member {info.filename!r} is a link or special "
                                   "file; only regular files are accepted")
            if info.is_dir():
                _target(dest, info.filename).mkdir(exist_ok=True)
                continue
            with z.open(info) as src:
                budget.copy(src, _target(dest, info.filename))


def _untar(path: Path, dest: Path, budget: _Budget) -> None:
    with tarfile.open(path) as t:
        count = 0
        for member in t:
            count += 1
            _check_count(count)
            if member.isdir():
                _target(dest, member.name).mkdir(exist_ok=True)
            elif member.isfile():
                budget.copy(t.extractfile(member), _target(dest, member.name))
            else:
                raise ArchiveError(f"archive member {member.name!r} is a link or special "
                                   "file; only regular files are accepted")


def _check_count(count: int) -> None:
    if count > MAX_MEMBERS:
        raise ArchiveError(f"the archive has more than {MAX_MEMBERS} members")


def unpack(path: Path, dest: Path, max_bytes: int) -> Path:
    """Unpack into `dest`; returns the one .onnx model inside."""
    kind = kind_of(path)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        (_unzip if kind == "zip" else _untar)(path, dest, _Budget(max_bytes))
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveError(f"the {kind} archive cannot be read: {exc}") from None
    models = sorted(p for p in dest.rglob("*.onnx") if p.is_file())
    if len(models) != 1:
        found = ", ".join(str(m.relative_to(dest)) for m in models) or "none"
        raise ArchiveError(f"the archive must hold exactly one .onnx model, found {found}")
    return models[0]
