"""A consistent copy of the embedded SQLite database for a backup (docs/backup.md).

`VACUUM INTO` reads one snapshot of the live WAL database (the worker keeps
writing meanwhile) into a new file; never a file copy of a live database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
