"""Writing a backup archive as a stream (docs/backup.md): the database snapshot, the
scripts folder and its history, optionally the logs, then the manifest.

Nothing is built whole: each member goes from its file straight into the tar
stream, hashed on the way; the database snapshot is a temporary file on the data
volume, unlinked as soon as it is open."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .. import __version__
from ..clock import now_ms
from ..db import snapshot
from ..settings import Settings
from .manifest import (
    DB_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    ROOT,
    Format,
    Manifest,
    Member,
    encode,
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
CHUNK = 64 * 1024


class _Hashing(io.RawIOBase):
    """Reads at most `size` bytes of an fd, hashing them (tarfile reads exactly size)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.left, self.digest = fd, size, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        data = os.read(self.fd, want) if want else b""
        self.left -= len(data)
        self.digest.update(data)
        return data


def _walk(dir_fd: int, prefix: str, *, restore_folders: bool = True
          ) -> Iterator[tuple[str, int | None, os.stat_result]]:
    """(archive name, open fd of a regular file or None for a dir, its stat), depth first,
    never through a link: every step is an openat with O_NOFOLLOW from the parent's fd.
    Anything else (links, fifos, sockets) is left out; so are a restore's own folders
    when `restore_folders` is false (the logs volume's root holds them)."""
    with os.scandir(dir_fd) as it:
        names = sorted(e.name for e in it
                       if restore_folders or not e.name.startswith(".restore"))
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            try:
                yield f"{prefix}/{name}", None, os.fstat(sub)
                yield from _walk(sub, f"{prefix}/{name}")
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                os.close(fd)
                continue
            yield f"{prefix}/{name}", fd, fst


def _areas(conf: Settings, with_logs: bool) -> list[tuple[str, Path]]:
    areas = [("scripts", conf.scripts_path), ("scripts-history", conf.script_history_path)]
    if with_logs:
        areas.append(("logs", conf.logs_path))
    return areas


def estimate(conf: Settings, *, with_logs: bool = False) -> dict[str, int]:
    """Bytes each part would hold before compression (the database with its WAL: the
    snapshot is at most that), so a person sees the size before starting."""
    sizes = {"database": sum(p.stat().st_size for p in (
        conf.db_path, conf.db_path.with_name(conf.db_path.name + "-wal")) if p.exists())}
    for area, root in _areas(conf, with_logs):
        total = 0
        if root.is_dir():
            top = os.open(root, _DIR_FLAGS)
            try:
                for _name, fd, st in _walk(top, area, restore_folders=area != "logs"):
                    if fd is not None:
                        os.close(fd)
                        total += st.st_size
            finally:
                os.close(top)
        sizes[area] = total
    return sizes


def write(conf: Settings, out: IO[bytes], *, gzip: bool = True, with_logs: bool = False,
          with_history: bool = False, encrypted: bool = False) -> Manifest:
    """Write the whole archive to `out` (a stream: only written to, in order);
    `encrypted`: `out` encrypts it (backup/crypto.py), said in the manifest."""
    if conf.fleet:
        raise snapshot.SnapshotError(
            "fleet mode keeps its data in PostgreSQL: back it up with pg_dump (docs/backup.md)")
    members: list[Member] = []
    with tarfile.open(fileobj=out, mode="w|gz" if gzip else "w|",
                      format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, FORMAT_NAME, encode(Format(format=FORMAT_VERSION,
                                                   qledge_version=__version__)))
        tmp = conf.data_path / f".backup-{os.getpid()}-{time.monotonic_ns()}.sqlite3"
        try:
            schema, counts = snapshot.take(conf.db_path, tmp, with_history=with_history)
            fd = os.open(tmp, _FILE_FLAGS)
        finally:
            tmp.unlink(missing_ok=True)
        try:
            members.append(_add_fd(tar, DB_NAME, fd, os.fstat(fd)))
        finally:
            os.close(fd)
        for area, root in _areas(conf, with_logs):
            if not root.is_dir():
                continue
            top = os.open(root, _DIR_FLAGS)
            try:
                for name, fd_or_none, st in _walk(top, f"{ROOT}/{area}",
                                                  restore_folders=area != "logs"):
                    if fd_or_none is None:
                        info = tarfile.TarInfo(name)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, int(st.st_mtime)
                        tar.addfile(info)
                        members.append(Member(name=name, kind="dir", size=0, sha256=""))
                        continue
                    try:
                        members.append(_add_fd(tar, name, fd_or_none, st))
                    finally:
                        os.close(fd_or_none)
            finally:
                os.close(top)
        manifest = Manifest(format=FORMAT_VERSION, qledge_version=__version__,
                            schema_version=schema, created_at_ms=now_ms(),
                            with_logs=with_logs, with_history=with_history, encrypted=encrypted,
                            counts=counts, members=tuple(members))
        _add_bytes(tar, MANIFEST_NAME, encode(manifest))
    return manifest


def _add_fd(tar: tarfile.TarFile, name: str, fd: int, st: os.stat_result) -> Member:
    # The size is fixed here: a log still growing is cut at this size, never torn.
    info = tarfile.TarInfo(name)
    info.size, info.mtime = st.st_size, int(st.st_mtime)
    info.mode = (stat.S_IMODE(st.st_mode) & 0o755) | 0o600  # x bits kept (restore)
    reader = _Hashing(fd, st.st_size)
    tar.addfile(info, reader)
    return Member(name=name, kind="file", size=st.st_size, sha256=reader.digest.hexdigest())


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, now_ms() // 1000
    tar.addfile(info, io.BytesIO(data))
