"""The restore's swap (docs/backup.md, "Restoring"): the staged state put in place by
renames, the old one kept aside until the new one is committed.

The staging (backup/restore.py) ends by writing the `restore-pending.json` marker, the
decision; this module makes it true, before anything opens the database (worker
start-up, or `qledge restore` with the worker stopped). Every step is a rename inside
one volume and the whole is idempotent, so a kill at any point is finished by the next
start: before the marker the old state stands (the staging is swept), after it the
new one is always completed before the database opens — never a mix.

Per part (the database, then scripts, then their history): the live one is renamed
into `.restore-previous-<id>/` of its volume, then the staged one into its place. The
database's `-wal`/`-shm` go aside first: an old WAL next to the new file would be
replayed into it. An archive holding logs then replaces the logs volume's entries
(its root is a mount point: the entries move, not the folder). Once all parts are in
place the marker is moved into the data volume's previous folder (the commit), then
the previous folders are removed."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from .. import failpoints
from ..paths import fsync_dir
from ..settings import Settings

log = logging.getLogger("qledge.restore")

MARKER = "restore-pending.json"
STAGING = ".restore-staging"
PREVIOUS = ".restore-previous-"
ASIDE_DONE = ".restore-aside-done"  # in the logs volume's previous folder: phase one ended


class Pending(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What the marker says: which staging to put in place, and what it holds."""

    id: str
    created_at_ms: int
    replace: bool
    qledge_version: str
    schema_version: int
    counts: dict[str, int]
    requeued: dict[str, int]
    logs: bool = False  # the archive held logs: they replace the logs volume's


class Busy(Exception):
    """Another restore is staging (the lock is held)."""


@contextmanager
def locked(conf: Settings, *, wait: bool = False) -> Iterator[None]:
    """The restore lock: one staging or swap at a time. A flock on the data folder
    itself, so a refused restore leaves not even a lock file behind."""
    fd = os.open(conf.data_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise Busy("another restore is under way") from exc
        yield
    finally:
        os.close(fd)


def staging_dirs(conf: Settings) -> tuple[Path, Path, Path]:
    """(the data volume's staging: the database; the work volume's: the script folders;
    the logs volume's: the logs), each on its volume so the swap is renames only."""
    return conf.data_path / STAGING, conf.work_path / STAGING, conf.logs_path / STAGING


def parts(conf: Settings, pending_id: str) -> list[tuple[Path, Path | None, Path]]:
    """(live, staged or None, where the live one goes aside), in the swap's order."""
    data_stage, work_stage, _ = staging_dirs(conf)
    data_prev = conf.data_path / f"{PREVIOUS}{pending_id}"
    work_prev = conf.work_path / f"{PREVIOUS}{pending_id}"
    db = conf.db_path
    out: list[tuple[Path, Path | None, Path]] = []
    for suffix in ("-wal", "-shm"):
        out.append((db.with_name(db.name + suffix), None, data_prev / (db.name + suffix)))
    out.append((db, data_stage / db.name, data_prev / db.name))
    out.append((conf.scripts_path, work_stage / "scripts", work_prev / "scripts"))
    out.append((conf.script_history_path, work_stage / "scripts-history",
                work_prev / "scripts-history"))
    return out


def read_pending(conf: Settings) -> Pending | None:
    try:
        data = (conf.data_path / MARKER).read_bytes()
    except FileNotFoundError:
        return None
    return msgspec.json.decode(data, type=Pending, strict=True)


def write_pending(conf: Settings, pending: Pending) -> None:
    """The decision, durable: a temporary name, fsynced, renamed, the folder fsynced."""
    tmp = conf.data_path / f"{MARKER}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, msgspec.json.encode(pending))
        os.fsync(fd)
    finally:
        os.close(fd)
    failpoints.hit("restore.before_marker")
    os.rename(tmp, conf.data_path / MARKER)
    fsync_dir(conf.data_path)


def apply_pending(conf: Settings) -> Pending | None:
    """Finish a decided restore (the marker), or sweep what an undecided one left.
    Called with the runtime lock held and before the database is opened. The restore
    applied, or None."""
    try:
        with locked(conf):
            pending = read_pending(conf)
            if pending is None:
                sweep(conf)
                return None
            _swap(conf, pending)
            return pending
    except Busy:
        return None  # a `qledge restore` is staging now; its marker is not written yet


def cancel(conf: Settings) -> Pending | None:
    """A staged restore dropped before its swap (`qledge restore --cancel`): the marker
    removed first (the decision undone), then the staging. What was dropped, or None."""
    with locked(conf):
        pending = read_pending(conf)
        if pending is not None:
            (conf.data_path / MARKER).unlink()
            fsync_dir(conf.data_path)
        sweep(conf)
        return pending


def _swap(conf: Settings, pending: Pending) -> None:
    log.warning("restoring a backup (staged %s): the current state goes aside", pending.id)
    steps = parts(conf, pending.id)
    # The -wal/-shm go aside only while the staged database still waits: once it is in
    # place, a -wal beside it is its own.
    db_waiting = any(staged is not None and staged.name == conf.db_path.name and
                     os.path.lexists(staged) for _, staged, _ in steps)
    for step, (live, staged, aside) in enumerate(steps):
        if staged is None and not db_waiting:
            continue
        if staged is not None and not os.path.lexists(staged):
            continue  # this part is already in place (a swap cut short and resumed)
        if os.path.lexists(live):
            aside.parent.mkdir(mode=0o700, exist_ok=True)
            os.rename(live, aside)
            fsync_dir(live.parent)
        failpoints.hit(f"restore.swap.{step}.aside")
        if staged is not None:
            os.rename(staged, live)
            fsync_dir(live.parent)
        failpoints.hit(f"restore.swap.{step}.placed")
    if pending.logs:
        _swap_logs(conf, pending.id, len(steps))
    data_prev = conf.data_path / f"{PREVIOUS}{pending.id}"
    data_prev.mkdir(mode=0o700, exist_ok=True)
    os.rename(conf.data_path / MARKER, data_prev / MARKER)  # the commit
    fsync_dir(conf.data_path)
    failpoints.hit("restore.committed")
    sweep(conf)
    log.warning("backup restored: schema %s, %s", pending.schema_version,
                ", ".join(f"{k} {v}" for k, v in pending.counts.items()))


def _swap_logs(conf: Settings, pending_id: str, step: int) -> None:
    """The logs volume's entries one by one: every live one aside, then every staged
    one in. Phase one ends with a mark, so a swap resumed after it never takes the
    restored entries for live ones and puts them aside too."""
    root = conf.logs_path
    stage = root / STAGING
    prev = root / f"{PREVIOUS}{pending_id}"
    if not (prev / ASIDE_DONE).exists():
        prev.mkdir(mode=0o700, exist_ok=True)
        for name in sorted(os.listdir(root)):
            if not name.startswith(".restore"):
                os.rename(root / name, prev / name)
        fsync_dir(root)
        failpoints.hit(f"restore.swap.{step}.aside")
        (prev / ASIDE_DONE).touch(mode=0o600)
        fsync_dir(prev)
    if stage.is_dir():
        for name in sorted(os.listdir(stage)):
            os.rename(stage / name, root / name)
        fsync_dir(root)
    failpoints.hit(f"restore.swap.{step}.placed")


def sweep(conf: Settings) -> None:
    """Without a marker: the staging of a restore never decided, and the previous state
    of one committed, are left-overs (the caller holds the restore lock)."""
    for root in (conf.data_path, conf.work_path, conf.logs_path):
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            continue
        for name in names:
            if name == STAGING or name.startswith(PREVIOUS):
                shutil.rmtree(root / name, ignore_errors=True)
    (conf.data_path / f"{MARKER}.tmp").unlink(missing_ok=True)
