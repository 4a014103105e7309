"""A consistent copy of the embedded SQLite database for a backup (docs/backup.md).

`VACUUM INTO` reads one snapshot of the live WAL database (the worker keeps
writing meanwhile) into a new file; never a file copy of a live database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..model import RunStatus
from . import statuses

# What the manifest counts (table → the name the manifest gives it).
COUNTED = {"tasks": "tasks", "envs": "envs", "subscriptions": "subscriptions",
           "notify_channels": "channels", "notify_rules": "notify_rules", "apps": "apps",
           "dependencies": "dependencies", "runs": "runs"}


class SnapshotError(Exception):
    pass


def take(db_path: Path, dest: Path, *, with_history: bool) -> tuple[int, dict[str, int]]:
    """Copy `db_path` into `dest` (must not exist); without history the runs and what
    hangs off them are dropped from the copy. (schema version, counts)."""
    if not db_path.is_file():
        raise SnapshotError(f"no database at {db_path}")
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)
    try:
        src.execute("PRAGMA busy_timeout=10000")
        src.execute("VACUUM INTO ?", (str(dest),))
    finally:
        src.close()
    conn = sqlite3.connect(dest, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        if not with_history:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM runs")  # attempts, events, leases, jobs cascade
            conn.execute("DELETE FROM notify_outbox")
            conn.execute("DELETE FROM file_deletions")
            conn.execute("COMMIT")
            conn.execute("VACUUM")
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        counts: dict[str, int] = {}
        for table, name in COUNTED.items():  # table names from COUNTED, never input
            sql = f"SELECT COUNT(*) FROM {table}"  # noqa: S608
            counts[name] = int(conn.execute(sql).fetchone()[0])
        return int(row[0] or 0), counts
    finally:
        conn.close()


# -- the restore's side (backup/restore.py): the staged copy and the live database ---------

def _counts(conn: sqlite3.Connection) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table, name in COUNTED.items():  # table names from COUNTED, never input
        sql = f"SELECT COUNT(*) FROM {table}"  # noqa: S608
        counts[name] = int(conn.execute(sql).fetchone()[0])
    return counts


def inspect(path: Path) -> int:
    """The schema version of a staged database file, after SQLite's own integrity
    check: a file that is not a database, or a damaged one, is a SnapshotError."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()
            if ok is None or ok[0] != "ok":
                raise SnapshotError(f"the database fails its integrity check: {ok}")
            row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
            return int(row[0] or 0)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SnapshotError(f"not a usable qledge database: {exc}") from exc


def seal(path: Path) -> dict[str, int]:
    """A staged (migrated) database made one self-contained file: its WAL checkpointed
    and removed (journal_mode DELETE; start-up's migrator turns WAL on again), synced.
    Its counts, for the report."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        return _counts(conn)
    finally:
        conn.close()


def live_state(db_path: Path) -> tuple[dict[str, int], int]:
    """(counts, runs executing now) of the live database, read-only; an absent file
    is an empty appliance."""
    if not db_path.is_file():
        return dict.fromkeys(COUNTED.values(), 0), 0
    # Read-write but query_only: a read-only connection to a WAL database nobody has
    # open would leave -wal and -shm files behind; this one, the last to close, removes
    # them (a refused restore leaves the data folder byte for byte as it was).
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA query_only=1")
        conn.execute("PRAGMA busy_timeout=10000")
        sql = f"SELECT COUNT(*) FROM runs WHERE {statuses.is_('status', RunStatus.RUNNING)}"  # noqa: S608
        running = conn.execute(sql).fetchone()
        return _counts(conn), int(running[0])
    except sqlite3.Error as exc:
        raise SnapshotError(f"the current database cannot be read: {exc}") from exc
    finally:
        conn.close()
