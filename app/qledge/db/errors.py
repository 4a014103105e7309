"""The storage layer's errors, named by what a caller does about them.

Modules outside `db/` decide on storage failures — retry a receipt batch, answer
507, relieve disk pressure, exit 2 — and used to import `sqlite3` to do it, so a
second backend's exceptions would slip past them (docs/fleet-plan.md, "SQL
outside app/qledge/db/"). They import this module instead.

Design: the names below are the SQLite backend's own classes, aliased, not new
classes wrapping them. Nothing re-raises, so every raise site, traceback and
`type(exc).__name__` in a log line stays exactly as it was. A second backend
makes these real classes and maps its driver's exceptions into them at the `db/`
boundary; the callers' `except` clauses and predicates stay as they are.

On SQLite the classes are as broad as the ones they alias, on purpose (no
behaviour changes here): `Transient` is every `sqlite3.OperationalError`, which
also covers a full disk and SQL that names a missing table — callers treated all
of them as "keep it for a retry" before this module existed. A full disk has no
class of its own on SQLite (an `OperationalError` carrying SQLITE_FULL), so it is
a predicate, `is_full`, not a `StorageFull` class.
"""

from __future__ import annotations

import sqlite3

# Any error the storage layer raises: `except ERRORS` is "the database refused".
StorageError = sqlite3.Error
# Busy, locked, I/O, full: a later attempt of the same write may succeed.
Transient = sqlite3.OperationalError
# A constraint (UNIQUE, FOREIGN KEY, CHECK) refused the write: retrying it as is won't help.
IntegrityViolation = sqlite3.IntegrityError

ERRORS: tuple[type[StorageError], ...] = (StorageError,)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, Transient)


def is_integrity(exc: BaseException) -> bool:
    return isinstance(exc, IntegrityViolation)


def is_full(exc: BaseException) -> bool:
    """A write found no room: SQLITE_FULL as the primary result code.

    Masked to the low byte because the extended code is what sqlite3 reports; any
    exception that is not the storage layer's (an OSError's ENOSPC) is not this."""
    if not isinstance(exc, StorageError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
