"""tests/support.py: the session's migrated template database and eventually()."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qledge.db import migrate

from support import eventually, migrated_template


def _schema(db: Path) -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                            " ORDER BY type, name").fetchall()
        rows.append(("user_version", str(conn.execute("PRAGMA user_version").fetchone()[0]),
                     "", None))
        rows.append(("page_size", str(conn.execute("PRAGMA page_size").fetchone()[0]), "", None))
        rows.append(("auto_vacuum", str(conn.execute("PRAGMA auto_vacuum").fetchone()[0]),
                     "", None))
    return rows


def test_the_template_schema_equals_a_freshly_migrated_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    assert migrate.apply(fresh), "a new database had no migration to apply"
    assert _schema(migrated_template()) == _schema(fresh)
    assert any(kind == "table" for kind, *_ in _schema(fresh))


def test_eventually_returns_the_first_truthy_value() -> None:
    calls = iter([0, None, "", "done"])
    assert eventually(lambda: next(calls), timeout=5, interval=0) == "done"


def test_eventually_fails_naming_what_was_awaited() -> None:
    with pytest.raises(AssertionError, match="waiting for the moon"):
        eventually(lambda: False, timeout=0.05, interval=0.01, what="the moon")
