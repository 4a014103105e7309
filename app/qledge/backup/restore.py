"""Staging a restore (docs/backup.md, "Restoring"): the archive read once, every
member checked against the manifest while it is written into the staging folders on
the data and work volumes, the database migrated to this version's schema and its
dependency installs queued again; then the `restore-pending.json` marker, last.

Nothing live is touched here: a refused archive (any BackupInvalid or RestoreError)
leaves the appliance exactly as it was, its staging removed. The swap (swap.py) puts
the staged state in place, at once when the worker is stopped, else at its start-up.
Logs in the archive (`--with-logs`) replace the logs volume's; an archive without
them leaves that volume as it is."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

from ..clock import now_ms
from ..db import migrate, snapshot
from ..fs import dirfd
from ..settings import Settings
from . import swap
from .check import verify
from .errors import BackupInvalid, RestoreError
from .manifest import DB_NAME, ROOT

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_WORK_AREAS = ("scripts", "scripts-history")


class _Stager:
    """verify's sink: each member written under the staging folders, each file fsynced
    (its bytes must be on disk before the marker says they are the new state)."""

    def __init__(self, conf: Settings) -> None:
        self.stages = swap.staging_dirs(conf)
        self.data_stage, self.work_stage, self.logs_stage = self.stages
        self.db_file = self.data_stage / conf.db_path.name
        self.dirs: set[Path] = set()

    def prepare(self) -> None:
        for stage in self.stages:
            stage.mkdir(mode=0o700)
        for area in _WORK_AREAS:
            (self.work_stage / area).mkdir(mode=0o700)

    def _target(self, name: str) -> Path | None:
        if name == DB_NAME:
            return self.db_file
        area, _, rest = name.removeprefix(f"{ROOT}/").partition("/")
        if area == "logs":  # names checked by verify: no .., no /
            return None if rest.startswith(".restore") else self.logs_stage / rest
        return self.work_stage / area / rest if area in _WORK_AREAS else None

    def __call__(self, info: tarfile.TarInfo, chunks: Iterator[bytes] | None) -> None:
        target = self._target(info.name)
        if target is None:
            return
        try:
            if chunks is None:
                target.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.dirs.add(target)
                return
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.dirs.add(target.parent)
            fd = os.open(target, _NEW_FILE, 0o600)
            try:
                if target != self.db_file:  # a script keeps its x bits, never g/o write
                    os.fchmod(fd, (info.mode & 0o755) | 0o600)
                for data in chunks:
                    dirfd.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise RestoreError("RESTORE_NO_SPACE", "no space left to stage the restore",
                                   member=info.name) from exc
            if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
                raise BackupInvalid("BACKUP_MEMBER_PATH", f"member {info.name!r} clashes with"
                                    " another member", member=info.name) from exc
            raise

    def sync_dirs(self) -> None:
        for d in sorted(self.dirs | set(self.stages), key=lambda p: -len(p.parts)):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def check_target(conf: Settings, *, replace: bool, force: bool) -> dict[str, int]:
    """The live appliance may take the restore: empty, or `replace`; no run executing
    unless `force`. Its counts."""
    try:
        counts, running = snapshot.live_state(conf.db_path)
    except snapshot.SnapshotError as exc:
        raise RestoreError("RESTORE_CURRENT_UNREADABLE", str(exc)) from exc
    held = {k: v for k, v in counts.items() if v}
    if held and not replace:
        raise RestoreError("RESTORE_NOT_EMPTY", "this appliance already holds data: "
                           + ", ".join(f"{k} {v}" for k, v in held.items())
                           + "; restore with --replace to replace it", **held)
    if running and not force:
        raise RestoreError("RESTORE_RUNS_ACTIVE", f"{running} runs are executing: wait for"
                           " them or cancel them, or restore with --force", running=running)
    return counts


def stage(conf: Settings, source: IO[bytes], *, replace: bool = False,
          force: bool = False, passphrase: bytes | None = None) -> swap.Pending:
    """Read, check and stage the archive from `source`; write the marker. Raises
    BackupInvalid or RestoreError (the appliance unchanged) or swap.Busy."""
    if conf.fleet:
        raise RestoreError("RESTORE_FLEET", "fleet mode keeps its data in PostgreSQL:"
                           " restore it with pg_restore (docs/backup.md)")
    with swap.locked(conf):
        if swap.read_pending(conf) is not None:
            raise RestoreError("RESTORE_PENDING", "a restore is already staged: it is applied"
                               " when the worker starts")
        check_target(conf, replace=replace, force=force)
        swap.sweep(conf)
        stager = _Stager(conf)
        done = False
        try:
            stager.prepare()
            manifest = verify(source, stager, passphrase)
            pending = _finish(conf, stager, replace=replace, schema=manifest.schema_version,
                              logs=manifest.with_logs)
            check_target(conf, replace=replace, force=force)  # still true after the upload
            stager.sync_dirs()
            swap.write_pending(conf, pending)
            done = True
            return pending
        finally:
            if not done and swap.read_pending(conf) is None:  # undecided: nothing to keep
                for stage_dir in stager.stages:
                    shutil.rmtree(stage_dir, ignore_errors=True)


def _finish(conf: Settings, stager: _Stager, *, replace: bool, schema: int,
            logs: bool) -> swap.Pending:
    """The staged database checked, migrated to this version and its dependency
    installs queued; sealed into one file."""
    current = len(migrate.bundled())
    try:
        found = snapshot.inspect(stager.db_file)
    except snapshot.SnapshotError as exc:
        raise RestoreError("RESTORE_DATABASE_INVALID", str(exc)) from exc
    if found != schema:
        raise RestoreError("RESTORE_DATABASE_INVALID", f"the database is at schema {found},"
                           f" the manifest says {schema}", schema=found)
    if found > current:
        raise RestoreError("RESTORE_SCHEMA_NEWER", f"the backup's database schema {found} is"
                           f" newer than this qledge's ({current}): upgrade qledge first",
                           schema=found, current=current)
    try:
        migrate.apply(stager.db_file)
    except migrate.MigrationError as exc:
        raise RestoreError("RESTORE_MIGRATION_FAILED", f"migrating the backup's database"
                           f" failed: {exc}", schema=found) from exc
    staged_conf = msgspec.structs.replace(conf, data_dir=str(stager.data_stage))
    requeued = asyncio.run(_requeue(staged_conf))
    counts = snapshot.seal(stager.db_file)
    from .. import __version__

    return swap.Pending(id=f"{now_ms()}-{os.getpid()}", created_at_ms=now_ms(),
                        replace=replace, qledge_version=__version__, schema_version=current,
                        counts=counts, requeued=requeued, logs=logs)


async def _requeue(staged: Settings) -> dict[str, int]:
    """Every declared dependency pointed at a new install job of its ecosystem's queue
    (the installed packages are not in a backup: they are rebuilt). {ecosystem: count}."""
    from ..db import backend
    from ..db import dependencies as deps
    from ..dependencies.spec import ECOSYSTEMS
    from ..runtime.dependencies import queue_job

    db = backend.database(staged, readers=1)
    await db.open()
    out: dict[str, int] = {}
    try:
        async with db.write() as tx:
            for eco in ECOSYSTEMS:
                ids = [d.id for d in await deps.list_all(tx, type_=eco) if d.action == "install"]
                if ids:
                    await queue_job(tx, eco, ids, "install", staged.deps_timeout_s)
                    out[eco] = len(ids)
    finally:
        await db.close()
    return out

