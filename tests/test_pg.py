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
    dependencies,
    envs,
    errors,
    events,
    migrate,
    migrate_pg,
    pg,
    policies,
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
