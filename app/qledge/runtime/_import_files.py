"""The file side of an import: what the scripts folder and the logs volume hold now,
and copying QingLong's files in so that a failed import leaves nothing behind.

Copies are written first as hidden temp files beside their destination (same
folder, so placing them is one rename), each checked against the SHA-256 the plan
was made with. `place` then renames them in — a new file with RENAME_NOREPLACE
(never over something that appeared meanwhile), a replaced one with
RENAME_EXCHANGE (the old content stays under the temp name) — and `undo` puts
everything back: placed files removed, exchanged ones swapped back, folders it
made removed. Nothing is followed through a symlink on either side.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from ..fs import confined, dirfd

TEMP = ".qledge-import-"
MAX_LOG = 16 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CopyFailed(Exception):
    """A file could not be copied; the message names it (never its content)."""


def _digest(dir_fd: int, name: str) -> str | None:
    """SHA-256 of a regular file; "" for anything else there; None when nothing is."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        return ""  # a symlink (ELOOP) or unreadable: not the file the plan wants
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def existing(root: Path, paths: list[str]) -> dict[str, dict[str, Any]]:
    """{path: {"path", "sha256"}} of the paths (relative to `root`) that exist."""
    out: dict[str, dict[str, Any]] = {}
    try:
        root_fd = confined.open_root(root)
    except confined.ScriptError:
        return out
    try:
        for path in paths:
            parts = tuple(path.split("/"))
            try:
                with confined.folder(root_fd, parts[:-1]) as fd:
                    sha = _digest(fd, parts[-1])
            except (confined.ScriptError, OSError):
                continue
            if sha is not None:
                out[path] = {"path": path, "sha256": sha}
    finally:
        os.close(root_fd)
    return out


def top_level(root: Path) -> list[str]:
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def present(root: Path, paths: list[str]) -> list[str]:
    return [p for p in paths if os.path.lexists(root / p)]


class Copies:
    """Files staged beside their destinations under `root`, then placed or undone."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root_fd = confined.open_root(root)
        self.staged: list[tuple[tuple[str, ...], str, bool]] = []  # parts, temp, replace
        self.placed: list[tuple[tuple[str, ...], str, bool]] = []
        self.made: list[tuple[str, ...]] = []  # folders created, parents first

    def _folder(self, parts: tuple[str, ...], mode: int) -> int:
        """An fd of root/parts, made level by level where missing (remembered for undo);
        a link or a file on the way is refused."""
        try:
            return confined.folder_fd(self.root_fd, parts, mode, made=self.made.append,
                                      durable=True)
        except confined.NotAFolder as exc:
            raise CopyFailed(f"{'/'.join(exc.parts)} is not a folder (a file or"
                             " a symlink is there)") from None

    def stage(self, dest: str, source: Path, *, sha256: str | None, mode: int,
              replace: bool, limit: int) -> None:
        """Copy `source` (opened without following a link) to a temp file beside
        scripts/`dest`; CopyFailed if it is not the file the plan saw."""
        parts = tuple(confined.parse(dest))
        try:
            src = os.open(source, _READ)
        except OSError as exc:
            raise CopyFailed(f"{source} cannot be read ({exc.strerror})") from None
        folder = self._folder(parts[:-1], 0o755 if mode & 0o044 else 0o700)
        temp = f"{TEMP}{secrets.token_hex(8)}"
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                raise CopyFailed(f"{source} is not a regular file")
            out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=folder)
            self.staged.append((parts, temp, replace))
            h, size = hashlib.sha256(), 0
            with os.fdopen(out, "wb") as f:
                while chunk := os.read(src, 1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise CopyFailed(f"{source} grew past {limit} bytes")
                    h.update(chunk)
                    f.write(chunk)
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            if sha256 is not None and h.hexdigest() != sha256:
                raise CopyFailed(f"{source} changed since the plan was made")
        finally:
            os.close(src)
            os.close(folder)

    def place(self) -> None:
        """Rename every staged file in; on any error the caller calls undo()."""
        for parts, temp, replace in self.staged:
            with confined.folder(self.root_fd, parts[:-1]) as fd:
                there = confined.lstat_at(fd, parts[-1])
                if there is not None and replace and not stat.S_ISREG(there.st_mode):
                    raise CopyFailed(f"{'/'.join(parts)} is not a regular file: not replaced")
                try:
                    if replace and there is not None:
                        dirfd.rename_exchange(fd, temp, fd, parts[-1])
                        self.placed.append((parts, temp, True))
                    else:
                        dirfd.rename_noreplace(fd, temp, fd, parts[-1])
                        self.placed.append((parts, temp, False))
                except FileExistsError:
                    raise CopyFailed(f"{'/'.join(parts)} appeared meanwhile") from None
                os.fsync(fd)

    def undo(self) -> None:
        """Back to how it was: placed files out, replaced ones back, new folders gone."""
        for parts, temp, exchanged in reversed(self.placed):
            with contextlib.suppress(OSError, confined.ScriptError), \
                    confined.folder(self.root_fd, parts[:-1]) as fd:
                if exchanged:
                    dirfd.rename_exchange(fd, temp, fd, parts[-1])
                else:
                    os.rename(parts[-1], temp, src_dir_fd=fd, dst_dir_fd=fd)
        self.placed = []
        self.cleanup()
        for parts in reversed(self.made):  # children first; only if left empty
            with contextlib.suppress(OSError, confined.ScriptError), \
                    confined.folder(self.root_fd, parts[:-1]) as fd:
                os.rmdir(parts[-1], dir_fd=fd)
        self.made = []

    def cleanup(self) -> None:
        """Remove the temp files left (the replaced contents after a success)."""
        for parts, temp, _ in self.staged:
            with contextlib.suppress(OSError, confined.ScriptError), \
                    confined.folder(self.root_fd, parts[:-1]) as fd:
                os.unlink(temp, dir_fd=fd)
        self.staged = []

    def close(self) -> None:
        os.close(self.root_fd)
