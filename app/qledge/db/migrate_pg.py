"""Migrations on PostgreSQL: `migrations/pg/NNNN_name.sql`, recorded with checksums.

The same rules as SQLite's (migrate.py): numbered, append-only files, each applied
in its own transaction and recorded in `schema_migrations` with the SHA-256 of its
text; refused when an applied file has changed or the database carries a
migration this code does not know. PostgreSQL's history starts at 0022, the
baseline (docs/fleet.md, "Migrations on both backends"); from then on every
migration is a pair with SQLite's, same number and name.

Several nodes may start against one empty database at once: the whole check and
apply runs under a session advisory lock, so one migrates and the others wait,
then find nothing pending. db/backend.py runs it at start-up in fleet mode.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg

from ..clock import now_ms
from . import migrate
from .migrate import Migration, MigrationError

FIRST = 22  # PostgreSQL's history starts at the baseline
# pg_advisory_lock's key for migrating: "qledge m" as a big-endian int64
LOCK_KEY = int.from_bytes(b"qledge m", "big", signed=True)

_CREATE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version bigint PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
    " applied_at_ms bigint NOT NULL)"
)


def bundled(directory: Path | None = None) -> list[Migration]:
    """PostgreSQL's migrations, in order, from 0022 without gaps."""
    root = directory or Path(str(resources.files("qledge.db") / "migrations" / "pg"))
    return migrate.bundled(root, first=FIRST)


async def apply(dsn: str, migrations: list[Migration] | None = None) -> list[int]:
    """Check and apply pending migrations under the advisory lock, one transaction
    each. Returns the applied versions."""
    migs = bundled() if migrations is None else migrations
    conn: Any = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
        try:
            await conn.execute(_CREATE)
            rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
            applied = {int(r["version"]): (str(r["name"]), str(r["checksum"])) for r in rows}
            done: list[int] = []
            for mig in migrate.pending(applied, migs):
                await _apply_one(conn, mig)
                done.append(mig.version)
            return done
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    finally:
        await conn.close()


async def _apply_one(conn: Any, mig: Migration) -> None:
    try:
        async with conn.transaction():
            # No parameters: the simple query protocol, so a file may hold many statements.
            await conn.execute(mig.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum, applied_at_ms)"
                " VALUES ($1, $2, $3, $4)",
                mig.version, mig.name, mig.checksum, now_ms(),
            )
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc
