"""db/dialect.py: the fragments each backend gets, and that SQLite's are today's text."""

from __future__ import annotations

import sqlite3

from qledge.db import dialect, events, pg
from qledge.db.rows import like_pattern
from qledge.db.sqlite import Tx


def test_each_transaction_says_its_dialect() -> None:
    assert Tx.dialect == dialect.SQLITE
    assert pg.Tx.dialect == dialect.POSTGRESQL


def test_sqlite_keeps_its_spellings_verbatim() -> None:
    assert dialect.append_blob("sqlite", "event_log") == (
        "CAST(COALESCE(event_log, x'') || ? AS BLOB)")
    assert events.APPEND_SET["sqlite"] == (
        "event_base = COALESCE(event_base, event_seq),"
        " event_log = CAST(COALESCE(event_log, x'') || ? AS BLOB)")
    assert dialect.each_text("sqlite") == "json_each(?)"
    assert dialect.each_text("sqlite", "?", "j") == "json_each(?) j"
    assert dialect.each_text("sqlite", "extra_schedules_json") == (
        "json_each(extra_schedules_json)")
    assert dialect.like("sqlite", "d.name", "?") == "d.name LIKE ? ESCAPE '\\'"
    assert dialect.in_list("sqlite", "id", 1) == "id IN (?)"
    assert dialect.in_list("sqlite", "a.run_id", 3) == "a.run_id IN (?, ?, ?)"
    assert dialect.in_params("sqlite", ("a", "b")) == ["a", "b"]
    assert dialect.ordered_join("sqlite") == "CROSS JOIN"
    assert dialect.derived("sqlite", "head") == ""


def test_postgresql_spellings() -> None:
    assert dialect.append_blob("postgresql", "event_log") == (
        "COALESCE(event_log, '\\x'::bytea) || ?")
    assert dialect.each_text("postgresql") == (
        "json_array_elements_text(?::json) AS each(value)")
    assert dialect.each_text("postgresql", "?", "j") == (
        "json_array_elements_text(?::json) AS j(value)")
    assert dialect.like("postgresql", "name", ":q") == "name ILIKE :q ESCAPE '\\'"
    # One array parameter whatever the list's length: one prepared statement.
    assert dialect.in_list("postgresql", "id", 1) == "id = ANY(?)"
    assert dialect.in_list("postgresql", "a.run_id", 3) == "a.run_id = ANY(?)"
    assert dialect.in_params("postgresql", ("a", "b")) == [["a", "b"]]
    assert dialect.ordered_join("postgresql") == "JOIN"
    assert dialect.derived("postgresql", "head") == " AS head"
    sql = f"UPDATE envs SET name = ? WHERE {dialect.in_list('postgresql', 'id', 2)} AND x = ?"
    assert pg.translate(sql)[0] == "UPDATE envs SET name = $1 WHERE id = ANY($2) AND x = $3"
    # The translated text asyncpg gets: `?` and `:q` become $1, `::json` stays a cast.
    assert pg.translate(f"SELECT value FROM {dialect.each_text('postgresql')}")[0] == (
        "SELECT value FROM json_array_elements_text($1::json) AS each(value)")
    assert pg.translate(dialect.like("postgresql", "name", ":q")) == (
        "name ILIKE $1 ESCAPE '\\'", ("q",))


def test_sqlite_fragments_mean_what_the_helpers_say() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        blob = conn.execute(f"SELECT {dialect.append_blob('sqlite', 'NULL')}",
                            (b"\x00\xff",)).fetchone()[0]
        assert blob == b"\x00\xff" and isinstance(blob, bytes)
        values = [r[0] for r in conn.execute(
            f"SELECT value FROM {dialect.each_text('sqlite', '?', 'j')} ORDER BY j.value",
            ('["b", "a"]',))]
        assert values == ["a", "b"]
        like = f"SELECT {dialect.like('sqlite', '?', '?')}"
        assert conn.execute(like, ("Nightly BACKUP", like_pattern("backup"))).fetchone()[0] == 1
        assert conn.execute(like, ("100%", like_pattern("0%"))).fetchone()[0] == 1
        assert conn.execute(like, ("1000", like_pattern("0%"))).fetchone()[0] == 0
        assert conn.execute(like, ("a_b", like_pattern("_"))).fetchone()[0] == 1
        assert conn.execute(like, ("ab", like_pattern("_"))).fetchone()[0] == 0
        ids = ["b", "c", "x"]
        found = [r[0] for r in conn.execute(
            "SELECT column1 FROM (VALUES ('a'), ('b'), ('c'))"
            f" WHERE {dialect.in_list('sqlite', 'column1', len(ids))} ORDER BY 1",
            dialect.in_params("sqlite", ids))]
        assert found == ["b", "c"]
    finally:
        conn.close()
