"""One-time storage conversions that cannot run inside a migration's transaction.

Migration 0006 records the wish `auto_vacuum = incremental` in `storage_settings`.
An existing database only changes its auto-vacuum mode through a full VACUUM,
and VACUUM cannot run inside a transaction, so `migrate.apply` calls
`apply_storage_settings` after the transactional migrations: at start-up and in
`qledge migrate` only, never while the runtime is serving.

Crash safety: VACUUM is one atomic write transaction (in WAL mode it commits
through the WAL); killed half-way, the database is exactly as before, still
`auto_vacuum = 0`, and the next start-up tries again. It is idempotent: once
`PRAGMA auto_vacuum` reads 2 nothing is done. If it fails (typically SQLITE_FULL
on a full card: VACUUM needs room for a second copy), start-up goes on without
it, logs a warning, and retries next time; retention then frees space.
"""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger("qledge.db.upkeep")
INCREMENTAL = 2


def wanted_auto_vacuum(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute(
            "SELECT value FROM storage_settings WHERE name = 'auto_vacuum'").fetchone()
    except sqlite3.OperationalError:  # before migration 0006
        return None
    return str(row[0]) if row else None


def auto_vacuum_mode(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def apply_storage_settings(conn: sqlite3.Connection) -> str:
    """Convert to incremental auto-vacuum if asked and not done yet; returns what happened.

    `conn` must be in autocommit mode with no open transaction.
    """
    if wanted_auto_vacuum(conn) != "incremental":
        return "not requested"
    if auto_vacuum_mode(conn) == INCREMENTAL:
        return "already incremental"
    if conn.in_transaction:
        raise RuntimeError("auto_vacuum conversion needs autocommit (no open transaction)")
    try:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
    except sqlite3.Error as exc:
        log.warning("could not convert the database to incremental auto-vacuum (%s); "
                    "will retry at the next start", exc)
        return f"failed: {exc}"
    # VACUUM wrote a copy of the whole database into the WAL: give that space back.
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        log.warning("checkpoint after the auto-vacuum conversion failed: %s", exc)
    mode = auto_vacuum_mode(conn)
    if mode != INCREMENTAL:
        log.warning("auto_vacuum is %d after VACUUM; will retry at the next start", mode)
        return f"failed: auto_vacuum={mode}"
    log.info("database converted to incremental auto-vacuum")
    return "converted"
