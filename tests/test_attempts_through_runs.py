"""Active attempts found through their running runs (migration 0022, docs/storage.md):
the index of active attempts is dropped in one statement (a kill at any write leaves it
or its absence, recorded as such), the pages and counts read the same attempts as a walk
of every row would, and an older version's orphans — an active attempt under a terminal
or a queued run, which that path does not reach — are found by the start-up's walk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qledge.db import attempts, leases, migrate, retention_queries
from qledge.db.sqlite import Database
from test_event_log import _copy, _migrate_in_child
from test_journal import _at_0020, _rows
from test_migrate import _copy_migrations

DROP = 22
ACTIVE = "status IN ('preparing', 'running')"


def _at_0021(tmp_path: Path, runs: int = 40) -> Path:
    """_seed's rows at 0021, plus an older version's orphans: this node's preparing and
    running attempt (cancel intent committed) under cancelled runs, one of another
    node, and a preparing attempt under a queued run."""
    db = _at_0020(tmp_path, runs=runs)
    assert migrate.apply(db, _copy_migrations(tmp_path / "m-21", upto=DROP - 1)) == [21]
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=ON")
    with conn:
        for n, (status, owner) in enumerate((("preparing", "n1"), ("running", "n1"),
                                             ("running", "n2"), ("preparing", "n1"))):
            run, att = f"rz{n}", f"az{n}"
            conn.execute(
                "INSERT INTO runs (id, task_id, trigger, status, version, event_seq,"
                " cancel_reason, cancel_requested_at_ms, created_at_ms, finished_at_ms,"
                " reason_code) VALUES (?, 't1', 'api', 'cancelled', 1, 0, 'user', 5, 5, 6,"
                " 'CANCELLED_BEFORE_START')", (run,))
            if n == 3:
                conn.execute("UPDATE runs SET status = 'queued', cancel_reason = NULL,"
                             " cancel_requested_at_ms = NULL, finished_at_ms = NULL,"
                             " reason_code = NULL WHERE id = ?", (run,))
            conn.execute(
                "INSERT INTO run_attempts (id, run_id, attempt_no, executor_type,"
                " runtime_owner, status, callback_token_hash, callback_sequence, created_at_ms,"
                " deadline_at_ms, log_path) VALUES (?, ?, 1, 'local_process', ?, ?, ?, 1, 5,"
                " 7, ?)", (att, run, owner, status, b"x" * 32, f"zz/{att}.log"))
    conn.close()
    return db


def _indexes(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type ="
                                           " 'index' AND tbl_name = 'run_attempts'")}
    finally:
        conn.close()


def _dump(db: Path) -> dict[str, list[dict[str, object]]]:
    conn = sqlite3.connect(db)
    try:
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type ="
                                             " 'table' AND name != 'schema_migrations'")]
        found = {t: _rows(conn, f"SELECT * FROM {t}") for t in tables}
    finally:
        conn.close()
    for rows in found.values():  # later migrations (0023, 0024): empty when carried
        for row in rows:
            for col in LATER_COLUMNS:
                assert row.pop(col, None) is None, (col, row)
            for col, default in LATER_DEFAULTS.items():
                assert row.pop(col, default) == default, (col, row)
    # Tables later migrations add (0025, the panel's sign-in) start empty.
    return {t: rows for t, rows in found.items() if t not in LATER_TABLES or rows}


LATER_COLUMNS = ("node_epoch", "late_exit_code", "late_finished_at_ms",
                 "placement_node", "placement_labels_json", "spawn_boot_id",
                 "held_at_ms", "digest_id")  # 0028, the notifications' rate limit
LATER_DEFAULTS = {"hidden": 0, "notify_type": "info"}  # 0026, the panel's hidden debug tasks
LATER_TABLES = {"panel_account", "panel_sessions", "panel_logins", "notify_settings"}


def test_the_drop_keeps_every_row_and_only_the_index_goes(tmp_path: Path) -> None:
    db = _at_0021(tmp_path)
    before = _dump(db)
    assert "attempts_active" in _indexes(db)
    upto = _copy_migrations(tmp_path / "m-22", upto=DROP)
    assert migrate.apply(db, upto) == [DROP]
    assert _dump(db) == before
    assert _indexes(db) == {"attempts_journal", "sqlite_autoindex_run_attempts_1",
                            "sqlite_autoindex_run_attempts_2"}
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert migrate.apply(db, upto) == []


def _state(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        applied = conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?",
                               (DROP,)).fetchone() is not None
    finally:
        conn.close()
    present = "attempts_active" in _indexes(db)
    assert present != applied, (present, applied)  # never a mix
    return "new" if applied else "old"


@pytest.mark.slow
def test_a_kill_at_any_write_of_the_drop_leaves_old_or_new(tmp_path: Path) -> None:
    db = _at_0021(tmp_path, runs=12)
    before = _dump(db)
    writes = _migrate_in_child(_copy(db, tmp_path / "full.db"))
    assert writes >= 2
    assert _state(tmp_path / "full.db") == "new"
    seen = set()
    for k in range(1, writes + 1):
        copy = _copy(db, tmp_path / f"k{k}.db")
        _migrate_in_child(copy, kill_at=k)
        seen.add(_state(copy))
        assert _dump(copy) == before, k
        migrate.apply(copy)  # the next start finishes it
        assert _state(copy) == "new"
        assert _dump(copy) == before, k
    assert seen == {"old", "new"}, (writes, seen)


async def test_the_pages_read_what_a_walk_of_every_row_reads(tmp_path: Path) -> None:
    db = _at_0021(tmp_path)
    migrate.apply(db)
    conn = sqlite3.connect(db)
    # the reference: every row walked, no index, with the run's status beside it
    walk = conn.execute(
        f"SELECT a.id, a.status, a.deadline_at_ms, a.receipt_state, r.status, r.cancel_reason,"
        f" a.log_path FROM run_attempts a NOT INDEXED JOIN runs r ON r.id = a.run_id"
        f" WHERE a.runtime_owner = 'n1' AND a.{ACTIVE} ORDER BY a.id").fetchall()
    conn.close()
    live = [w for w in walk if w[4] == "running"]
    orphans = [w for w in walk if w[4] != "running"]
    assert len(live) >= 8 and [w[0] for w in orphans] == ["az0", "az1", "az3"]
    database = Database(db)
    await database.open()
    try:
        async with database.read() as tx:
            page = await attempts.active_attempts_page(tx, "n1", "", 1000)
            assert [a.id for a in page] == [w[0] for w in live]
            paged, cursor = [], ""
            while got := await attempts.active_attempts_page(tx, "n1", cursor, 3):
                paged += [a.id for a in got]
                cursor = got[-1].id
            assert paged == [w[0] for w in live]
            assert await attempts.count_active_attempts(tx, "n1") == len(live)
            assert await attempts.count_active_attempts(tx, "n2") == 0
            expired = await attempts.expired_attempts(tx, "n1", 10**9, 1000)
            assert sorted(a.id for a in expired) == sorted(
                w[0] for w in live if w[1] == "running" and w[2] is not None)
            assert [a.id for a in await attempts.attempts_without_journal(tx, "n1", 1000)] \
                == [w[0] for w in live if w[3] is None]
            assert [a.id for a in await leases.cancelling_attempts(tx, "n1", 1000)] == [
                w[0] for w in live if w[1] == "running" and w[5] is not None]
            assert sorted(await retention_queries.active_logs(tx, 1000)) == sorted(
                w[6] for w in live)
            # the orphans: the start-up's scan, paged, and the start-up sweep's
            assert [a.id for a in await attempts.orphan_attempts(tx, "n1", "", 1000)] == [
                "az0", "az1", "az3"]
            assert [a.id for a in await attempts.orphan_attempts(tx, "n1", "az0", 1)] == [
                "az1"]
            assert await attempts.orphan_attempts(tx, "n2", "", 1000) != []
            assert [a.id for a in await leases.cancelling_orphans(tx, "n1", 1000)] == ["az1"]
    finally:
        await database.close()
