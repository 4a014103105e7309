"""The PostgreSQL backend (db/pg.py) against a real throwaway cluster (tests/_pg.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import _pg
from qledge import transitions
from qledge.db import (
    apps,
    attempts,
    conc_runs,
    dependencies,
    envs,
    errors,
    events,
    gauges,
    journal,
    leases,
    migrate,
    migrate_pg,
    pg,
    policies,
    retention_queries,
    rows,
    runs,
    schedule,
    subscriptions,
    tasks,
)
from qledge.db.connection import Database
from qledge.model import CancelReason, NewEvent, RunStatus, Trigger

from conftest import free_port


async def test_the_rig_cluster_is_a_real_durable_server(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        settings = {r["name"]: r["setting"] for r in await conn.fetch(
            "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
            ["fsync", "synchronous_commit", "listen_addresses"])}
        assert settings == {"fsync": "on", "synchronous_commit": "on",
                            "listen_addresses": "127.0.0.1"}
        assert await conn.fetchval("SELECT current_database()") == pg_dsn.rsplit("/", 1)[1]
        tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        assert await conn.fetchval(tables) == 0
    finally:
        await conn.close()


def test_a_missing_postgresql_fails_the_rig_loudly(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="run scripts/bootstrap"):
        _pg.pg_bindir(tmp_path)
    for major in ("9", "15", "13"):
        (tmp_path / major / "bin").mkdir(parents=True)
        (tmp_path / major / "bin" / "initdb").touch()
    assert _pg.pg_bindir(tmp_path) == tmp_path / "15" / "bin"


def test_a_cluster_lives_in_its_own_directory_and_is_removed() -> None:
    cluster = _pg.Cluster(_pg.pg_bindir(), free_port())
    try:
        assert cluster.dir.stat().st_mode & 0o777 == 0o700
        cluster.start()
        assert (cluster.dir / f".s.PGSQL.{cluster.port}").is_socket()
        assert _pg.psql(cluster.dsn, "SELECT 1") == "1"
    finally:
        cluster.stop()
    assert not cluster.dir.exists()


# -- the connection layer (db/pg.py) on the baseline schema ----------------------------

@pytest.fixture
async def pgdb(pg_dsn: str) -> AsyncIterator[pg.Database]:
    await migrate_pg.apply(pg_dsn)
    db = pg.Database(pg_dsn)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def test_parameters_are_translated_once_per_sql_string() -> None:
    sql = ("SELECT '?', 'a:b', x::text, \"c?\" FROM t -- why?\n"
           " WHERE a = ? AND b = ? AND c LIKE 'x''?'")
    assert pg.translate(sql) == (
        "SELECT '?', 'a:b', x::text, \"c?\" FROM t -- why?\n"
        " WHERE a = $1 AND b = $2 AND c LIKE 'x''?'", None)
    assert pg.translate("UPDATE t SET a = :a, b = :b WHERE id = :id OR a = :a") == (
        "UPDATE t SET a = $1, b = $2 WHERE id = $3 OR a = $1", ("a", "b", "id"))
    with pytest.raises(ValueError, match="mixes"):
        pg.translate("SELECT ? + :x")
    before = pg.translate.cache_info()
    pg.translate(sql)
    after = pg.translate.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


async def _task_row(tx: pg.Tx, task_id: str, name: str = "t") -> None:
    await tx.execute(
        "INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)"
        " VALUES (?, ?, 'true', 1, 1)", (task_id, name))


async def test_a_write_is_read_back_by_column_name(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        await _task_row(tx, "t1")
        changed = await tx.execute("UPDATE tasks SET name = :name WHERE id = :id",
                                   {"name": "renamed", "id": "t1"})
        assert changed == 1
    async with pgdb.read() as tx:
        row = await tx.one("SELECT * FROM tasks WHERE id = ?", ("t1",))
        missing = await tx.one("SELECT * FROM tasks WHERE id = ?", ("nope",))
        rows = await tx.all("SELECT id, num FROM tasks ORDER BY num")
    assert row is not None and missing is None
    assert (row["name"], row["num"], row["enabled"], row["env_json"]) == ("renamed", 1, 1, "{}")
    assert dict(rows[0]) == {"id": "t1", "num": 1} and rows[0][0] == "t1"


async def test_an_error_rolls_the_whole_transaction_back(pgdb: pg.Database) -> None:
    undone: list[str] = []
    committed: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        async with pgdb.write() as tx:
            await _task_row(tx, "t1")
            tx.on_rollback(lambda: undone.append("t1"))
            tx.on_commit(lambda: committed.append("t1"))
            raise RuntimeError("boom")
    assert (undone, committed, pgdb.commit_seq) == (["t1"], [], 0)
    async with pgdb.read() as tx:
        assert await tx.all("SELECT id FROM tasks") == []
    async with pgdb.write() as tx:  # the writer is usable again
        await _task_row(tx, "t2")
    assert pgdb.commit_seq == 1


async def test_a_savepoint_rolls_back_alone(pgdb: pg.Database) -> None:
    undone: list[str] = []
    async with pgdb.write() as tx:
        await _task_row(tx, "kept")
        with pytest.raises(errors.IntegrityViolation):
            async with tx.savepoint():
                await _task_row(tx, "inner")
                tx.on_rollback(lambda: undone.append("inner"))
                await _task_row(tx, "kept")  # a duplicate id: the unit fails
        async with tx.savepoint():
            await _task_row(tx, "after")
    assert undone == ["inner"]
    async with pgdb.read() as tx:
        ids = [r["id"] for r in await tx.all("SELECT id FROM tasks ORDER BY num")]
    assert ids == ["kept", "after"]


async def test_a_unique_violation_is_integrity_and_nothing_commits(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        await _task_row(tx, "t1")
    with pytest.raises(errors.PgIntegrity) as info:
        async with pgdb.write() as tx:
            await _task_row(tx, "t2")
            await _task_row(tx, "t1")
    exc = info.value
    assert exc.sqlstate == "23505" and "tasks_id_key" in str(exc)
    assert errors.is_integrity(exc) and isinstance(exc, errors.ERRORS)
    assert not errors.is_transient(exc) and not errors.is_full(exc)
    assert isinstance(exc.__cause__, asyncpg.UniqueViolationError)
    async with pgdb.read() as tx:
        assert [r["id"] for r in await tx.all("SELECT id FROM tasks")] == ["t1"]


async def test_a_lock_timeout_is_transient(pgdb: pg.Database, pg_dsn: str) -> None:
    async with pgdb.write() as tx:
        await _task_row(tx, "t1")
    other = await asyncpg.connect(pg_dsn)
    try:
        async with other.transaction():
            await other.execute("SELECT 1 FROM tasks WHERE id = 't1' FOR UPDATE")
            with pytest.raises(errors.PgTransient) as info:
                async with pgdb.write() as tx:
                    await tx.execute("SET LOCAL lock_timeout = 50")
                    await tx.execute("UPDATE tasks SET name = 'x' WHERE id = 't1'")
    finally:
        await other.close()
    assert info.value.sqlstate == "55P03" and errors.is_transient(info.value)
    assert not errors.is_integrity(info.value)


async def test_a_failed_statement_aborts_the_transaction(pgdb: pg.Database) -> None:
    """Unlike SQLite, PostgreSQL aborts the whole transaction at a failed statement;
    a caller that swallows the error without a savepoint gets no silent COMMIT."""
    with pytest.raises(errors.PgError, match="aborted"):
        async with pgdb.write() as tx:
            await _task_row(tx, "t1")
            with pytest.raises(errors.PgIntegrity):
                await _task_row(tx, "t1")
    assert pgdb.commit_seq == 0
    async with pgdb.read() as tx:
        assert await tx.all("SELECT id FROM tasks") == []


async def test_durable_and_deferred_commits(pgdb: pg.Database) -> None:
    async with pgdb.write(durable=False) as tx:
        setting = await tx.one("SHOW synchronous_commit")
        await _task_row(tx, "t1")
    assert setting is not None and setting[0] == "off"
    assert (pgdb.commit_seq, pgdb.durable_seq) == (1, 0)
    async with pgdb.write() as tx:  # durable, but it changes no row: no commit record
        setting = await tx.one("SHOW synchronous_commit")
        await tx.execute("UPDATE tasks SET name = 'x' WHERE id = 'nope'")
    assert setting is not None and setting[0] == "on"
    assert (pgdb.commit_seq, pgdb.durable_seq) == (2, 0)
    waiter = asyncio.create_task(pgdb.wait_durable(2))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await pgdb.sync()
    await asyncio.wait_for(waiter, 5)
    assert (pgdb.commit_seq, pgdb.durable_seq, pgdb.syncs) == (2, 2, 1)
    await pgdb.sync()  # nothing new: no flush
    assert pgdb.syncs == 1
    async with pgdb.write(durable=False) as tx:
        await _task_row(tx, "t2")
    async with pgdb.write() as tx:  # a durable commit that writes covers the deferred one
        await _task_row(tx, "t3")
    assert (pgdb.commit_seq, pgdb.durable_seq, pgdb.syncs) == (4, 4, 1)
    async with pgdb.write() as tx:  # the session default is back after SET LOCAL
        setting = await tx.one("SHOW synchronous_commit")
    assert setting is not None and setting[0] == "on"


async def test_a_read_is_a_read_only_snapshot(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        await _task_row(tx, "t1")
    async with pgdb.read() as snap:
        level = await snap.one("SHOW transaction_isolation")
        before = await snap.all("SELECT id FROM tasks")
        async with pgdb.write() as tx:
            await _task_row(tx, "t2")
        after = await snap.all("SELECT id FROM tasks")
    assert level is not None and level[0] == "repeatable read"
    assert before == after and len(after) == 1
    with pytest.raises(errors.PgError) as info:
        async with pgdb.read() as snap:
            await snap.execute("DELETE FROM tasks")
    assert info.value.sqlstate == "25006" and not errors.is_transient(info.value)
    async with pgdb.read() as snap:
        assert len(await snap.all("SELECT id FROM tasks")) == 2


async def test_the_writer_reconnects_after_the_server_dropped_it(pgdb: pg.Database,
                                                                 pg_dsn: str) -> None:
    async with pgdb.write() as tx:
        pid = (await tx.one("SELECT pg_backend_pid()"))[0]
    admin = await asyncpg.connect(pg_dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    # The writer reconnects at once when the driver already saw the session end, or
    # the first write fails as transient (a retry's business) and the next reconnects.
    for attempt in range(2):
        try:
            async with pgdb.write() as tx:
                await _task_row(tx, "t1")
                new_pid = (await tx.one("SELECT pg_backend_pid()"))[0]
            break
        except errors.PgTransient:
            assert attempt == 0
    assert new_pid != pid
    async with pgdb.read() as tx:
        assert [r["id"] for r in await tx.all("SELECT id FROM tasks")] == ["t1"]


async def test_terminal_listeners_reach_the_write_transaction(pgdb: pg.Database) -> None:
    async def listener(tx: Any, old: Any, new: Any, now_ms: int) -> None:
        return None

    pgdb.on_terminal(listener)
    async with pgdb.write() as tx:
        assert tx.terminal_listeners == (listener,)
    async with pgdb.read() as tx:
        assert tx.terminal_listeners == ()


async def test_inline_runs_the_function_on_the_transaction(pgdb: pg.Database) -> None:
    async def batch(tx: Any) -> int:
        await _task_row(tx, "t1")
        await _task_row(tx, "t2")
        return int(await tx.execute("UPDATE tasks SET enabled = 0"))

    async with pgdb.write() as tx:
        assert await tx.inline(batch) == 2


# -- real db/*.py query functions, unchanged, on PostgreSQL ---------------------------

async def test_task_queries_run_unchanged(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        created = await tasks.create_task(tx, "t1", {
            "name": "backup", "command": "echo hi", "env": {"A": "1"}, "labels": ["x"],
            "overlap": "queue", "retry_on": ["lost", "failed"]}, 10)
        second = await tasks.create_task(tx, "t2", {
            "name": "other", "command": "true", "env": {}, "labels": []}, 11)
        updated = await tasks.update_task(tx, "t1", {"name": "nightly backup",
                                                     "enabled": False}, 12)
    assert (created.num, second.num) == (1, 2)
    assert created.env == {"A": "1"} and created.labels == ["x"]
    assert created.retry_on == ["failed", "lost"] and created.concurrency == "forbid"
    assert (updated.name, updated.enabled, updated.version) == ("nightly backup", False, 2)
    async with pgdb.read() as tx:
        assert await tasks.get_task(tx, "t1") == updated
        assert await tasks.get_task_by_num(tx, 2) == second
        assert [t.id for t in await tasks.list_tasks(tx)] == ["t1", "t2"]
        assert [t.id for t in await tasks.list_tasks(tx, after_num=1)] == ["t2"]
        assert set(await tasks.tasks_by_ids(tx, ["t1", "t2", "t3"])) == {"t1", "t2"}
        assert await tasks.task_envs(tx) == [(1, "nightly backup", {"A": "1"})]
        assert (await tasks.task_by_command(tx, "true")) == second
        found, total = await tasks.search_tasks(tx, "name:backup", 0, 10)
        assert ([t.id for t in found], total) == (["t1"], 1)
        with pytest.raises(rows.NotFound):
            await tasks.get_task(tx, "nope")
    async with pgdb.write() as tx:
        assert await tasks.delete_task(tx, "t2", 13) == []
    async with pgdb.read() as tx:
        assert [t.id for t in await tasks.list_tasks(tx)] == ["t1"]


async def test_run_reads_run_unchanged(pgdb: pg.Database) -> None:
    """Runs made by runs.create_run (its event-log append is dialect.append_blob's
    bytea concatenation here, SQLite's `CAST(… || ? AS BLOB)` there)."""
    async with pgdb.write() as tx:
        await tasks.create_task(tx, "t1", {"name": "t", "command": "true", "env": {},
                                           "labels": []}, 1)
        for run_id, not_before in (("r1", None), ("r2", None), ("r3", 500)):
            await runs.create_run(tx, run_id, "t1", Trigger.MANUAL, 2, not_before)
        r1 = await runs.end_if_queued(tx, await runs.get_run(tx, "r1"), 3)
    assert r1.status is RunStatus.CANCELLED
    async with pgdb.read() as tx:
        run = await runs.get_run(tx, "r2")
        assert (run.status, run.trigger, run.version, run.not_before_ms, run.event_seq) == (
            RunStatus.QUEUED, Trigger.MANUAL, 1, None, 1)
        assert [r.id for r in await runs.list_runs(tx, task_id="t1", status=None,
                                                    before=None, limit=10)] == ["r3", "r2", "r1"]
        assert [r.id for r in await runs.list_runs(tx, task_id=None, status="queued",
                                                    before="r3", limit=10)] == ["r2"]
        assert [r.id for r in await runs.queued_runs(tx, 10, 100)] == ["r2"]
        assert [r.id for r in await runs.queued_runs(tx, 10, 600)] == ["r2", "r3"]
        assert await runs.next_not_before(tx, 100) == 500
        assert (await runs.queued_run_of_task(tx, "t1")).id == "r2"
        assert (await runs.active_run_of_task(tx, "t1")).id == "r2"
        assert (await runs.latest_runs_by_task(tx, ["t1"]))["t1"].id == "r3"
        assert [(e.seq, e.type) for e in await events.list_events(tx, "r2")] == [
            (1, "run.created")]
        assert [(e.seq, e.type) for e in await events.list_events(tx, "r1")] == [
            (1, "run.created"), (2, "run.finished")]
        with pytest.raises(rows.NotFound):
            await runs.get_run(tx, "nope")


async def test_a_cancelled_writer_leaves_the_connection_usable(pgdb: pg.Database) -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        async with pgdb.write() as tx:
            await _task_row(tx, "lost")
            entered.set()
            await tx.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(slow())
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        async with pgdb.write() as tx:
            await _task_row(tx, "kept")
        async with pgdb.read() as tx:
            assert [r["id"] for r in await tx.all("SELECT id FROM tasks")] == ["kept"]
    assert pgdb.commit_seq == 1


async def test_env_schedule_and_app_queries_run_unchanged(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        await tasks.create_task(tx, "t1", {"name": "t", "command": "true", "env": {},
                                           "labels": []}, 1)
        first = await envs.create_env(tx, "e1", {"name": "A", "value": "1"}, 1)
        second = await envs.create_env(tx, "e2", {"name": "B", "value": "2"}, 2)
        await envs.update_env(tx, "e1", {"value": "9"}, 3)
        assert await envs.set_envs_enabled(tx, ["e2"], False, 4) == 1
        await schedule.record_due(tx, "t1", 100, 5)
        await schedule.record_due(tx, "t1", 200, 6)  # the upsert: ON CONFLICT … excluded
        await apps.create_app(tx, app_id="a1", name="n", client_id="c",
                              secret_hash=b"\x00\xff", scopes=["crons"], now_ms=1)
    assert second.position < first.position and first.position > 2**32  # bigint
    async with pgdb.read() as tx:
        assert [e.id for e in await envs.list_envs(tx)] == ["e1", "e2"]
        assert [e.id for e in await envs.envs_by_nums(tx, [2])] == ["e2"]
        assert (await envs.get_env(tx, "e1")).value == "9"
        assert await envs.global_env(tx) == {"A": "9"}
        assert await schedule.last_due(tx, "t1") == 200
        assert await apps.app_secret(tx, "c") == ("a1", b"\x00\xff")


# -- the same functions on both backends, the same results ------------------------------

@pytest.fixture
async def litedb(tmp_path: Path) -> AsyncIterator[Database]:
    path = tmp_path / "qledge.db"
    migrate.apply(path)
    db = Database(path)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def _on_both(litedb: Database, pgdb: pg.Database, scenario: Any) -> Any:
    """`scenario(db)` on a fresh SQLite and a fresh PostgreSQL database: what it returns
    must be equal (SQLite is the reference); that result, for the caller's own checks."""
    lite = await scenario(litedb)
    assert await scenario(pgdb) == lite
    return lite


def _task(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "command": f"run {name}", "env": {}, "labels": [], **more}


async def _write_runs(db: Any) -> dict[str, Any]:
    """The run-writing path: create, a spawn's transitions with an attempt, a cancel of
    a queued run, a signal event, a completion, a lost compare-and-set."""
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1", extra_schedules=["0 1 * * *", "@boot"]), 1)
        await tasks.create_task(tx, "t2", _task("t2", schedule="@boot"), 1)
        await tasks.create_task(tx, "t3", _task("t3", schedule="@boot", enabled=False), 1)
        await tasks.create_task(tx, "t4", _task("t4", extra_schedules=["@daily"]), 1)
        r1 = await runs.create_run(tx, "r1", "t1", Trigger.MANUAL, 10)
        r2 = await runs.create_run(tx, "r2", "t1", Trigger.API, 11, not_before_ms=500)
        r3 = await runs.create_run(tx, "r3", "t2", Trigger.SCHEDULE, 12)
    async with db.write() as tx:
        r1 = await runs.apply(tx, r1, transitions.attempt_prepared(r1), 20)
        att = await attempts.prepare_attempt(
            tx, r1, attempt_id="a1", owner="node-1", executor_type="local",
            token_hash=b"\x00\xfftoken", deadline_at_ms=None, log_path="t1/a1.log",
            receipt_path="receipts/a1", now_ms=20)
        r1 = await runs.get_run(tx, "r1")
        r1 = await runs.apply(tx, r1, transitions.attempt_started(
            r1, att, pid=4242, start_time=77, boot_id="boot", now_ms=30), 30)
        cancel = transitions.request_cancel(r2, CancelReason.USER, 40)
        assert cancel is not None
        r2 = await runs.end_if_queued(tx, await runs.apply(tx, r2, cancel, 40), 41)
        await events.append_events(tx, r3, [NewEvent(type="run.held", data={"why": "x"})], 50)
    async with db.read() as tx:
        running = await runs.run_summaries(tx, ["t1", "t2", "t3", "t4", "nope"])
    conflict = False
    async with db.write() as tx:
        att = await attempts.get_attempt(tx, "a1")
        done = await runs.apply(tx, r1, transitions.complete(
            r1, att, exit_code=3, finished_at_ms=90), 90)
        try:
            async with tx.savepoint():
                await runs.apply(tx, r1, transitions.request_cancel(
                    r1, CancelReason.USER, 91), 91)  # r1's version moved: refused
        except rows.Conflict:
            conflict = True
    async with db.read() as tx:
        return {
            "conflict": conflict, "done": done,
            "runs": [await runs.get_run(tx, r) for r in ("r1", "r2", "r3")],
            "attempt": await attempts.get_attempt(tx, "a1"),
            "events": {r: await events.list_events(tx, r) for r in ("r1", "r2", "r3")},
            "page": await events.list_events(tx, "r1", after_seq=2, limit=2),
            "finished": await events.count_events(tx, "r1", "attempt.finished"),
            "last": await events.last_event_type(tx, "r3"),
            "running": running,
            "summaries": await runs.run_summaries(tx, ["t1", "t2", "t3", "t4", "nope"]),
            "boot": await policies.boot_task_ids(tx),
        }


async def test_the_run_writing_path_gives_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _write_runs)
    r1, r2, r3 = got["runs"]
    assert got["conflict"] and (got["done"].status, got["done"].version) == (
        r1.status, r1.version)
    assert (r1.status, r1.exit_code, r1.event_seq) == (RunStatus.FAILED, 3, 6)
    assert (r2.status, r2.reason_code, r3.status) == (
        RunStatus.CANCELLED, "CANCELLED_BEFORE_START", RunStatus.QUEUED)
    assert [e.type for e in got["events"]["r1"]] == [
        "run.created", "attempt.created", "attempt.started", "run.started",
        "attempt.finished", "run.finished"]
    assert [e.seq for e in got["page"]] == [3, 4] and got["finished"] == 1
    assert got["events"]["r3"][-1].data == {"why": "x"} and got["last"] == "run.held"
    assert got["attempt"].callback_token_hash == b"\x00\xfftoken"
    assert got["attempt"].finished_at_ms == 90 and got["attempt"].exit_code == 3
    running, summaries = got["running"], got["summaries"]
    assert set(running) == set(summaries) == {"t1", "t2"}
    assert (running["t1"].running, running["t1"].pid, running["t1"].latest_run_id) == (
        True, 4242, "r2")
    assert (running["t2"].queued, running["t2"].running) == (True, False)
    assert (summaries["t1"].running, summaries["t1"].pid) == (False, None)
    assert summaries["t1"].last_duration_ms == 60 and summaries["t1"].log_path is None
    assert got["boot"] == ["t1", "t2"]


async def _search(db: Any) -> dict[str, Any]:
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("Nightly Backup", labels=["Ops"]), 1)
        await tasks.create_task(tx, "t2", _task("report", schedule="@Daily"), 2)
        await tasks.create_task(tx, "t3", _task("100% done_x"), 3)
        await envs.create_env(tx, "e1", {"name": "PATH", "value": "/usr/BIN"}, 1)
        await envs.create_env(tx, "e2", {"name": "home", "value": "x", "remarks": "Path"}, 2)
        await envs.create_env(tx, "e3", {"name": "other", "value": "y"}, 3)
        for sub_id, name, url in (("s1", "Scripts", "https://GitHub.com/a/b.git"),
                                  ("s2", "mine", "https://example.org/c.git")):
            await subscriptions.create(tx, sub_id, {
                "name": name, "type": "public-repo", "url": url, "alias": sub_id,
                "extensions": ["py"]}, 1)
        await dependencies.declare(tx, "python", ["Requests", "rich"], 1)
        await dependencies.declare(tx, "node", ["axios"], 1, remark="REQ")
    async with db.read() as tx:
        async def task_ids(q: str) -> tuple[list[str], int]:
            found, total = await tasks.search_tasks(tx, q, 0, 10)
            return [t.id for t in found], total

        return {
            "tasks": {q: await task_ids(q) for q in (
                "BACKUP", "name:nightly", "label:ops", "schedule:@daily", "command:RUN",
                "0%", "_x", "e_x", "nothing")},
            "envs": {q: [e.id for e in await envs.list_envs(tx, q)]
                     for q in ("path", "bin", "%", "")},
            "subs": {q: [s.id for s in await subscriptions.search(tx, q)]
                     for q in ("github", "SCRIPTS", ".GIT", "_", "")},
            "deps": {q: [(d.type, d.name) for d in await dependencies.list_all(tx, search=q)]
                     for q in ("req", "RICH", "%", "")},
        }


async def test_the_searches_find_the_same_rows_ignoring_case(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _search)
    assert got["tasks"] == {
        "BACKUP": (["t1"], 1), "name:nightly": (["t1"], 1), "label:ops": (["t1"], 1),
        "schedule:@daily": (["t2"], 1), "command:RUN": (["t3", "t2", "t1"], 3),
        "0%": (["t3"], 1), "_x": (["t3"], 1), "e_x": (["t3"], 1), "nothing": ([], 0)}
    assert got["envs"] == {"path": ["e1", "e2"], "bin": ["e1"], "%": [],
                           "": ["e1", "e2", "e3"]}
    assert got["subs"] == {"github": ["s1"], "SCRIPTS": ["s1"], ".GIT": ["s2", "s1"],
                           "_": [], "": ["s2", "s1"]}
    assert got["deps"] == {"req": [("python", "requests")], "RICH": [("python", "rich")],
                           "%": [], "": [("node", "axios"), ("python", "requests"),
                                         ("python", "rich")]}


async def _spawn(tx: Any, run_id: str, attempt_id: str, now_ms: int, *,
                 owner: str = "node-1", deadline_at_ms: int | None = None,
                 start: bool = True) -> Any:
    """Spawn step 1 (and the start) of a queued run: its run is `running`."""
    run = await runs.get_run(tx, run_id)
    run = await runs.apply(tx, run, transitions.attempt_prepared(run), now_ms)
    att = await attempts.prepare_attempt(
        tx, run, attempt_id=attempt_id, owner=owner, executor_type="local",
        token_hash=b"h", deadline_at_ms=deadline_at_ms, log_path=f"t/{attempt_id}.log",
        receipt_path=f"receipts/{attempt_id}", now_ms=now_ms)
    if start:
        run = await runs.get_run(tx, run_id)
        await runs.apply(tx, run, transitions.attempt_started(
            run, att, pid=100, start_time=1, boot_id="boot", now_ms=now_ms), now_ms)
    return await attempts.get_attempt(tx, attempt_id)


async def _finish(tx: Any, run_id: str, attempt_id: str, now_ms: int) -> None:
    run = await runs.get_run(tx, run_id)
    att = await attempts.get_attempt(tx, attempt_id)
    await runs.apply(tx, run, transitions.complete(
        run, att, exit_code=0, finished_at_ms=now_ms), now_ms)


async def _journal(db: Any) -> dict[str, Any]:
    """Entries registered at spawn, settled, unsettled, quarantined, aged out."""
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        for n in range(1, 6):
            await runs.create_run(tx, f"r{n}", "t1", Trigger.MANUAL, n)
        for n in range(1, 6):
            await _spawn(tx, f"r{n}", f"a{n}", 10 + n)
        for n in (1, 2, 3):
            await _finish(tx, f"r{n}", f"a{n}", 20 + n)
    out: dict[str, Any] = {}
    async with db.write() as tx:
        out["counts0"] = await journal.journal_counts(tx)
        out["ended0"] = await journal.journal_ended_page(tx, "", 10)
        await journal.journal_settle(tx, ["a1", "a2", "a3", "nope"], 30)
        await journal.journal_unsettle(tx, ["a3"])
        await journal.journal_quarantine(tx, "a4", "BAD", 31)
        await journal.journal_mark_terminal(tx, "a5", 32)
        out["page"] = await journal.journal_page(tx, "", 10)
        out["page_after"] = await journal.journal_page(tx, "a3", 1)
        out["counts1"] = await journal.journal_counts(tx)
        out["due"] = [await journal.journal_due(tx, cut, 10) for cut in (29, 30)]
        out["due_limited"] = await journal.journal_due(tx, 30, 1)
        out["aged"] = await journal.journal_age_out(tx, 30, 1)
        out["aged_in_spawn"] = [await journal.journal_age_in_spawn(tx, None),
                                await journal.journal_age_in_spawn(tx, 30)]
        out["counts2"] = await journal.journal_counts(tx)
        await journal.journal_delete(tx, "a3")
        out["register"] = [await journal.journal_register(tx, "a3", "receipts/x", 40),
                           await journal.journal_register(tx, "a3", "receipts/y", 41)]
        await journal.journal_reset_pending(tx, "a4", 42)
        out["page_end"] = await journal.journal_page(tx, "", 10)
        out["ended_end"] = await journal.journal_ended_page(tx, "", 10)
        out["counts_end"] = await journal.journal_counts(tx)
    return out


async def test_the_receipt_journal_gives_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _journal)
    assert got["counts0"] == {"active": 2, "terminal": 3, "settled": 0, "quarantined": 0}
    assert got["ended0"] == ["a1", "a2", "a3"]
    assert [(e.attempt_id, e.state, e.reason_code, e.retention_since_ms)
            for e in got["page"]] == [
        ("a3", "pending", None, 23), ("a4", "quarantined", "BAD", 31),
        ("a5", "pending", None, 32)]
    assert [e.attempt_id for e in got["page_after"]] == ["a4"]
    assert got["page"][0].relative_path == "receipts/a3"
    assert got["counts1"] == {"active": 2, "terminal": 1, "settled": 2, "quarantined": 1}
    assert (got["due"], got["due_limited"]) == ([0, 2], 1)
    assert got["aged"] == 1 and got["aged_in_spawn"] == [0, 1]
    assert got["counts2"] == {"active": 2, "terminal": 1, "settled": 0, "quarantined": 1}
    assert got["register"] == [True, False]
    assert [(e.attempt_id, e.state, e.relative_path) for e in got["page_end"]] == [
        ("a3", "pending", "receipts/x"), ("a4", "pending", "receipts/a4"),
        ("a5", "pending", "receipts/a5")]
    assert got["ended_end"] == ["a3"]
    assert got["counts_end"] == {"active": 2, "terminal": 1, "settled": 0, "quarantined": 0}


async def _attempts(db: Any) -> dict[str, Any]:
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        await tasks.create_task(tx, "t2", _task("t2"), 1)
        for n in range(1, 5):
            await runs.create_run(tx, f"r{n}", "t1", Trigger.MANUAL, n)
        await runs.create_run(tx, "r5", "t2", Trigger.MANUAL, 5)
        await _spawn(tx, "r1", "a1", 10, deadline_at_ms=100)
        await _spawn(tx, "r2", "a2", 11, deadline_at_ms=50)
        await _spawn(tx, "r3", "a3", 12, owner="node-2", deadline_at_ms=10)
        await _spawn(tx, "r4", "a4", 13, start=False)
        await _finish(tx, "r1", "a1", 20)
        await journal.journal_delete(tx, "a4")
    async with db.read() as tx:
        return {
            "get": await attempts.get_attempt(tx, "a2"),
            "find": [await attempts.find_attempt(tx, a) for a in ("a1", "nope")],
            "of_run": await attempts.attempts_of_run(tx, "r2"),
            "of_none": await attempts.attempts_of_run(tx, "r5"),
            "active": [await attempts.count_active_attempts(tx, o)
                       for o in ("node-1", "node-2", "node-3")],
            "has_active": [await attempts.run_has_active_attempt(tx, r)
                           for r in ("r1", "r2", "r4", "r5")],
            "page": [a.id for a in await attempts.active_attempts_page(tx, "node-1", "", 10)],
            "page_after": [a.id for a in await attempts.active_attempts_page(
                tx, "node-1", "a2", 1)],
            "expired": [[a.id for a in await attempts.expired_attempts(tx, o, now, 10)]
                        for o, now in (("node-1", 60), ("node-1", 200), ("node-2", 10))],
            "no_journal": [a.id for a in await attempts.attempts_without_journal(
                tx, "node-1", 10)],
            "orphans": await attempts.orphan_attempts(tx, "node-1", "", 10),
            "task_running": [await attempts.task_has_running_attempt(tx, t)
                             for t in ("t1", "t2")],
        }


async def test_attempt_reads_give_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _attempts)
    a2 = got["get"]
    assert (a2.id, a2.run_id, a2.attempt_no, a2.runtime_owner, a2.deadline_at_ms) == (
        "a2", "r2", 1, "node-1", 50)
    assert got["of_run"] == [a2]
    assert got["find"][0] is not None and got["find"][0].exit_code == 0
    assert got["find"][1] is None and got["of_none"] == []
    assert got["active"] == [2, 1, 0]
    assert got["has_active"] == [False, True, True, False]
    assert got["page"] == ["a2", "a4"] and got["page_after"] == ["a4"]
    assert got["expired"] == [["a2"], ["a2"], ["a3"]]
    assert got["no_journal"] == ["a4"] and got["orphans"] == []
    assert got["task_running"] == [True, False]


async def _leases_children_gauges(db: Any) -> dict[str, Any]:
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        for n in range(1, 5):
            await runs.create_run(tx, f"r{n}", "t1", Trigger.MANUAL, n)
        await _spawn(tx, "r1", "a1", 10)
        await _spawn(tx, "r2", "a2", 11)
        await _spawn(tx, "r3", "a3", 12, owner="node-2")
        for run_id in ("r1", "r3"):
            run = await runs.get_run(tx, run_id)
            cancel = transitions.request_cancel(run, CancelReason.USER, 13)
            assert cancel is not None
            await runs.apply(tx, run, cancel, 13)
    out: dict[str, Any] = {}
    async with db.write() as tx:
        first = await leases.acquire(tx, "a1", "h1", 20, 100)
        out["acquire"] = [
            first,
            await leases.acquire(tx, "a1", "h2", 50, 100),  # held by h1: refused
            await leases.acquire(tx, "a1", "h1", 60, 100),  # renewed, same epoch
            await leases.acquire(tx, "a1", "h2", 200, 100),  # expired: taken over
        ]
        assert first is not None
        out["holds"] = [await leases.holds(tx, first, 30),
                        await leases.holds(tx, out["acquire"][3], 250),
                        await leases.holds(tx, out["acquire"][3], 300)]
        await leases.record_signal(tx, "a1", "term_sent_at_ms", 210)
        await leases.record_signal(tx, "a1", "kill_sent_at_ms", 220)
        row = await tx.one("SELECT term_sent_at_ms, kill_sent_at_ms FROM cancel_leases"
                           " WHERE attempt_id = ?", ("a1",))
        out["signals"] = (row["term_sent_at_ms"], row["kill_sent_at_ms"])
        out["cancelling"] = [[a.id for a in await leases.cancelling_attempts(tx, o, 10)]
                             for o in ("node-1", "node-2", "node-3")]
        out["cancelling_orphans"] = await leases.cancelling_orphans(tx, "node-1", 10)
        parent = await runs.get_run(tx, "r4")
        parent = await runs.apply(tx, parent, transitions.fan_out(parent, 2, 30), 30)
        made = [await conc_runs.create_child(tx, f"c{i}", parent, i, 31 + i)
                for i in (2, 1)]
        out["made"] = [(c.id, c.parent_run_id, c.conc_index, c.status) for c in made]
        out["children"] = [c.id for c in await conc_runs.children(tx, "r4")]
        out["child_events"] = [e.data for e in await events.list_events(tx, "c1")]
        out["has_active_child"] = [await conc_runs.has_active_child(tx, r)
                                   for r in ("r4", "r1")]
        out["gauges"] = await gauges.active_runs(tx)
        for i in (1, 2):
            await runs.end_if_queued(tx, await runs.get_run(tx, f"c{i}"), 40 + i)
        out["has_active_child_end"] = await conc_runs.has_active_child(tx, "r4")
        out["gauges_end"] = await gauges.active_runs(tx)
    return out


async def test_leases_children_and_gauges_give_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _leases_children_gauges)
    assert [(lease.holder, lease.epoch, lease.expires_at_ms) if lease else None
            for lease in got["acquire"]] == [
        ("h1", 1, 120), None, ("h1", 1, 160), ("h2", 2, 300)]
    assert got["holds"] == [False, True, False]  # the first lease's epoch was taken over
    assert got["signals"] == (210, 220)
    assert got["cancelling"] == [["a1"], ["a3"], []] and got["cancelling_orphans"] == []
    assert got["made"] == [("c2", "r4", 2, RunStatus.QUEUED), ("c1", "r4", 1, RunStatus.QUEUED)]
    assert got["children"] == ["c1", "c2"]
    assert got["child_events"] == [{"trigger": "manual", "parent_run_id": "r4",
                                    "conc_index": 1}]
    assert got["has_active_child"] == [True, False] and got["has_active_child_end"] is False
    assert got["gauges"] == (2, 4) and got["gauges_end"] == (0, 4)


async def _batches(db: Any) -> dict[str, Any]:
    """The `IN` lists of envs, tasks and subscriptions (dialect.in_list: one array
    parameter on PostgreSQL)."""
    async with db.write() as tx:
        for n in range(1, 5):
            await envs.create_env(tx, f"e{n}", {"name": f"N{n}", "value": str(n)}, n)
            await tasks.create_task(tx, f"t{n}", _task(f"t{n}"), n)
        for n in (1, 2):
            await subscriptions.create(tx, f"s{n}", {
                "name": f"s{n}", "type": "public-repo", "url": f"https://x.org/{n}.git",
                "alias": f"s{n}", "extensions": ["py"]}, n)
    out: dict[str, Any] = {}
    async with db.write() as tx:
        out["by_nums"] = [e.id for e in await envs.envs_by_nums(tx, [4, 2, 9])]
        out["by_nums_none"] = await envs.envs_by_nums(tx, [])
        await envs.require_envs(tx, ["e1", "e3", "e1"])
        with pytest.raises(rows.NotFound):
            await envs.require_envs(tx, ["e1", "nope"])
        out["enabled"] = [await envs.set_envs_enabled(tx, ["e1", "e2", "nope"], False, 10),
                          await envs.set_envs_enabled(tx, ["e1", "e2"], False, 11),
                          await envs.set_envs_enabled(tx, ["e2"], True, 12)]
        out["renamed"] = await envs.rename_envs(tx, ["e3", "e4"], "SAME", 13)
        out["deleted"] = [await envs.delete_envs(tx, ["e4", "nope"]),
                          await envs.delete_envs(tx, [])]
        out["envs"] = [(e.id, e.name, e.enabled, e.updated_at_ms)
                       for e in await envs.list_envs(tx)]
        out["tasks"] = sorted(await tasks.tasks_by_ids(tx, ["t3", "t1", "nope"]))
        out["subs"] = {n: s.id for n, s in (await subscriptions.by_nums(tx, [2, 1, 7])).items()}
        out["commands"] = await subscriptions.task_ids_by_command(
            tx, ["run t2", "run t4", "nothing"])
    return out


async def test_in_lists_give_the_same_results(litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _batches)
    assert got["by_nums"] == ["e2", "e4"] and got["by_nums_none"] == []
    assert got["enabled"] == [2, 0, 1] and got["renamed"] == 2 and got["deleted"] == [1, 0]
    assert got["envs"] == [("e1", "N1", False, 10), ("e2", "N2", True, 12),
                           ("e3", "SAME", True, 13)]
    assert got["tasks"] == ["t1", "t3"] and got["subs"] == {1: "s1", 2: "s2"}
    assert got["commands"] == {"run t2": "t2", "run t4": "t4"}


async def _retention(db: Any) -> dict[str, Any]:
    """The plain-SQL queries of db/retention_queries.py (not the PRAGMA upkeep)."""
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1", keep_runs=2), 1)
        await tasks.create_task(tx, "t2", _task("t2", keep_days=3), 1)
        for n in range(1, 6):
            await runs.create_run(tx, f"r{n}", "t1", Trigger.MANUAL, n)
        await runs.create_run(tx, "r6", "t2", Trigger.MANUAL, 6)
        for n in range(1, 5):
            await _spawn(tx, f"r{n}", f"a{n}", 10 + n)
            await _finish(tx, f"r{n}", f"a{n}", 20 + n)
        await _spawn(tx, "r6", "a6", 30)
        for n in range(1, 4):
            await journal.journal_delete(tx, f"a{n}")
    out: dict[str, Any] = {}
    async with db.write() as tx:
        out["tasks_page"] = [await retention_queries.tasks_page(tx, 0, 10),
                             await retention_queries.tasks_page(tx, 1, 1)]
        out["candidates"] = [await retention_queries.run_candidates(tx, "t1", 2, c, 10)
                             for c in (0, 1000)]
        out["unsized"] = [r.attempt_id for r in await retention_queries.unsized_logs(tx, 10)]
        await retention_queries.set_sizes(tx, [("a1", 100), ("a2", 50)])
        out["unsized_after"] = await retention_queries.unsized_logs(tx, 10)
        out["active_logs"] = await retention_queries.active_logs(tx, 10)
        out["totals"] = await retention_queries.log_totals(tx)
        out["eviction"] = [await retention_queries.eviction_candidates(tx, "", 10),
                           await retention_queries.eviction_candidates(
                               tx, "a1", 10, keep_newest=False)]
        out["evicted"] = await retention_queries.evict_logs(
            tx, ["a1", "a6", "nope"], "SIZE_CAP", 50)
        out["log_eviction"] = [await retention_queries.log_eviction(tx, f"t/{a}.log")
                               for a in ("a1", "a2")]
        deleted = await retention_queries.delete_runs(tx, ["r4", "r2", "r5", "r1", "nope"], 60)
        out["deleted"] = (deleted.runs, deleted.attempts, sorted(deleted.log_paths),
                          sorted(deleted.run_ids))
        out["pending"] = await retention_queries.pending_deletions(tx, 10)
        await retention_queries.forget_deletions(tx, ["t/a1.log"])
        await retention_queries.enqueue_deletions(tx, ["t/a2.log"], 61)  # already queued
        out["pending_after"] = (await retention_queries.pending_deletions(tx, 10),
                                await retention_queries.count_pending_deletions(tx))
        out["unheld"] = await retention_queries.unheld_queued_runs(tx, 10)
        out["held"] = [await retention_queries.mark_held(tx, r, {"why": "disk"}, 70)
                       for r in ("r5", "r5", "r4")]
        out["unheld_after"] = await retention_queries.unheld_queued_runs(tx, 10)
        out["count_runs"] = await retention_queries.count_runs(tx)
        out["runs_left"] = [r.id for r in await runs.list_runs(
            tx, task_id=None, status=None, before=None, limit=10)]
    return out


async def test_retention_queries_give_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _retention)
    pages = got["tasks_page"]
    assert [(p.num, p.id, p.keep_runs, p.keep_days) for p in pages[0]] == [
        (1, "t1", 2, None), (2, "t2", None, 3)]
    assert [p.id for p in pages[1]] == ["t2"]
    assert [[(c.id, c.rank, c.finished_at_ms) for c in cands]
            for cands in got["candidates"]] == [
        [("r1", 4, 21), ("r2", 3, 22)], [("r1", 4, 21), ("r2", 3, 22), ("r3", 2, 23)]]
    assert got["unsized"] == ["a1", "a2", "a3", "a4"]
    assert [r.attempt_id for r in got["unsized_after"]] == ["a3", "a4"]
    assert got["active_logs"] == ["t/a6.log"]
    totals = got["totals"]
    assert (totals.live, totals.sized_bytes, totals.unsized) == (5, 150, 3)
    older, every = got["eviction"]
    assert [(r.attempt_id, r.size_bytes, r.newest) for r in older] == [
        ("a1", 100, False), ("a2", 50, False), ("a3", None, False)]
    assert [(r.attempt_id, r.newest) for r in every] == [
        ("a2", False), ("a3", False), ("a4", True)]
    assert got["evicted"] == [("a1", "t/a1.log")]
    assert got["log_eviction"] == [("SIZE_CAP", 50), None]
    assert got["deleted"] == (2, 2, ["t/a2.log"], ["r1", "r2"])
    assert got["pending"] == ["t/a1.log", "t/a2.log"]
    assert got["pending_after"] == (["t/a2.log"], 1)
    assert got["unheld"] == ["r5"] and got["held"] == [True, False, False]
    assert got["unheld_after"] == [] and got["count_runs"] == 4
    assert got["runs_left"] == ["r6", "r5", "r4", "r3"]
