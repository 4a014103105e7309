"""Unpacking a QingLong backup archive (.tgz) safely into a private folder.

QingLong's panel backup is `tar -zcvf data.tgz data/db data/upload [data/…]`
(back/services/system.ts exportData). An archive is untrusted input: only
regular files and folders are unpacked, each name is checked (no absolute path,
no `..`, no control character, bounded length and depth), every file is created
with O_EXCL|O_NOFOLLOW inside folders this code made itself, and the members, the
bytes and each file are bounded. Links, devices and FIFOs are never created; they
are counted and reported.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import msgspec

from ..fs import confined

MAX_MEMBERS = 50_000
MAX_TOTAL = 1 << 30  # bytes unpacked
MAX_FILE = 256 << 20
MAX_DEPTH = 32
_BAD = re.compile(r"[\x00-\x1f\x7f]")


class ArchiveError(Exception):
    """The archive cannot be used; the message says why."""


class Unpacked(msgspec.Struct, frozen=True, kw_only=True):
    files: int
    bytes: int
    skipped: list[str]  # "<name>: <why>", at most 50


def _parts(name: str) -> tuple[str, ...] | None:
    name = name.removeprefix("./")
    if not name or name.startswith("/") or _BAD.search(name) or len(name) > 4096:
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts or len(parts) > MAX_DEPTH or any(
            len(p.encode()) > 255 for p in parts):
        return None
    return parts


def _folder(root_fd: int, parts: tuple[str, ...]) -> int:
    """An fd of root/parts, made (0700) where missing, never through a link."""
    return confined.folder_fd(root_fd, parts, 0o700)


def unpack(archive: Path, into: Path) -> Unpacked:
    """Unpack `archive` (gzip'd tar) into the existing empty folder `into`."""
    skipped: list[str] = []
    files = total = members = 0

    def skip(name: str, why: str) -> None:
        if len(skipped) < 50:
            skipped.append(f"{name[:200]}: {why}")

    root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                members += 1
                if members > MAX_MEMBERS:
                    raise ArchiveError(f"the archive has more than {MAX_MEMBERS} entries")
                parts = _parts(member.name)
                if parts is None:
                    skip(member.name, "unsafe name (absolute, '..', or control characters)")
                    continue
                if member.isdir():
                    os.close(_folder(root, parts))
                    continue
                if not member.isfile():
                    skip(member.name, "not a regular file (links and devices are not unpacked)")
                    continue
                if member.size > MAX_FILE:
                    skip(member.name, f"larger than {MAX_FILE >> 20} MiB")
                    continue
                if total + member.size > MAX_TOTAL:
                    raise ArchiveError(f"the archive unpacks to more than {MAX_TOTAL >> 20} MiB")
                _write(tar, member, root, parts)
                files += 1
                total += member.size
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileExistsError):
            raise ArchiveError(f"the archive holds {exc.filename!r} twice") from None
        raise ArchiveError(f"not a readable .tgz archive: {exc}") from None
    finally:
        os.close(root)
    return Unpacked(files=files, bytes=total, skipped=skipped)


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, root: int,
           parts: tuple[str, ...]) -> None:
    src = tar.extractfile(member)
    if src is None:
        raise ArchiveError(f"{member.name[:200]}: unreadable member")
    folder = _folder(root, parts[:-1])
    try:
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as out, src:
        left = member.size
        while left > 0:
            chunk = src.read(min(1 << 20, left))
            if not chunk:
                raise ArchiveError(f"{member.name[:200]}: truncated")
            out.write(chunk)
            left -= len(chunk)
