"""Numbered, append-only SQL migrations, each recorded with a checksum.

Start-up refuses to run when an applied migration's file has changed or when
the database carries a migration this code does not know (it is newer).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from importlib import resources
from pathlib import Path

import msgspec

from ..clock import now_ms
from . import upkeep

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(Exception):
    """The database and the code disagree; start-up must stop."""


class Migration(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def bundled(directory: Path | None = None, first: int = 1) -> list[Migration]:
    """The migrations shipped with this code, in order, numbered from `first` without
    gaps (PostgreSQL's, db/migrate_pg.py, start at their baseline)."""
    root = directory or Path(str(resources.files("qledge.db") / "migrations"))
    found: list[Migration] = []
    for path in sorted(root.iterdir()):
        m = _NAME.match(path.name)
        if m is None:
            continue
        found.append(Migration(version=int(m[1]), name=m[2], sql=path.read_text()))
    for expected, mig in enumerate(found, start=first):
        if mig.version != expected:
            raise MigrationError(f"migration numbering has a gap at {expected:04d}")
    return found


def _applied(conn: sqlite3.Connection) -> dict[int, tuple[str, str]]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,"
        " applied_at_ms INTEGER NOT NULL) STRICT"
    )
    rows = conn.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    return {int(v): (str(n), str(c)) for v, n, c in rows}


def check(conn: sqlite3.Connection, migrations: list[Migration]) -> list[Migration]:
    """Validate applied migrations; return the pending ones."""
    return pending(_applied(conn), migrations)


def pending(applied: dict[int, tuple[str, str]], migrations: list[Migration]) -> list[Migration]:
    """Validate the applied (version → name, checksum) against the code's migrations, on
    either backend; return the ones to apply."""
    known = {m.version: m for m in migrations}
    for version, (name, checksum) in sorted(applied.items()):
        mig = known.get(version)
        if mig is None:
            raise MigrationError(
                f"database has migration {version:04d}_{name} that this qledge does not know: "
                "the database is newer than the code (downgrade is not supported)"
            )
        if mig.checksum != checksum:
            raise MigrationError(
                f"applied migration {version:04d}_{name} has changed since it was applied "
                f"(checksum {checksum[:12]} in the database, {mig.checksum[:12]} in the code)"
            )
    return [m for m in migrations if m.version not in applied]


def apply(db_path: Path, migrations: list[Migration] | None = None) -> list[int]:
    """Check and apply pending migrations, one transaction each. Returns applied versions."""
    migs = bundled() if migrations is None else migrations
    _private_file(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        # Before the first page is written (WAL mode writes it), so that a new
        # database starts with the wished page size and auto-vacuum mode and
        # never needs the conversion VACUUM.
        upkeep.prepare_new(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=10000")
        # Off while migrating so table rebuilds are possible; checked afterwards.
        conn.execute("PRAGMA foreign_keys=OFF")
        done: list[int] = []
        for mig in check(conn, migs):
            _apply_one(conn, mig)
            done.append(mig.version)
        problems = conn.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise MigrationError(f"foreign key check failed after migrating: {len(problems)} rows")
        # Outside any transaction: the one-time VACUUM to the wished page size
        # and incremental auto-vacuum (see upkeep).
        upkeep.apply_storage_settings(conn)
        return done
    finally:
        conn.close()


def _private_file(db_path: Path) -> None:
    """The database file is 0600; SQLite gives its -wal and -shm files the same mode."""
    fd = os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _apply_one(conn: sqlite3.Connection, mig: Migration) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # executescript would COMMIT first; run statement by statement instead.
        for statement in _statements(mig.sql):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at_ms)"
            " VALUES (?, ?, ?, ?)",
            (mig.version, mig.name, mig.checksum, now_ms()),
        )
        conn.execute("COMMIT")
    except Exception as exc:
        conn.execute("ROLLBACK")
        raise MigrationError(f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc


def _statements(sql: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buf.strip():
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise MigrationError("migration ends with an incomplete statement")
    return out
