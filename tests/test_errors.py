"""db/errors.py: the storage errors' classification, on errors a real SQLite database raises."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from qledge.db import errors
from qledge.http.errors import disk_full


def _connect(path: Path) -> sqlite3.Connection:
    # timeout=0: no busy handler, a lock held elsewhere fails at once
    return sqlite3.connect(path, timeout=0, isolation_level=None)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = _connect(tmp_path / "t.sqlite3")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    yield conn
    conn.close()


def _raised(conn: sqlite3.Connection, sql: str, *args: object) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as info:
        conn.execute(sql, args)
    return info.value


def _classes(exc: BaseException) -> set[str]:
    found = {name for name, classes in (("transient", errors.Transient),
                                        ("integrity", errors.IntegrityViolation),
                                        ("storage", errors.StorageError))
             if isinstance(exc, classes)}
    if errors.is_full(exc):
        found.add("full")
    return found


def test_a_unique_violation_is_integrity(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO t (k) VALUES (1)")
    exc = _raised(db, "INSERT INTO t (k) VALUES (1)")
    assert "UNIQUE" in str(exc)
    assert _classes(exc) == {"storage", "integrity"}
    assert isinstance(exc, errors.IntegrityViolation)
    assert not disk_full(exc)


def test_a_lock_held_elsewhere_is_transient(tmp_path: Path, db: sqlite3.Connection) -> None:
    db.execute("BEGIN EXCLUSIVE")
    other = _connect(tmp_path / "t.sqlite3")
    try:
        exc = _raised(other, "INSERT INTO t (k) VALUES (2)")
    finally:
        other.close()
        db.execute("ROLLBACK")
    assert "locked" in str(exc)
    assert exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    assert _classes(exc) == {"storage", "transient"}
    assert not disk_full(exc)


def test_no_room_left_is_full_and_transient(db: sqlite3.Connection) -> None:
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(sqlite3.Error) as info:
        for k in range(100):
            db.execute("INSERT INTO t (k, v) VALUES (?, zeroblob(4096))", (k,))
    exc = info.value
    assert exc.sqlite_errorcode == sqlite3.SQLITE_FULL
    # SQLite reports a full disk as an OperationalError: a retry after space was
    # freed may succeed, so it is transient as well as full (unchanged behaviour)
    assert _classes(exc) == {"storage", "transient", "full"}
    assert disk_full(exc)  # the HTTP layer's 507


def test_other_exceptions_are_not_storage_errors() -> None:
    for exc in (OSError(errno.ENOSPC, "No space left on device"), ValueError("full"),
                RuntimeError("database is locked")):
        assert _classes(exc) == set(), exc
    # a file write that found no room is still the HTTP layer's full disk, not storage's
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"))
