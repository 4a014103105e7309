from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qledge.db import migrate


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
    assert {"tasks", "runs", "run_attempts", "run_events", "log_artifacts", "node",
            "receipt_journal"} <= tables
    cols = {r[1] for r in conn.execute("PRAGMA table_info(run_attempts)")}
    assert "deadline_at_ms" in cols
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
    row = conn.execute("SELECT status, pid, deadline_at_ms FROM run_attempts").fetchone()
    assert row == ("running", 42, None)
    assert conn.execute("SELECT COUNT(*) FROM receipt_journal").fetchone()[0] == 0


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
