"""Read-only SQL on a QingLong database (the import's source, never qledge's own).

Opened through SQLite's `file:…?mode=ro&immutable=1` URI: no lock, no journal and
no WAL file is created beside it, so a read-only mount works and nothing in the
source changes. A quick integrity check runs first; a damaged file is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

MAX_ROWS = 20_000  # per table
REQUIRED = ("Crontabs", "Envs")
TABLES = ("Crontabs", "Envs", "Subscriptions", "Dependences", "Apps", "Auths")


class Unreadable(Exception):
    """The database cannot be read; the message says why (never a value from it)."""


def read(file: Path) -> dict[str, list[dict[str, Any]]]:
    """{table: rows (dicts, by id)} of the tables an import reads; absent ones are []."""
    wal = file.with_name(file.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        # immutable=1 would read the file alone and miss what the log holds
        raise Unreadable(f"{wal} is not empty: QingLong is running or did not stop cleanly."
                         " Stop QingLong (it folds the log into the database), then import")
    uri = f"file:{file.as_posix()}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise Unreadable(f"{file} cannot be opened ({exc})") from None
    try:
        conn.row_factory = sqlite3.Row
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise Unreadable(f"{file} is damaged (SQLite integrity check: {str(check)[:200]})")
        present = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in REQUIRED:
            if table not in present:
                raise Unreadable(f"{file} has no {table} table: not a QingLong 2.12+ database")
        out: dict[str, list[dict[str, Any]]] = {}
        for table in TABLES:
            if table not in present:
                out[table] = []
                continue
            rows = conn.execute(f'SELECT * FROM "{table}" ORDER BY id LIMIT ?',  # noqa: S608
                                (MAX_ROWS + 1,)).fetchall()
            if len(rows) > MAX_ROWS:
                raise Unreadable(f"{file}: {table} has more than {MAX_ROWS} rows")
            out[table] = [dict(r) for r in rows]
        return out
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{file} is not a readable SQLite database ({exc}): the file is"
                         " damaged or not QingLong's") from None
    finally:
        conn.close()
