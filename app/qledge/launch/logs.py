"""The attempt's log artifact: created 0600 append-only inside the logs root, read on demand."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..ids import shard_key

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LogPathError(Exception):
    pass


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
    shard, name = _split(rel)
    try:
        with _shard_fd(root, shard, create=False) as dfd:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size
    except (FileNotFoundError, LogPathError):
        return 0


def read(root: Path, rel: str, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset`; returns (data, current file size)."""
    shard, name = _split(rel)
    try:
        with _shard_fd(root, shard, create=False) as dfd:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except (FileNotFoundError, LogPathError):
        return b"", 0
    try:
        total = os.fstat(fd).st_size
        if offset >= total:
            return b"", total
        return os.pread(fd, min(limit, total - offset), offset), total
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
