"""The attempt's log artifact: created 0600 append-only inside the logs root, read on demand.

The task writes its log itself and may replace it with anything (a FIFO, a
symlink, a directory, a device node). Reads therefore never follow a link,
never block in open(2), and serve regular files only: anything else raises
`UnsafeLogFile` naming what was found, which the API answers with a 4xx
(`docs/api.md`). Reads run on the bounded pool of `fileio.py`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ..fs import confined
from ..ids import shard_key

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# O_NONBLOCK: opening a FIFO (or a device) must never wait for a writer.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class LogPathError(Exception):
    pass


class UnsafeLogFile(Exception):
    """The thing at a log path is not a regular file; `kind` names what it is."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the log path holds a {kind}, not a regular file")
        self.kind = kind


# A log's words are coarser than the scripts folder's: a user only needs to know it
# is not a log file (the panel's texts name these four kinds and "special file").
_LOG_KIND = {"char_device": "device", "block_device": "device", "unknown": "special file",
             "file": "special file"}


def _kind(mode: int) -> str:
    found = confined.kind(mode)
    return _LOG_KIND.get(found, found)


def relative_path(attempt_id: str) -> str:
    return f"{shard_key(attempt_id)}/{attempt_id}.log"


@contextlib.contextmanager
def _shard_fd(root: Path, shard: str, create: bool) -> Iterator[int]:
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(shard, 0o700, dir_fd=root_fd)
        try:
            fd = os.open(shard, _DIR_FLAGS, dir_fd=root_fd)
        except OSError as exc:
            # O_NOFOLLOW|O_DIRECTORY: a symlinked shard fails here instead of escaping
            raise LogPathError(f"shard {shard} is not a private directory") from exc
    finally:
        os.close(root_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _split(rel: str) -> tuple[str, str]:
    shard, sep, name = rel.partition("/")
    if (not sep or len(shard) != 2 or "/" in name or name in ("", ".", "..")
            or not name.endswith(".log")):
        raise LogPathError("bad log reference")
    return shard, name


def create(root: Path, attempt_id: str) -> tuple[int, str]:
    """O_CREAT|O_EXCL|O_APPEND, 0600, through directory fds that refuse symlinks."""
    rel = relative_path(attempt_id)
    shard, name = _split(rel)
    with _shard_fd(root, shard, create=True) as dfd:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    return fd, rel


def size(root: Path, rel: str) -> int:
    """The size lstat(2) reports (retention's accounting; never opens the file)."""
    shard, name = _split(rel)
    try:
        with _shard_fd(root, shard, create=False) as dfd:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size
    except (FileNotFoundError, LogPathError):
        return 0


def _open_regular(root: Path, rel: str) -> int | None:
    """A read fd on the regular file at `rel`, None if there is none; UnsafeLogFile
    for anything else. lstat first, so a device node is not even opened; then a
    non-blocking, non-following open and fstat catch a swap in between."""
    shard, name = _split(rel)
    try:
        with _shard_fd(root, shard, create=False) as dfd:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeLogFile(_kind(st.st_mode))
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # swapped for a symlink since the lstat
                    raise UnsafeLogFile("symlink") from exc
                if exc.errno == errno.ENXIO:  # a socket
                    raise UnsafeLogFile("socket") from exc
                raise
    except (FileNotFoundError, LogPathError):
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeLogFile(_kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read(root: Path, rel: str, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset`; returns (data, current file size).
    A missing file reads as empty; anything but a regular file raises UnsafeLogFile."""
    fd = _open_regular(root, rel)
    if fd is None:
        return b"", 0
    try:
        total = os.fstat(fd).st_size
        if offset >= total:
            return b"", total
        return os.pread(fd, min(limit, total - offset), offset), total
    finally:
        os.close(fd)


def tail(root: Path, rel: str, limit: int) -> tuple[bytes, int]:
    """The last `limit` bytes (one open: size and data agree); (data, their offset)."""
    fd = _open_regular(root, rel)
    if fd is None:
        return b"", 0
    try:
        total = os.fstat(fd).st_size
        offset = max(0, total - limit)
        return os.pread(fd, total - offset, offset) if total else b"", offset
    finally:
        os.close(fd)


def remove(root: Path, rel: str) -> bool:
    shard, name = _split(rel)
    try:
        with _shard_fd(root, shard, create=False) as dfd:
            os.unlink(name, dir_fd=dfd)
    except (FileNotFoundError, LogPathError):
        return False
    return True
