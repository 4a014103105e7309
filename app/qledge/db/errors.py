"""The storage layer's errors, named by what a caller does about them.

Modules outside `db/` decide on storage failures — retry a receipt batch, answer
507, relieve disk pressure, exit 2 — and used to import `sqlite3` to do it, so a
second backend's exceptions would slip past them (docs/fleet.md, "SQL
dialect differences"). They import this module instead.

Design: on SQLite the names below stand for SQLite's own classes, not new classes
wrapping them. Nothing re-raises, so every raise site, traceback and
`type(exc).__name__` in a log line stays exactly as it was. The PostgreSQL backend
(db/pg.py) maps asyncpg's exceptions at the `db/` boundary into the real classes
`PgError`, `PgTransient`, `PgIntegrity` and `PgFull` below, and each name is the
tuple of both backends' classes, so the callers' `except` clauses and `isinstance` checks
stay as they are (a tuple, so `isinstance(exc, (OSError, *errors.StorageError))`
rather than `|`).

On SQLite the classes are as broad as the ones they alias, on purpose (no
behaviour changes here): `Transient` is every `sqlite3.OperationalError`, which
also covers a full disk and SQL that names a missing table — callers treated all
of them as "keep it for a retry" before this module existed. A full disk has no
class of its own on SQLite (an `OperationalError` carrying SQLITE_FULL), so it is
a predicate, `is_full`, not a `StorageFull` class. On PostgreSQL the classes follow
the SQLSTATE: a lost connection, a serialization failure, a deadlock, a lock or
statement timeout, insufficient resources and a server going down are transient,
a constraint violation (class 23) is integrity, anything else (a syntax error, a
missing table) is only a `PgError`.
"""

from __future__ import annotations

import sqlite3


class PgError(Exception):
    """A PostgreSQL error, mapped from the driver's by db/pg.py; `sqlstate` is its
    SQLSTATE code when the server sent one. The driver's exception is the cause."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class PgTransient(PgError):
    """The same work may succeed later: connection lost, serialization failure,
    deadlock, lock or statement timeout, server shutting down, no resources."""


class PgFull(PgTransient):
    """The server found no room to write (SQLSTATE 53100 disk_full)."""


class PgIntegrity(PgError):
    """A constraint (UNIQUE, FOREIGN KEY, CHECK, NOT NULL) refused the write."""


# Any error the storage layer raises: `except StorageError` is "the database refused".
StorageError: tuple[type[Exception], ...] = (sqlite3.Error, PgError)
# Busy, locked, I/O, full: a later attempt of the same write may succeed.
Transient: tuple[type[Exception], ...] = (sqlite3.OperationalError, PgTransient)
# A constraint (UNIQUE, FOREIGN KEY, CHECK) refused the write: retrying it as is won't help.
IntegrityViolation: tuple[type[Exception], ...] = (sqlite3.IntegrityError, PgIntegrity)


def is_full(exc: BaseException) -> bool:
    """A write found no room: SQLITE_FULL as the primary result code, or PgFull.

    Masked to the low byte because the extended code is what sqlite3 reports; any
    exception that is not the storage layer's (an OSError's ENOSPC) is not this."""
    if isinstance(exc, PgFull):
        return True
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
