"""The backend this node's settings name: the embedded SQLite, or the fleet's PostgreSQL.

`database_url` empty (the default) is the embedded SQLite exactly as before: the file
under the data dir, db/migrate.py, db/sqlite.Database. Set, it is fleet mode
(docs/fleet.md): db/pg.Database on that server, db/migrate_pg.py, and the node's
runtime owner id kept in `<data_path>/node-id` (SQLite keeps it in its `node` row;
a shared database cannot hold one node's identity for it).

asyncpg is imported only in fleet mode, so an embedded node never needs it. The URL
may hold a password: it is only ever shown through `settings.redact_dsn`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from .. import ids
from ..settings import Settings, SettingsError, redact_dsn
from . import errors, migrate, sqlite
from .interface import Database

log = logging.getLogger("qledge.db.backend")

NODE_ID_FILE = "node-id"
# Start-up waits this long for an unreachable server before giving up (exit 2: the
# supervisor starts the worker again); the plan's reconnect backoff, 0.5 s to 10 s.
CONNECT_WAIT_S = 60.0
BACKOFF_S = (0.5, 10.0)


def _require_driver() -> None:
    try:
        import asyncpg  # noqa: F401
    except ImportError as exc:  # the image ships it with fleet mode; a dev venv has it
        raise SettingsError(
            "fleet mode (QLEDGE_DATABASE_URL) is not available here: its PostgreSQL driver"
            f" asyncpg is missing ({exc}); the linux/arm/v7 image has none (no 32-bit ARM"
            " build): run the amd64 or arm64 image") from None


def database(settings: Settings, readers: int = 2) -> Database:
    """An unopened Database for these settings: either backend, as db/interface.py's
    Protocol (mypy checks here that both satisfy it)."""
    if not settings.fleet:
        return sqlite.Database(settings.db_path, readers=readers)
    _require_driver()
    from . import pg

    return pg.Database(settings.database_url, readers=readers)


def migrate_now(settings: Settings) -> list[int]:
    """Check and apply pending migrations (start-up and `qledge migrate`), outside any
    event loop. On PostgreSQL a server that refuses connections is waited for (it may
    be starting with the node), up to CONNECT_WAIT_S."""
    if not settings.fleet:
        return migrate.apply(settings.db_path)
    return asyncio.run(migrate_pg_waiting(settings.database_url))


async def migrate_pg_waiting(dsn: str, wait_s: float = CONNECT_WAIT_S) -> list[int]:
    _require_driver()
    from . import migrate_pg, pg

    delay, loop = BACKOFF_S[0], asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            return await migrate_pg.apply(dsn)
        except migrate.MigrationError:
            raise
        except Exception as exc:
            mapped = pg.map_error(exc)
            if not isinstance(mapped, errors.PgTransient) or loop.time() + delay > deadline:
                # The driver's own message may quote the URL (a password): only what the
                # server said (it has a SQLSTATE), else the class of the error.
                said = f": {mapped}" if mapped is not None and mapped.sqlstate else ""
                raise migrate.MigrationError(
                    f"database {redact_dsn(dsn)}: {type(exc).__name__}{said}") from None
            log.warning("database %s unreachable (%s); retrying in %.1f s",
                        redact_dsn(dsn), type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])


def fleet_node_id(data_path: Path) -> str:
    """This node's runtime owner id on PostgreSQL: created once (uuid7), then read.

    Written to a temporary file, fsynced, renamed and the directory fsynced: a crash
    leaves either no id (the next start creates one; nothing was owned yet) or the
    whole one, never a torn one that would orphan this node's attempts."""
    path = data_path / NODE_ID_FILE
    try:
        node_id = path.read_text("ascii").strip()
    except FileNotFoundError:
        node_id = ""
    if node_id:
        return node_id
    node_id = ids.uuid7()
    tmp = path.with_name(f".{NODE_ID_FILE}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{node_id}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(data_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    log.info("node id %s created in %s", node_id, path)
    return node_id
