"""A backup into a directory with keep-N rotation (docs/backup.md "Scheduled backups").

The directory is a volume the user mounts (a USB stick, a NAS share). The rules that
make a power cut harmless:

* the archive is written under a hidden temporary name (`.qledge-backup-….partial`),
  fsynced, renamed to its final name, and the directory fsynced: a final name only
  ever holds a complete archive (the rename is atomic, and the data it names was on
  the disk before it);
* rotation runs only after that, and deletes only complete archives of ours (the
  final-name pattern, regular files) beyond the newest `keep` — never the new one,
  never a file that isn't ours;
* one backup at a time per directory (an flock on `.qledge-backup.lock`), so the
  partial files a killed backup left behind are removed safely by the next one.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from .. import failpoints
from ..clock import now_ms

PREFIX = "qledge-backup-"
FINAL = re.compile(r"qledge-backup-(\d{8}-\d{6})(?:-(\d{1,3}))?\.tar\.gz(?:\.enc)?")
PARTIAL = re.compile(r"\.qledge-backup-\d{8}-\d{6}(?:-\d{1,3})?\.tar\.gz(?:\.enc)?\.partial")
LOCK_NAME = ".qledge-backup.lock"
KEEP_MAX = 1000

# The drills' crash points (tests/drills/test_backup_power_cut.py), in order.
FP_WRITTEN = "backup.dir.written"      # data written, not yet fsynced
FP_SYNCED = "backup.dir.synced"        # fsynced under the temporary name
FP_RENAMED = "backup.dir.renamed"      # renamed, directory not yet fsynced
FP_ROTATING = "backup.dir.rotating"    # after the first deletion of a rotation
# The drill's negative control: the archive renamed without its fsync.
FP_NO_FSYNC = "backup.dir.no-fsync"


class DirectoryBusy(Exception):
    """Another backup holds this directory's lock."""


@dataclass(frozen=True)
class Written:
    path: Path
    removed: tuple[str, ...]  # archives rotation deleted
    cleaned: tuple[str, ...]  # partial files of killed backups deleted


def _fsync_dir(fd: int) -> None:
    os.fsync(fd)


def final_names(directory_fd: int) -> list[str]:
    """Our complete archives in the directory, oldest first (the names sort by time)."""
    found = []
    with os.scandir(directory_fd) as it:
        for entry in it:
            if FINAL.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                found.append(entry.name)
    return sorted(found, key=_age)


def _age(name: str) -> tuple[str, int]:
    # "…-221500-1.tar.gz" is newer than "…-221500.tar.gz" though it sorts first as text.
    m = FINAL.fullmatch(name)
    assert m is not None
    return m.group(1), int(m.group(2) or 0)


def _name(directory_fd: int, encrypted: bool) -> str:
    stamp = datetime.fromtimestamp(now_ms() / 1000, UTC).strftime("%Y%m%d-%H%M%S")
    suffix = ".tar.gz.enc" if encrypted else ".tar.gz"
    taken = set(os.listdir(directory_fd))
    for n in range(1000):
        name = f"{PREFIX}{stamp}{'' if n == 0 else f'-{n}'}{suffix}"
        if name not in taken and f".{name}.partial" not in taken:
            return name
    raise FileExistsError(f"{PREFIX}{stamp}: a thousand backups in one second")


def write_to_dir(directory: Path, keep: int, produce: Callable[[IO[bytes]], object], *,
                 encrypted: bool = False) -> Written:
    """Run `produce(out)` into a new archive in `directory`, then rotate to `keep`."""
    if not 1 <= keep <= KEEP_MAX:
        raise ValueError(f"keep must be 1 to {KEEP_MAX}")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        lock = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                       0o600, dir_fd=dfd)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DirectoryBusy(f"another backup is writing into {directory}") from None
            cleaned = _clean_partials(dfd)
            name = _name(dfd, encrypted)
            path = _write_one(dfd, name, produce)
            removed = rotate(dfd, keep, keep_name=name)
            return Written(path=directory / path, removed=removed, cleaned=cleaned)
        finally:
            os.close(lock)  # releases the flock
    finally:
        os.close(dfd)


def _clean_partials(dfd: int) -> tuple[str, ...]:
    gone = []
    with os.scandir(dfd) as it:
        names = [e.name for e in it if PARTIAL.fullmatch(e.name)
                 and e.is_file(follow_symlinks=False)]
    for name in sorted(names):
        os.unlink(name, dir_fd=dfd)
        gone.append(name)
    return tuple(gone)


def _write_one(dfd: int, name: str, produce: Callable[[IO[bytes]], object]) -> str:
    tmp = f".{name}.partial"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            produce(out)
            out.flush()
        failpoints.hit(FP_WRITTEN)
        if not failpoints.armed(FP_NO_FSYNC):
            os.fsync(fd)
        failpoints.hit(FP_SYNCED)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dfd)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    failpoints.hit(FP_RENAMED)
    _fsync_dir(dfd)
    return name


def rotate(dfd: int, keep: int, *, keep_name: str) -> tuple[str, ...]:
    """Delete our complete archives beyond the newest `keep` (never `keep_name`)."""
    names = [n for n in final_names(dfd) if n != keep_name]
    extra = len(names) + 1 - keep
    removed = []
    for name in names[:max(extra, 0)]:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            continue
        os.unlink(name, dir_fd=dfd)
        removed.append(name)
        failpoints.hit(FP_ROTATING)
    if removed:
        _fsync_dir(dfd)
    return tuple(removed)
