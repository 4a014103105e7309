"""One-time storage conversions that cannot run inside a migration's transaction.

Migrations record storage wishes in `storage_settings`: 0006 `auto_vacuum =
incremental`, 0007 `page_size = 1024` (docs/storage.md, "Page size and the
slim schema"). An existing database changes either only through a full VACUUM,
and VACUUM cannot run inside a transaction, so `migrate.apply` calls
`apply_storage_settings` after the transactional migrations: at start-up and in
`qledge migrate` only, never while the runtime is serving. One VACUUM does
whatever is due. A new database gets both before its first table
(`prepare_new`), so it never needs one.

A WAL database keeps its page size through VACUUM: the page-size conversion
switches to the rollback journal for the VACUUM and back to WAL afterwards.

Crash safety: VACUUM is one atomic write transaction (through the WAL, or the
rollback journal when the page size changes); killed half-way, the database is
exactly as before (the next open rolls a hot journal back) and the next
start-up tries again. A database left in rollback-journal mode by a kill
between the steps is put back into WAL by `migrate.apply` before anything else.
It is idempotent: once the pragmas read the wished values nothing is done. If
it fails (typically SQLITE_FULL on a full card: VACUUM needs room for a second
copy; or SQLITE_BUSY when another process has the database open, which
leaving WAL does not allow), start-up goes on without it, logs a warning, and
retries next time; retention then frees space.
"""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger("qledge.db.upkeep")
INCREMENTAL = 2
# Migration 0007's wish, given to a new database before its first table.
PAGE_SIZE = 1024


def storage_wishes(conn: sqlite3.Connection) -> dict[str, str]:
    try:
        rows = conn.execute("SELECT name, value FROM storage_settings").fetchall()
    except sqlite3.OperationalError:  # before migration 0006
        return {}
    return {str(name): str(value) for name, value in rows}


def wanted_auto_vacuum(conn: sqlite3.Connection) -> str | None:
    return storage_wishes(conn).get("auto_vacuum")


def wanted_page_size(conn: sqlite3.Connection) -> int | None:
    value = storage_wishes(conn).get("page_size")
    return int(value) if value is not None and value.isdigit() else None


def auto_vacuum_mode(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def page_size(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA page_size").fetchone()[0])


def prepare_new(conn: sqlite3.Connection) -> bool:
    """Give an empty database file the wished page size and auto-vacuum mode.

    Both must be set before the first page is written (journal_mode=WAL writes
    it); afterwards only a VACUUM changes them. Returns True for a new database.
    """
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) != 0:
        return False
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    return True


def apply_storage_settings(conn: sqlite3.Connection) -> str:
    """Convert page size and auto-vacuum mode as wished, if not done yet; returns what happened.

    `conn` must be in autocommit mode with no open transaction.
    """
    incremental = wanted_auto_vacuum(conn) == "incremental"
    size = wanted_page_size(conn)
    if not incremental and size is None:
        return "not requested"
    av_due = incremental and auto_vacuum_mode(conn) != INCREMENTAL
    size_due = size is not None and page_size(conn) != size
    if not (av_due or size_due):
        return "already applied"
    if conn.in_transaction:
        raise RuntimeError("storage conversion needs autocommit (no open transaction)")
    before = f"page_size={page_size(conn)} auto_vacuum={auto_vacuum_mode(conn)}"
    try:
        if size is not None and size_due:
            _vacuum_to_page_size(conn, size, incremental)
        else:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
    except sqlite3.Error as exc:
        log.warning("could not convert the database (%s; wished: %s): %s; "
                    "will retry at the next start", before, _wished(incremental, size), exc)
        return f"failed: {exc}"
    # A VACUUM in WAL mode wrote a copy of the whole database into the WAL: give that space back.
    try:
        # Read the schema first: after the page-size VACUUM on a connection that
        # just rebuilt tables (0007), a checkpoint that has to reload the schema
        # itself holds a read transaction and fails with SQLITE_LOCKED.
        conn.execute("SELECT COUNT(*) FROM sqlite_schema").fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        log.warning("checkpoint after the storage conversion failed: %s", exc)
    after = f"page_size={page_size(conn)} auto_vacuum={auto_vacuum_mode(conn)}"
    if ((incremental and auto_vacuum_mode(conn) != INCREMENTAL)
            or (size is not None and page_size(conn) != size)):
        log.warning("database is %s after VACUUM (wished: %s); will retry at the next start",
                    after, _wished(incremental, size))
        return f"failed: {after}"
    log.info("database converted: %s -> %s", before, after)
    return "converted"


def _vacuum_to_page_size(conn: sqlite3.Connection, size: int, incremental: bool) -> None:
    mode = str(conn.execute("PRAGMA journal_mode=DELETE").fetchall()[0][0]).lower()
    try:
        if mode != "delete":
            raise sqlite3.OperationalError(f"journal mode stayed {mode}")
        conn.execute(f"PRAGMA page_size={int(size)}")
        if incremental:
            # Set again for this VACUUM, so one rewrite does both conversions.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
    finally:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
        except sqlite3.Error as exc:
            # The runtime's writer connection switches to WAL again when it opens.
            log.warning("could not switch the database back to WAL: %s", exc)


def _wished(incremental: bool, size: int | None) -> str:
    parts = [f"page_size={size}"] if size is not None else []
    if incremental:
        parts.append(f"auto_vacuum={INCREMENTAL}")
    return " ".join(parts)
