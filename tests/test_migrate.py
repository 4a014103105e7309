from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from qledge import ids
from qledge.db import migrate, upkeep
from qledge.launch import logs

from support import killed_mid_vacuum


def _copy_migrations(dst: Path, upto: int | None = None) -> list[migrate.Migration]:
    dst.mkdir()
    migs = migrate.bundled()
    for m in migs[:upto]:
        (dst / f"{m.version:04d}_{m.name}.sql").write_text(m.sql)
    return migrate.bundled(dst)


def test_fresh_database_gets_every_migration(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    done = migrate.apply(db)
    assert done == [m.version for m in migrate.bundled()]
    assert migrate.apply(db) == []
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"tasks", "runs", "run_attempts", "run_events", "node"} <= tables
    assert not {"log_artifacts", "receipt_journal"} & tables  # folded into attempts (0021)
    cols = {r[1] for r in conn.execute("PRAGMA table_info(run_attempts)")}
    assert {"deadline_at_ms", "log_path", "receipt_state"} <= cols
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for suffix in ("", "-wal", "-shm"):  # private, like every file of the data volume
        assert (tmp_path / f"q.db{suffix}").stat().st_mode & 0o777 == 0o600, suffix


def test_upgrade_from_baseline_keeps_data(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    baseline = _copy_migrations(tmp_path / "m", upto=1)
    assert migrate.apply(db, baseline) == [1]
    conn = sqlite3.connect(db)
    conn.executescript("""
        PRAGMA foreign_keys=ON;
        INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)
          VALUES ('t1', 'old task', 'echo hi', 1, 1);
        INSERT INTO runs (id, task_id, trigger, status, created_at_ms)
          VALUES ('r1', 't1', 'manual', 'running', 2);
        INSERT INTO log_artifacts (id, relative_path, created_at_ms) VALUES ('l1', 'aa/x.log', 2);
        INSERT INTO run_attempts (id, run_id, attempt_no, executor_type, runtime_owner, status,
          callback_token_hash, callback_sequence, log_artifact_id, created_at_ms, pid)
          VALUES ('a1', 'r1', 1, 'local_process', 'n1', 'running', x'00', 1, 'l1', 3, 42);
    """)
    conn.commit()
    conn.close()

    assert migrate.apply(db) == [m.version for m in migrate.bundled()[1:]]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT name, command FROM tasks").fetchall() == [("old task", "echo hi")]
    row = conn.execute("SELECT status, pid, deadline_at_ms, log_path, receipt_state"
                       " FROM run_attempts").fetchone()
    assert row == ("running", 42, None, "aa/x.log", None)  # the reconciler registers it


def test_tampered_applied_migration_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    migs = _copy_migrations(tmp_path / "m")
    migrate.apply(db, migs)
    baseline = tmp_path / "m" / f"0001_{migs[0].name}.sql"
    baseline.write_text(baseline.read_text() + "\n-- edited after release\n")
    with pytest.raises(migrate.MigrationError, match="0001_baseline has changed"):
        migrate.apply(db, migrate.bundled(tmp_path / "m"))


def test_database_newer_than_code_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    migrate.apply(db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'abc', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(migrate.MigrationError, match="newer than the code"):
        migrate.apply(db)


def test_failed_migration_leaves_nothing(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    migs = _copy_migrations(tmp_path / "m")
    (tmp_path / "m" / f"{len(migs) + 1:04d}_broken.sql").write_text(
        "CREATE TABLE half (x INTEGER);\nINSERT INTO nowhere VALUES (1);\n")
    with pytest.raises(migrate.MigrationError, match="broken failed"):
        migrate.apply(db, migrate.bundled(tmp_path / "m"))
    conn = sqlite3.connect(db)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half" not in names
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == len(migs)


# -- 0007: 1 KiB pages and the slim schema ------------------------------------------

RUN_TABLES = ("tasks", "runs", "log_artifacts", "run_attempts", "receipt_journal", "run_events",
              "cancel_leases")


def _legacy_file(db: Path) -> None:
    """An empty database as an older qledge created it: 4 KiB pages, no auto-vacuum."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL")  # writes page 1: the page size is fixed now
    conn.close()


def _legacy_db(tmp_path: Path, name: str = "q.db", upto: int = 6) -> Path:
    db = tmp_path / name
    _legacy_file(db)
    migrate.apply(db, _copy_migrations(tmp_path / f"m-{name}", upto=upto))
    return db


def _seed(db: Path, runs: int = 3) -> None:
    """Rows in every run table, terminal and active, with NULLs, blobs and quarantine."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=ON")
    sizes = "size_bytes" in {r[1] for r in conn.execute("PRAGMA table_info(log_artifacts)")}
    conn.execute("INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)"
                 " VALUES ('t1', 'task', 'true', 1, 1)")
    statuses = ["succeeded", "failed", "running", "queued"]
    for i in range(runs):
        run, status = f"r{i:05d}", statuses[i % len(statuses)]
        conn.execute(
            "INSERT INTO runs (id, task_id, trigger, status, version, event_seq, cancel_reason,"
            " cancel_requested_at_ms, created_at_ms, started_at_ms, finished_at_ms, exit_code,"
            " reason_code) VALUES (?, 't1', 'api', ?, ?, 2, ?, ?, ?, ?, ?, ?, ?)",
            (run, status, i + 1, "user" if i % 2 else None, i if i % 2 else None, 10 + i,
             11 + i, 12 + i if status in ("succeeded", "failed") else None, i % 3,
             "EXITED" if status == "succeeded" else None))
        for seq in (1, 2):
            conn.execute("INSERT INTO run_events (run_id, seq, type, at_ms, attempt_id, data_json)"
                         " VALUES (?, ?, ?, ?, ?, ?)",
                         (run, seq, f"ev{seq}", 20 + i, f"a{i:05d}" if seq == 2 else None,
                          f'{{"n":{i}}}'))
        if status == "queued":
            continue
        attempt_status = "running" if status == "running" else status
        conn.execute("INSERT INTO log_artifacts (id, relative_path, created_at_ms)"
                     " VALUES (?, ?, ?)", (f"l{i:05d}", f"{i % 100:02d}/a{i:05d}.log", 30 + i))
        if sizes:
            conn.execute("UPDATE log_artifacts SET size_bytes = ?, evicted_at_ms = ?,"
                         " evicted_reason = ? WHERE id = ?",
                         (100 * i if attempt_status != "running" else None,
                          40 + i if i % 5 == 1 else None, "SIZE_CAP" if i % 5 == 1 else None,
                          f"l{i:05d}"))
        conn.execute(
            "INSERT INTO run_attempts (id, run_id, attempt_no, executor_type, runtime_owner,"
            " status, callback_token_hash, callback_sequence, log_artifact_id, pid,"
            " proc_start_time, boot_id, exit_code, reason_code, created_at_ms, started_at_ms,"
            " finished_at_ms, deadline_at_ms) VALUES (?, ?, 1, 'local_process', 'n1', ?, ?, 3,"
            " ?, ?, ?, 'boot', ?, ?, ?, ?, ?, ?)",
            (f"a{i:05d}", run, attempt_status, bytes([i % 256]) * 32, f"l{i:05d}", 1000 + i,
             5000 + i, i % 3, "EXITED" if attempt_status == "succeeded" else None, 30 + i,
             31 + i, 32 + i if attempt_status != "running" else None,
             99 + i if i % 2 else None))
        conn.execute(
            "INSERT INTO receipt_journal (attempt_id, state, relative_path, reason_code,"
            " created_at_ms, updated_at_ms, retention_since_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (f"a{i:05d}", "quarantined" if i % 4 == 1 else "pending", f"{i % 100:02d}/a.json",
             "BAD" if i % 4 == 1 else None, 50 + i, 51 + i, 52 + i if i % 4 == 1 else None))
        if status == "running":
            conn.execute("INSERT INTO cancel_leases (attempt_id, holder, epoch, expires_at_ms,"
                         " term_sent_at_ms) VALUES (?, 'h', 2, 60, 61)", (f"a{i:05d}",))
    conn.commit()
    conn.close()


# Migrations after the slim schema (0007) apply too when these tests upgrade.
AFTER_7 = [m.version for m in migrate.bundled() if m.version > 7]
# 0021 folds log_artifacts and receipt_journal into run_attempts: the tests of earlier
# migrations that compare those tables row by row stop before it (tests/test_journal.py
# upgrades such databases through 0021).
FOLD = 21
BEFORE_FOLD = [v for v in AFTER_7 if v < FOLD]


def _before_fold(tmp_path: Path) -> list[migrate.Migration]:
    return _copy_migrations(tmp_path / "m-before-fold", upto=FOLD - 1)
LATER_COLUMNS = {"run_attempts": ("log_bytes_at_exit",),
                 "runs": ("not_before_ms", "parent_run_id", "conc_index", "event_log",
                          "event_base")}


def _snapshot(db: Path) -> dict[str, list[dict[str, object]]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        out: dict[str, list[dict[str, object]]] = {}
        for table in RUN_TABLES:
            rows = [dict(r) for r in conn.execute(f"SELECT * FROM {table}").fetchall()]
            for row in rows:
                # Columns of later migrations (0008+) are NULL for rows from before them.
                for col in LATER_COLUMNS.get(table, ()):
                    assert row.pop(col, None) is None, (table, col)
            out[table] = sorted(rows, key=repr)
        return out
    finally:
        conn.close()


def _columns_of(before: dict[str, list[dict[str, object]]],
                after: dict[str, list[dict[str, object]]]) -> dict[str, list[dict[str, object]]]:
    """`after` with only the columns `before` had (later migrations add some)."""
    return {t: [{k: r[k] for k in rows[0]} for r in after[t]] if rows else after[t]
            for t, rows in before.items()}


def _schema(conn: sqlite3.Connection) -> dict[str, str]:
    return {name: sql for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL")}


def test_slim_schema_keeps_every_row_and_every_constraint(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path)
    _seed(db, runs=40)
    before = _snapshot(db)
    assert sum(len(rows) for rows in before.values()) > 150

    assert migrate.apply(db, _copy_migrations(tmp_path / "m-7", upto=7)) == [7]
    assert _snapshot(db) == before
    conn = sqlite3.connect(db)
    schema = _schema(conn)
    for table in ("runs", "log_artifacts", "receipt_journal"):
        assert "WITHOUT ROWID" in schema[table] and "STRICT" in schema[table], table
    assert "WITHOUT ROWID" not in schema["run_attempts"]  # its rows would overflow 1 KiB pages
    indexes = {n for (n,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN"
        " ('runs', 'log_artifacts', 'receipt_journal', 'run_attempts', 'run_events')")}
    assert indexes == {"runs_task", "runs_active", "attempts_active",
                       "sqlite_autoindex_run_attempts_1", "sqlite_autoindex_run_attempts_2"}
    assert not [n for n in schema if n.endswith("_new")]
    # foreign keys name the rebuilt tables, with their cascades
    fks = {(t, r[2], r[3], r[4], r[6]) for t in RUN_TABLES
           for r in conn.execute(f"PRAGMA foreign_key_list({t})")}
    assert fks == {
        ("runs", "tasks", "task_id", "id", "CASCADE"),
        ("run_attempts", "runs", "run_id", "id", "CASCADE"),
        ("run_attempts", "log_artifacts", "log_artifact_id", "id", "NO ACTION"),
        ("receipt_journal", "run_attempts", "attempt_id", "id", "CASCADE"),
        ("run_events", "runs", "run_id", "id", "CASCADE"),
        ("cancel_leases", "run_attempts", "attempt_id", "id", "CASCADE"),
    }
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # only active rows are in the partial indexes
    active_runs = conn.execute("SELECT COUNT(*) FROM runs INDEXED BY runs_active"
                               " WHERE status = 'queued' OR status = 'running'").fetchone()[0]
    assert active_runs == sum(r["status"] in ("queued", "running") for r in before["runs"])
    assert conn.execute("SELECT COUNT(*) FROM run_attempts INDEXED BY attempts_active"
                        " WHERE status = 'preparing' OR status = 'running'").fetchone()[0] == 10

    conn.execute("PRAGMA foreign_keys=ON")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE runs SET status = 'bogus' WHERE id = 'r00000'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE log_artifacts SET evicted_reason = 'x' WHERE id = 'l00000'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE receipt_journal SET state = 'x' WHERE attempt_id = 'a00000'")
    with pytest.raises(sqlite3.IntegrityError):  # STRICT
        conn.execute("UPDATE runs SET version = 'many' WHERE id = 'r00000'")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint"):
        conn.execute("INSERT INTO log_artifacts (id, relative_path, created_at_ms)"
                     " VALUES ('l00000', 'x', 1)")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("DELETE FROM log_artifacts WHERE id = 'l00000'")  # still named
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("INSERT INTO runs (id, task_id, trigger, status, created_at_ms)"
                     " VALUES ('rx', 'no-such-task', 'api', 'queued', 1)")
    # deleting a run cascades to its attempts, events, journal rows and leases
    conn.execute("DELETE FROM runs WHERE id = 'r00002'")
    assert conn.execute("SELECT COUNT(*) FROM run_attempts WHERE run_id = 'r00002'"
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM run_events WHERE run_id = 'r00002'"
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM receipt_journal WHERE attempt_id = 'a00002'"
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM cancel_leases WHERE attempt_id = 'a00002'"
                        ).fetchone()[0] == 0
    conn.execute("DELETE FROM tasks WHERE id = 't1'")
    for table in ("runs", "run_attempts", "run_events", "receipt_journal", "cancel_leases"):
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
    conn.commit()
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


# Columns of 0014-0016 (retries, overlap, chains, schedules) with their defaults, for a
# task stored before.
TASK_POLICY_DEFAULTS = {"retries": 0, "retry_delay_s": 10, "retry_on_json": '["failed","lost"]',
                        "overlap": "skip", "on_success_json": "[]", "on_failure_json": "[]",
                        "on_finish_json": "[]", "extra_schedules_json": "[]", "tz": None}


# -- 0009: keep_background, settled journal rows, DISK_CRITICAL ------------------------


def test_hardening_migration_keeps_every_row(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=8)
    _seed(db, runs=40)
    before = _snapshot(db)
    assert migrate.apply(db, _before_fold(tmp_path)) == [v for v in BEFORE_FOLD if v >= 9]
    after = _snapshot(db)
    assert after["tasks"] == [{**t, "keep_background": 0, **TASK_POLICY_DEFAULTS}
                              for t in before["tasks"]]
    assert after["receipt_journal"] == sorted(
        ({**j, "settled_at_ms": None} for j in before["receipt_journal"]), key=repr)
    for table in set(RUN_TABLES) - {"tasks", "receipt_journal"}:
        assert after[table] == before[table], table
    conn = sqlite3.connect(db)
    assert "WITHOUT ROWID" in _schema(conn)["log_artifacts"]
    assert conn.execute("SELECT COUNT(*) FROM receipt_journal"
                        " WHERE settled_at_ms IS NOT NULL").fetchone()[0] == 0
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("UPDATE log_artifacts SET evicted_reason = 'DISK_CRITICAL' WHERE id = 'l00000'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE log_artifacts SET evicted_reason = 'x' WHERE id = 'l00000'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE tasks SET keep_background = 2")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("DELETE FROM log_artifacts WHERE id = 'l00000'")  # still named
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_conc_runs_migration_keeps_every_row(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=10)
    _seed(db, runs=40)
    before = _snapshot(db)  # the new columns are NULL for every old row (_snapshot)
    assert migrate.apply(db, _before_fold(tmp_path)) == [v for v in BEFORE_FOLD if v >= 11]
    after = _snapshot(db)
    assert after.pop("tasks") == [{**t, **TASK_POLICY_DEFAULTS} for t in before.pop("tasks")]
    assert after == before
    conn = sqlite3.connect(db)
    assert "WITHOUT ROWID" in _schema(conn)["runs"]
    assert "runs_parent" in {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index'")}
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE runs SET conc_index = 0")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def _trace_storage(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Results of `apply_storage_settings` as `migrate.apply` calls it, and its statements."""
    results: list[str] = []
    statements: list[str] = []
    real = upkeep.apply_storage_settings

    def traced(conn: sqlite3.Connection) -> str:
        conn.set_trace_callback(statements.append)
        try:
            results.append(real(conn))
        finally:
            conn.set_trace_callback(None)
        return results[-1]

    monkeypatch.setattr(upkeep, "apply_storage_settings", traced)
    return results, statements


def _vacuums(statements: list[str]) -> int:
    return sum(s.strip().upper() == "VACUUM" for s in statements)


def test_new_database_has_small_pages_without_a_vacuum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, statements = _trace_storage(monkeypatch)
    db = tmp_path / "q.db"
    migrate.apply(db)
    assert results == ["already applied"]
    assert _vacuums(statements) == 0
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == upkeep.PAGE_SIZE == 1024
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == upkeep.INCREMENTAL
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert upkeep.wanted_page_size(conn) == upkeep.PAGE_SIZE  # the wish of 0007
    conn.close()


def test_existing_database_converts_to_small_pages_in_one_vacuum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # 4 KiB pages and no auto-vacuum yet (before 0006): both conversions are due
    db = _legacy_db(tmp_path, upto=5)
    _seed(db, runs=400)
    before = _snapshot(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()

    results, statements = _trace_storage(monkeypatch)
    with caplog.at_level("INFO", logger="qledge.db.upkeep"):
        assert migrate.apply(db, _before_fold(tmp_path)) == [6, 7, *BEFORE_FOLD]
    assert results == ["converted"]
    assert _vacuums(statements) == 1
    assert [r.levelname for r in caplog.records] == ["INFO"]  # converted, checkpointed
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == upkeep.INCREMENTAL
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for suffix in ("", "-wal", "-shm"):
        assert (tmp_path / f"q.db{suffix}").stat().st_mode & 0o777 == 0o600, suffix
    conn.close()
    after = _snapshot(db)  # 0006 added columns to log_artifacts
    assert {t: [{k: r[k] for k in rows[0]} for r in after[t]] if rows else after[t]
            for t, rows in before.items()} == before
    assert not (tmp_path / "q.db-journal").exists()
    assert migrate.apply(db, migrate.bundled(tmp_path / "m-before-fold")) == []  # idempotent
    assert results == ["converted", "already applied"]
    assert _vacuums(statements) == 1


def test_page_size_conversion_of_an_incremental_database(tmp_path: Path) -> None:
    """The usual upgrade: 0006 already converted auto-vacuum at 4 KiB; 0007 adds the page size."""
    db = _legacy_db(tmp_path, upto=6)
    _seed(db, runs=200)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == upkeep.INCREMENTAL
    conn.close()
    before = _snapshot(db)
    assert migrate.apply(db, _before_fold(tmp_path)) == [7, *BEFORE_FOLD]
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == upkeep.INCREMENTAL
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert _columns_of(before, _snapshot(db)) == before


def test_failed_page_size_conversion_is_retried_at_the_next_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = _legacy_db(tmp_path, upto=6)
    _seed(db, runs=50)
    before = _snapshot(db)
    # another process has the database open: leaving WAL (needed to change the
    # page size) is refused, so the conversion waits for the next start
    other = sqlite3.connect(db)
    other.execute("SELECT COUNT(*) FROM runs").fetchone()
    with caplog.at_level("WARNING", logger="qledge.db.upkeep"):
        assert migrate.apply(db, _before_fold(tmp_path)) == [7, *BEFORE_FOLD]
    assert "will retry at the next start" in caplog.text
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert upkeep.apply_storage_settings(conn).startswith("failed")  # still refused
    conn.close()
    other.close()
    assert _columns_of(before, _snapshot(db)) == before

    assert migrate.apply(db, migrate.bundled(tmp_path / "m-before-fold")) == []
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert _columns_of(before, _snapshot(db)) == before


def test_database_left_in_rollback_journal_mode_goes_back_to_wal(tmp_path: Path) -> None:
    """A kill between the VACUUM and the switch back to WAL."""
    db = tmp_path / "q.db"
    migrate.apply(db)
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    assert migrate.apply(db) == []
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def _digest(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return hashlib.sha256(repr(rows).encode()).hexdigest()
    finally:
        conn.close()


@pytest.mark.slow
def test_page_size_conversion_is_crash_safe(tmp_path: Path) -> None:
    """kill -9 at two known points of the VACUUM (support.killed_mid_vacuum): the
    database is exactly the old one, 4 KiB pages, and the next start converts it."""
    db = _legacy_db(tmp_path, upto=6)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)"
                     " VALUES ('t1', 'task', 'true', 1, 1)")
        conn.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, reason_code)"
            " VALUES (?, 't1', 'api', 'succeeded', 1, ?)",
            [(f"r{i:06d}", "z" * 150) for i in range(30_000)])
    conn.close()
    other = sqlite3.connect(db)  # 0007 applies, the conversion is refused for now
    other.execute("SELECT 1 FROM runs LIMIT 1").fetchone()
    assert migrate.apply(db) == [7, *AFTER_7]
    other.close()
    before = _digest(db)

    copies = killed_mid_vacuum(db)
    for name, path in copies.items():
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", name
        assert not Path(f"{path}-journal").exists(), name  # rolled back by that read
        killed = name != "full"
        assert conn.execute("PRAGMA page_size").fetchone()[0] == (4096 if killed else 1024)
        # killed after the switch to the rollback journal the page size needs
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == (
            "delete" if killed else "wal"), name
        conn.close()
        assert _digest(path) == before, name
        assert migrate.apply(path) == []
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024, name
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal", name
        conn.close()
        assert _digest(path) == before, name


class _Recorder:
    """Stands in for a `Tx`: records each statement, answers with no rows."""

    dialect = "sqlite"  # the plans checked are SQLite's (db/dialect.py)

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def execute(self, sql: str, params: object = ()) -> int:
        self.calls.append((sql, params))
        return 0

    async def one(self, sql: str, params: object = ()) -> None:
        self.calls.append((sql, params))
        return None

    async def all(self, sql: str, params: object = ()) -> list[object]:
        self.calls.append((sql, params))
        return []


# A full walk of one of these tables; scans of the small partial indexes (active runs,
# attempts with a journal entry) are fine. Active attempts are found through runs_active
# (no index of their own since 0022); the start-up's walk for orphans is not listed.
_FULL_SCAN = re.compile(
    r"^SCAN (runs|run_attempts|run_events|r|a|e)\b"
    r"(?!.* USING (COVERING )?INDEX (runs_active|attempts_journal)\b)")


async def test_hot_queries_use_indexes(tmp_path: Path) -> None:
    from qledge.db import (
        attempts,
        conc_runs,
        events,
        journal,
        leases,
        retention_queries,
        rows,
        runs,
    )
    from qledge.node import Node

    db = tmp_path / "q.db"
    migrate.apply(db)
    rec = _Recorder()
    tx: Any = rec
    a, r, t, owner = ids.uuid7(), ids.uuid7(), ids.uuid7(), ids.uuid7()
    calls = [
        runs.get_run(tx, r), runs.active_run_of_task(tx, t), runs.queued_runs(tx, 8, 1),
        runs.queued_runs(tx, 8, 1, Node(name="n1", labels=("node=n1", "gpio"))),
        runs.next_not_before(tx, 1), conc_runs.children(tx, r),
        conc_runs.has_active_child(tx, r),
        runs.list_runs(tx, task_id=None, status="queued", before=None, limit=50),
        runs.list_runs(tx, task_id=None, status="running", before=r, limit=50),
        runs.list_runs(tx, task_id=t, status="failed", before=r, limit=50),
        attempts.count_active_attempts(tx, owner), attempts.run_has_active_attempt(tx, r),
        attempts.get_attempt(tx, a),
        attempts.attempts_of_run(tx, r), attempts.active_attempts_page(tx, owner, "", 64),
        attempts.expired_attempts(tx, owner, 1, 64), journal.journal_page(tx, "", 64),
        journal.journal_mark_terminal(tx, a, 1), journal.journal_delete(tx, a),
        journal.journal_settle(tx, [a], 1), journal.journal_unsettle(tx, [a]),
        journal.journal_age_out(tx, 1, 4000), journal.journal_ended_page(tx, "", 64),
        journal.journal_age_in_spawn(tx, 1), journal.journal_due(tx, 1, 33),
        attempts.attempts_without_journal(tx, owner, 64), events.list_events(tx, r),
        journal.journal_counts(tx), journal.journal_quarantine(tx, a, "X", 1),
        journal.journal_register(tx, a, "x/a.json", 1),
        retention_queries.set_sizes(tx, [(a, 1)]),
        leases.cancelling_attempts(tx, owner, 64),
        leases.acquire(tx, a, "h", 1, 10),
        retention_queries.run_candidates(tx, t, 10, 1, 64),
        retention_queries.delete_runs(tx, [r, ids.uuid7()], 1),
        retention_queries.unheld_queued_runs(tx, 64), retention_queries.active_logs(tx, 256),
        retention_queries.log_eviction(tx, logs.relative_path(a)),
        retention_queries.eviction_candidates(tx, "", 64),
        retention_queries.evict_logs(tx, [a], "SIZE_CAP", 1),
        runs.queued_run_of_task(tx, t), runs.run_summaries(tx, [t]),
        runs.active_runs_of_task(tx, t),
    ]
    for call in calls:
        with contextlib.suppress(rows.NotFound):
            await call
    conn = sqlite3.connect(db)
    scans = {}
    plans = {}
    for sql, params in rec.calls:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        plans[" ".join(sql.split())] = plan
        if any(_FULL_SCAN.match(step) for step in plan):
            scans[" ".join(sql.split())] = plan
    conn.close()
    # The journal's walks go through attempts_journal in attempt-id order: no sort, no
    # walk of every attempt (0021).
    journal_walks = [plan for sql, plan in plans.items()
                     if "FROM run_attempts a WHERE a.receipt_state IS NOT NULL" in sql]
    assert len(journal_walks) >= 4, plans
    for plan in journal_walks:
        assert not any("TEMP B-TREE" in step for step in plan), plan
        assert any("attempts_journal" in step or "PRIMARY KEY" in step
                   or "sqlite_autoindex_run_attempts_1 (id=?)" in step for step in plan), plan
    [age_out] = [plan for sql, plan in plans.items()
                 if sql.startswith("UPDATE run_attempts SET receipt_state = NULL")
                 and "receipt_settled_at_ms <=" in sql]
    assert any("USING INDEX attempts_journal" in step for step in age_out), age_out
    # Spawn step 1's: the oldest SPAWN_AGE_WINDOW entries of the journal, no more.
    [in_spawn] = [plan for sql, plan in plans.items()
                  if sql.startswith("UPDATE run_attempts SET receipt_state = NULL")
                  and "ORDER BY a.id LIMIT ?) WHERE settled <=" in sql]
    assert any("USING INDEX attempts_journal" in step for step in in_spawn), in_spawn
    # Active attempts through their running runs (0022): runs_active first, then each
    # run's attempts by run_id — never a walk of run_attempts, nor an index of its own.
    through = [plan for sql, plan in plans.items()
               if "CROSS JOIN run_attempts a ON a.run_id = r.id" in sql]
    assert len(through) >= 6, plans  # admission, pages, deadlines, journal, cancels, logs
    for plan in through:
        assert re.match(r"SEARCH r USING (COVERING )?INDEX runs_active \(status=\?\)",
                        plan[0]), plan
        assert plan[1] == "SEARCH a USING INDEX sqlite_autoindex_run_attempts_2 (run_id=?)", plan
    assert not any("attempts_active" in step for plan in plans.values() for step in plan)
    # The claim's page filtered by placement (fleet): still runs_active, oldest first.
    [placed] = [plan for sql, plan in plans.items() if "placement_node = ?" in sql]
    assert re.match(r"SEARCH runs USING INDEX runs_active \(status=\?\)", placed[0]), placed
    assert not any("TEMP B-TREE" in step for step in placed), placed
    assert len(rec.calls) >= len(calls)
    assert scans == {}


# -- 0014: retries and overlap -----------------------------------------------------------


def test_overlap_is_filled_from_the_old_concurrency(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=10)
    conn = sqlite3.connect(db)
    for num, conc in ((1, "forbid"), (2, "allow")):
        conn.execute("INSERT INTO tasks (id, name, command, concurrency, created_at_ms,"
                     " updated_at_ms) VALUES (?, 'x', 'true', ?, 1, 1)", (f"t{num}", conc))
    conn.commit()
    conn.close()
    assert 14 in migrate.apply(db)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, concurrency, overlap, retries, retry_on_json FROM tasks"
                        " ORDER BY id").fetchall()
    conn.close()
    assert rows == [("t1", "forbid", "skip", 0, '["failed","lost"]'),
                    ("t2", "allow", "allow", 0, '["failed","lost"]')]


# -- 0017: QingLong ids of subscriptions -------------------------------------------------

_SUB_COLUMNS = ("id, name, type, url, branch, alias, schedule, extensions_json, username,"
                " secret, caps_json, pull_task_id, last_sync_json, created_at_ms,"
                " updated_at_ms, version")


def test_subscriptions_get_qinglong_ids_in_creation_order_never_reused(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=16)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=ON")
    for sub_id, alias, created in (("s-b", "b", 5), ("s-a", "a", 3)):
        conn.execute(f"INSERT INTO subscriptions ({_SUB_COLUMNS}) VALUES (?, 'n', 'git',"
                     " 'https://x/r', 'main', ?, '0 1 * * *', '[\"js\"]', 'u', 'tok', '{}',"
                     " 'p', '{\"added\":[]}', ?, 9, 2)", (sub_id, alias, created))
        conn.execute("INSERT INTO subscription_tasks (subscription_id, path, task_id,"
                     " applied_name) VALUES (?, 'x.js', 't', 'x')", (sub_id,))
    conn.commit()
    before = conn.execute(f"SELECT {_SUB_COLUMNS} FROM subscriptions ORDER BY id").fetchall()
    conn.close()
    assert 17 in migrate.apply(db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=ON")
    assert conn.execute(f"SELECT {_SUB_COLUMNS} FROM subscriptions ORDER BY id"
                        ).fetchall() == before
    assert conn.execute("SELECT num, id FROM subscriptions ORDER BY num").fetchall() == \
        [(1, "s-a"), (2, "s-b")]
    conn.execute("DELETE FROM subscriptions WHERE id = 's-b'")  # still cascades
    assert conn.execute("SELECT subscription_id FROM subscription_tasks").fetchall() == \
        [("s-a",)]
    insert = (f"INSERT INTO subscriptions ({_SUB_COLUMNS}) VALUES (?, 'n', 'git', 'u', NULL,"
              " ?, NULL, '[]', NULL, NULL, '{}', NULL, NULL, 1, 1, 1) RETURNING num")
    assert conn.execute(insert, ("s-c", "c")).fetchone() == (3,)  # 2 is not handed out again
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute(insert, ("s-a", "d"))
    conn.commit()
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
