"""The receipt journal and the log in the attempt row (migration 0021, docs/storage.md):
a database at 0020 keeps every value through the fold, the supervisor's and retention's
queries read the same answers from the folded row, and a kill at any write of the
migration leaves the old schema or the new one, never a mix."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from qledge.db import journal, migrate, retention_queries
from qledge.db.sqlite import Database
from test_event_log import _copy, _migrate_in_child
from test_migrate import _legacy_db, _seed

FOLD = 21
OTHER_TABLES = ("tasks", "runs", "run_events", "cancel_leases", "node", "storage_settings")
# old column -> folded column
FROM_ARTIFACT = {"relative_path": "log_path", "size_bytes": "log_size_bytes",
                 "evicted_at_ms": "log_evicted_at_ms", "evicted_reason": "log_evicted_reason"}
FROM_JOURNAL = {"state": "receipt_state", "relative_path": "receipt_path",
                "reason_code": "receipt_reason", "created_at_ms": "receipt_created_at_ms",
                "updated_at_ms": "receipt_updated_at_ms",
                "retention_since_ms": "receipt_since_ms", "settled_at_ms": "receipt_settled_at_ms"}


def _at_0020(tmp_path: Path, runs: int = 40) -> Path:
    """A database at 0020 with every kind of row the fold has to carry over: attempts of
    every status, journal rows pending, quarantined, settled and aged out (gone), logs
    unsized, sized and evicted for each reason, one artifact no attempt names."""
    db = _legacy_db(tmp_path, upto=FOLD - 1)  # converted to 1 KiB pages: no VACUUM later
    _seed(db, runs=runs)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=ON")
    with conn:
        conn.execute("UPDATE receipt_journal SET settled_at_ms = 70 + created_at_ms,"
                     " retention_since_ms = 60 WHERE state = 'pending' AND attempt_id IN"
                     " (SELECT id FROM run_attempts WHERE status = 'succeeded')")
        conn.execute("DELETE FROM receipt_journal WHERE attempt_id IN"
                     " (SELECT id FROM run_attempts WHERE status = 'failed' LIMIT 3)")
        conn.execute("UPDATE log_artifacts SET evicted_at_ms = 90, evicted_reason = ?"
                     " WHERE id = 'l00004'", ("DISK_CRITICAL",))
        conn.execute("UPDATE log_artifacts SET evicted_at_ms = 91, evicted_reason = ?"
                     " WHERE id = 'l00008'", ("DISK_PRESSURE",))
        conn.execute("INSERT INTO log_artifacts (id, relative_path, created_at_ms)"
                     " VALUES ('l-orphan', 'ff/orphan.log', 5)")
        conn.execute("INSERT INTO log_artifacts (id, relative_path, created_at_ms,"
                     " evicted_at_ms, evicted_reason) VALUES ('l-gone', 'ff/gone.log', 5, 6,"
                     " 'SIZE_CAP')")
        conn.execute("INSERT INTO file_deletions (volume, relative_path, created_at_ms)"
                     " VALUES ('logs', 'aa/queued.log', 7)")
    conn.close()
    return db


def _rows(conn: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    conn.row_factory = sqlite3.Row
    try:
        return sorted((dict(r) for r in conn.execute(sql)), key=repr)
    finally:
        conn.row_factory = None


def _expected(db: Path) -> dict[str, list[dict[str, Any]]]:
    """What the database at 0020 should read as after the fold."""
    conn = sqlite3.connect(db)
    try:
        out = {t: _rows(conn, f"SELECT * FROM {t}") for t in OTHER_TABLES}
        arts = {r["id"]: r for r in _rows(conn, "SELECT * FROM log_artifacts")}
        jrows = {r["attempt_id"]: r for r in _rows(conn, "SELECT * FROM receipt_journal")}
        attempts = []
        for a in _rows(conn, "SELECT * FROM run_attempts"):
            art = arts[a.pop("log_artifact_id")]
            j = jrows.get(a["id"], {})
            a.update({new: art[old] for old, new in FROM_ARTIFACT.items()})
            a.update({new: j.get(old) for old, new in FROM_JOURNAL.items()})
            attempts.append(a)
        out["run_attempts"] = sorted(attempts, key=repr)
        out["file_deletions"] = _rows(conn, "SELECT * FROM file_deletions")
        return out
    finally:
        conn.close()


# Columns later migrations add (0023, fleet mode; 0024, the spawn's boot id): empty on
# every row carried over.
LATER_COLUMNS = ("node_epoch", "late_exit_code", "late_finished_at_ms",
                 "placement_node", "placement_labels_json", "spawn_boot_id",
                 "held_at_ms", "digest_id")  # 0028, the notifications' rate limit
# ... and those with a default (0026, the panel's hidden debug tasks).
LATER_DEFAULTS = {"hidden": 0, "notify_type": "info"}


def _actual(db: Path) -> dict[str, list[dict[str, Any]]]:
    conn = sqlite3.connect(db)
    try:
        found = {t: _rows(conn, f"SELECT * FROM {t}")
                 for t in (*OTHER_TABLES, "run_attempts", "file_deletions")}
    finally:
        conn.close()
    for rows in found.values():
        for row in rows:
            for col in LATER_COLUMNS:
                assert row.pop(col, None) is None, (col, row)
            for col, default in LATER_DEFAULTS.items():
                assert row.pop(col, default) == default, (col, row)
    return found


async def test_a_database_at_0020_keeps_every_value(tmp_path: Path) -> None:
    db = _at_0020(tmp_path)
    want = _expected(db)
    # the seed covers what the fold must carry (and nothing is trivially empty)
    att = want["run_attempts"]
    assert {a["receipt_state"] for a in att} == {"pending", "quarantined", None}
    assert any(a["receipt_settled_at_ms"] is not None for a in att)
    assert {a["log_evicted_reason"] for a in att} >= {
        None, "SIZE_CAP", "DISK_PRESSURE", "DISK_CRITICAL"}
    assert any(a["log_size_bytes"] is None for a in att)
    assert any(a["log_size_bytes"] for a in att)
    assert want["cancel_leases"] and want["run_events"]
    # the artifact no attempt named: its file is queued for deletion like retention would
    want["file_deletions"] = sorted(
        [*want["file_deletions"],
         {"volume": "logs", "relative_path": "ff/orphan.log", "created_at_ms": 5}], key=repr)

    # 0022 drops attempts_active after it; later ones follow
    assert migrate.apply(db) == [m.version for m in migrate.bundled()][FOLD - 1:]
    assert _actual(db) == want

    conn = sqlite3.connect(db)
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert not {"receipt_journal", "log_artifacts", "run_attempts_new"} & tables
    schema = dict(conn.execute("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL"))
    assert "STRICT" in schema["run_attempts"] and "WITHOUT ROWID" not in schema["run_attempts"]
    indexes = {n for (n,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'run_attempts'")}
    assert indexes == {"attempts_journal", "sqlite_autoindex_run_attempts_1",
                       "sqlite_autoindex_run_attempts_2"}
    # the partial index holds exactly the attempts with a journal entry
    in_index = conn.execute("SELECT COUNT(*) FROM run_attempts INDEXED BY attempts_journal"
                            " WHERE receipt_state IS NOT NULL").fetchone()[0]
    assert in_index == sum(a["receipt_state"] is not None for a in att)
    fks = {(t, r[2], r[3], r[4], r[6]) for t in ("run_attempts", "cancel_leases")
           for r in conn.execute(f"PRAGMA foreign_key_list({t})")}
    assert fks == {("run_attempts", "runs", "run_id", "id", "CASCADE"),
                   ("cancel_leases", "run_attempts", "attempt_id", "id", "CASCADE")}
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    conn.execute("PRAGMA foreign_keys=ON")
    for bad in ("receipt_state = 'x'", "log_evicted_reason = 'x'",
                "receipt_path = NULL",  # an entry without its receipt's path
                "log_size_bytes = 'big'",  # STRICT
                "log_path = NULL"):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(f"UPDATE run_attempts SET {bad} WHERE id = 'a00000'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # no entry: nothing left over
        conn.execute("UPDATE run_attempts SET receipt_state = NULL WHERE id = 'a00000'")
    # deleting a run still cascades to its attempts (their logs and entries) and leases
    conn.execute("DELETE FROM runs WHERE id = 'r00002'")
    assert conn.execute("SELECT COUNT(*) FROM run_attempts WHERE run_id = 'r00002'"
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM cancel_leases WHERE attempt_id = 'a00002'"
                        ).fetchone()[0] == 0
    conn.rollback()
    conn.close()

    # What the supervisor, retention and the log API read from the folded rows.
    database = Database(db)
    await database.open()
    try:
        async with database.read() as tx:
            page = await journal.journal_page(tx, "", 1000)
            counts = await journal.journal_counts(tx)
            evicted = await retention_queries.log_eviction(tx, "04/a00004.log")
            totals = await retention_queries.log_totals(tx)
        unsettled = [a for a in att if a["receipt_state"] is not None
                     and a["receipt_settled_at_ms"] is None]
        assert [(r.attempt_id, r.state, r.relative_path, r.reason_code, r.retention_since_ms,
                 r.attempt_status.value) for r in page] == sorted(
            (a["id"], a["receipt_state"], a["receipt_path"], a["receipt_reason"],
             a["receipt_since_ms"], a["status"]) for a in unsettled)
        assert counts["settled"] == sum(a["receipt_settled_at_ms"] is not None for a in att)
        assert counts["quarantined"] == sum(a["receipt_state"] == "quarantined" for a in att)
        assert evicted == ("DISK_CRITICAL", 90)
        live = [a for a in att if a["log_evicted_at_ms"] is None]
        assert totals.live == len(live)
        assert totals.sized_bytes == sum(a["log_size_bytes"] or 0 for a in live)
        # ageing an entry out clears its columns and keeps the attempt
        settled = [a["id"] for a in att if a["receipt_settled_at_ms"] is not None]
        async with database.write() as tx:
            assert await journal.journal_age_out(tx, 10**6, 4000) == len(settled)
        async with database.read() as tx:
            row = await tx.one("SELECT status, log_path, receipt_state, receipt_path,"
                               " receipt_settled_at_ms FROM run_attempts WHERE id = ?",
                               (settled[0],))
            assert row is not None and tuple(row)[2:] == (None, None, None)
            assert row["log_path"] is not None
            assert (await journal.journal_counts(tx))["settled"] == 0
    finally:
        await database.close()


def _state(db: Path) -> str:
    """'old' or 'new' — and the schema, the record of applied migrations and the data
    agree on it (a mix fails here)."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_schema"
                                             " WHERE type = 'table'")}
        cols = {r[1] for r in conn.execute("PRAGMA table_info(run_attempts)")}
        applied = conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?",
                               (FOLD,)).fetchone() is not None
        assert "run_attempts_new" not in tables
        old = ({"receipt_journal", "log_artifacts"} <= tables and "log_artifact_id" in cols
               and "receipt_state" not in cols and not applied)
        new = (not {"receipt_journal", "log_artifacts"} & tables
               and "log_artifact_id" not in cols and {"receipt_state", "log_path"} <= cols
               and applied and conn.execute("SELECT 1 FROM sqlite_schema WHERE name ="
                                            " 'attempts_journal'").fetchone() is not None)
        assert old != new, (tables, cols, applied)
        return "old" if old else "new"
    finally:
        conn.close()


@pytest.mark.slow
def test_a_kill_at_any_write_of_the_migration_leaves_old_or_new(tmp_path: Path) -> None:
    db = _at_0020(tmp_path, runs=12)
    want = _expected(db)
    writes = _migrate_in_child(_copy(db, tmp_path / "full.db"))
    assert writes >= 2
    assert _state(tmp_path / "full.db") == "new"
    full = _actual(tmp_path / "full.db")
    assert full["run_attempts"] == want["run_attempts"]
    seen = set()
    for k in range(1, writes + 1):
        copy = _copy(db, tmp_path / f"k{k}.db")
        _migrate_in_child(copy, kill_at=k)
        state = _state(copy)  # never a mix
        seen.add(state)
        if state == "old":
            assert _expected(copy) == want, k  # the old tables, every row as it was
        else:
            assert _actual(copy) == full, k
        migrate.apply(copy)  # the next start finishes it
        assert _state(copy) == "new"
        assert _actual(copy) == full, k
    # a kill before the commit frame keeps the old schema; after it, the new one
    assert seen == {"old", "new"}, (writes, seen)
