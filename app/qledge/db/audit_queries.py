"""SQL of the orphan-receipt audit (docs/contract.md §9): a defensive, read-only connection.

The audit is an operator command that may run beside a live worker, so it
must never write, migrate or checkpoint: the file is opened `mode=ro`, the
connection is `query_only`, schema-defined functions are not trusted and
(Python 3.12+) SQLite's defensive mode is on. It reads one table only
(run_attempts: the attempt's status and its journal entry, migration 0021), one
shard's batch of ids at a time.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import urllib.parse
from collections.abc import Collection
from pathlib import Path

import msgspec

BUSY_TIMEOUT_MS = 5000
# A shard walk reads at most 64 entries, far below SQLite's 999 bound parameters.
MAX_BATCH = 256


class Lookup(msgspec.Struct, frozen=True, kw_only=True):
    """What the database knows about a batch of attempt ids."""

    journaled: frozenset[str]
    statuses: dict[str, str]  # attempt id -> run_attempts.status


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open the database read-only; FileNotFoundError when there is no database file.

    SQLite would otherwise report a missing file as a vague OperationalError
    (and a writable open would create an empty database).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FileNotFoundError(f"{path} is not a regular file")
    # Quote the path: '?', '#' or '%' in a directory name would change the URI.
    uri = f"file:{urllib.parse.quote(os.fspath(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
        if sys.version_info >= (3, 12):
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
    except BaseException:
        conn.close()
        raise
    return conn


def lookup(conn: sqlite3.Connection, attempt_ids: Collection[str]) -> Lookup:
    """Journal membership and attempt status for `attempt_ids`, in one read snapshot."""
    ids = sorted(set(attempt_ids))
    if len(ids) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} ids per lookup")
    if not ids:
        return Lookup(journaled=frozenset(), statuses={})
    marks = ", ".join("?" * len(ids))
    # One snapshot, so an entry ageing out or an attempt ending mid-lookup is not
    # seen half-way.
    conn.execute("BEGIN")
    try:
        journaled = conn.execute(
            f"SELECT id FROM run_attempts WHERE id IN ({marks})"  # noqa: S608
            " AND receipt_state IS NOT NULL",
            ids,
        ).fetchall()
        statuses = conn.execute(
            f"SELECT id, status FROM run_attempts WHERE id IN ({marks})",  # noqa: S608
            ids,
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    return Lookup(
        journaled=frozenset(str(r[0]) for r in journaled),
        statuses={str(r[0]): str(r[1]) for r in statuses},
    )
