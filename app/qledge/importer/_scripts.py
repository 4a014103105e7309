"""The files of QingLong's scripts/ folder that an import would copy, and those it skips.

A bounded walk through directory fds that never follows a symlink: links, FIFOs,
sockets and devices are skipped and reported, as are files over the size cap,
folders QingLong's tree view hides (node_modules, .git, __pycache__), and every
file past the count or byte budget. Each kept file's SHA-256 lets a second
import see that nothing changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import msgspec

from .said import said

MAX_FILES = 5000
MAX_FILE = 16 << 20
MAX_TOTAL = 512 << 20
MAX_DEPTH = 16
SKIP_DIRS = frozenset({"node_modules", ".git", "__pycache__", ".svn", ".idea"})
# QingLong seeds these into scripts/ (sample/notify.py, sample/notify.js): qledge ships
# its own, which send through its channels (docs/notifications.md).
SEEDED = frozenset({"notify.py", "sendNotify.js"})


class SourceFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str  # relative to scripts/, '/'-separated
    size: int
    sha256: str
    mode: int  # permission bits


class FileSet(msgspec.Struct, frozen=True, kw_only=True):
    files: list[SourceFile]
    skipped: list[tuple[str, str]]  # (path, why)


_FLAGS_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FLAGS_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _hash(dir_fd: int, name: str, limit: int) -> tuple[str, int, int] | None:
    """(sha256, size, mode) of a regular file read through `dir_fd`; None if it is not
    one (it changed under us) or grew past `limit`."""
    try:
        fd = os.open(name, _FLAGS_FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                return None
            h.update(chunk)
        return h.hexdigest(), size, stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def list_files(root: Path) -> FileSet:
    files: list[SourceFile] = []
    skipped: list[tuple[str, str]] = []
    budget = [MAX_TOTAL]

    def walk(dir_fd: int, rel: str, depth: int) -> None:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            path = f"{rel}{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                skipped.append((path, said("SYMLINK", "symlink (not followed)")))
            elif stat.S_ISDIR(st.st_mode):
                if entry.name in SKIP_DIRS:
                    skipped.append((f"{path}/", said("GENERATED_FOLDER", "folder not copied"
                                                     " (installed or generated files)")))
                elif depth >= MAX_DEPTH:
                    skipped.append((f"{path}/", said("TOO_DEEP", f"deeper than {MAX_DEPTH}"
                                                     " folders", max=str(MAX_DEPTH))))
                else:
                    try:
                        sub = os.open(entry.name, _FLAGS_DIR, dir_fd=dir_fd)
                    except OSError as exc:
                        skipped.append((f"{path}/", said("UNREADABLE",
                                                         f"unreadable ({exc.strerror})")))
                        continue
                    try:
                        walk(sub, f"{path}/", depth + 1)
                    finally:
                        os.close(sub)
            elif not stat.S_ISREG(st.st_mode):
                skipped.append((path, said("NOT_REGULAR", "not a regular file")))
            elif not rel and entry.name in SEEDED:
                skipped.append((path, said("SEEDED", "QingLong's notification helper: qledge"
                                           " ships its own (it sends through qledge's"
                                           " channels)")))
            elif st.st_size > MAX_FILE:
                skipped.append((path, said("FILE_TOO_LARGE", f"larger than {MAX_FILE >> 20}"
                                           " MiB", max=str(MAX_FILE >> 20))))
            elif len(files) >= MAX_FILES:
                skipped.append((path, said("TOO_MANY_FILES", f"more than {MAX_FILES} files",
                                           max=str(MAX_FILES))))
            elif st.st_size > budget[0]:
                skipped.append((path, said("COPY_TOO_LARGE", "the copy would pass"
                                           f" {MAX_TOTAL >> 20} MiB",
                                           max=str(MAX_TOTAL >> 20))))
            else:
                found = _hash(dir_fd, entry.name, min(MAX_FILE, budget[0]))
                if found is None:
                    skipped.append((path, said("CHANGED_WHILE_READ", "changed while read, or"
                                               " not a regular file")))
                    continue
                budget[0] -= found[1]
                files.append(SourceFile(path=path, sha256=found[0], size=found[1],
                                        mode=found[2]))

    fd = os.open(root, _FLAGS_DIR)
    try:
        walk(fd, "", 0)
    finally:
        os.close(fd)
    return FileSet(files=files, skipped=skipped)
