"""The PostgreSQL backend (db/pg.py) against a real throwaway cluster (tests/_pg.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import _pg
from qledge import ids, transitions
from qledge.db import (
    apps,
    attempts,
    conc_runs,
    dependencies,
    envs,
    errors,
    events,
    gauges,
    imports,
    journal,
    leases,
    notifications,
    pg,
    policies,
    retention_queries,
    rows,
    runs,
    schedule,
    subscriptions,
    tasks,
)
from qledge.db.sqlite import Database
from qledge.importer import plan as qinglong_plan
from qledge.importer.source import QlDependency
from qledge.model import CancelReason, NewEvent, RunStatus, Trigger
from qledge.node import Node
from qledge.notifications import rules as notify
from qledge.subscriptions import spec as subscription_spec
from qledge.tasks.writable import TaskFields, task_fields

from support import free_port


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
    assert isinstance(exc, errors.IntegrityViolation) and isinstance(exc, errors.StorageError)
    assert not isinstance(exc, errors.Transient) and not errors.is_full(exc)
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
    assert info.value.sqlstate == "55P03" and isinstance(info.value, errors.Transient)
    assert not isinstance(info.value, errors.IntegrityViolation)


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
    assert info.value.sqlstate == "25006" and not isinstance(info.value, errors.Transient)
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
        created = await tasks.create_task(tx, "t1", TaskFields(
            name="backup", command="echo hi", env={"A": "1"}, labels=["x"],
            overlap="queue", retry_on=["lost", "failed"]), 10)
        second = await tasks.create_task(tx, "t2", TaskFields(
            name="other", command="true", env={}, labels=[]), 11)
        updated = await tasks.update_task(tx, "t1", TaskFields(name="nightly backup",
                                                     enabled=False), 12)
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
        await tasks.create_task(tx, "t1", TaskFields(name="t", command="true", env={},
                                           labels=[]), 1)
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
        await tasks.create_task(tx, "t1", TaskFields(name="t", command="true", env={},
                                           labels=[]), 1)
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


async def _on_both(litedb: Database, pgdb: pg.Database, scenario: Any) -> Any:
    """`scenario(db)` on a fresh SQLite and a fresh PostgreSQL database: what it returns
    must be equal (SQLite is the reference); that result, for the caller's own checks."""
    lite = await scenario(litedb)
    assert await scenario(pgdb) == lite
    return lite


def _task(name: str, **more: Any) -> TaskFields:
    return task_fields({"name": name, "command": f"run {name}", "env": {}, "labels": [], **more})


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
        # The owner's volume of file_deletions: `logs` on SQLite, `logs@node-1` on
        # PostgreSQL (a fleet node unlinks only its own logs).
        vol = retention_queries.volume(tx, "node-1")
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
            tx, ["a1", "a6", "nope"], "SIZE_CAP", 50, vol)
        out["log_eviction"] = [await retention_queries.log_eviction(tx, f"t/{a}.log")
                               for a in ("a1", "a2")]
        deleted = await retention_queries.delete_runs(tx, ["r4", "r2", "r5", "r1", "nope"], 60)
        out["deleted"] = (deleted.runs, deleted.attempts, sorted(deleted.log_paths),
                          sorted(deleted.run_ids))
        out["pending"] = await retention_queries.pending_deletions(tx, 10, vol)
        await retention_queries.forget_deletions(tx, ["t/a1.log"], vol)
        await retention_queries.enqueue_deletions(tx, ["t/a2.log"], 61, vol)  # already queued
        out["pending_after"] = (await retention_queries.pending_deletions(tx, 10, vol),
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


class _Ids:
    """A stand-in for ids.uuid7: the same ids, in the same (sortable) order, on each
    backend, so the results compare whole."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, now_ms: int | None = None) -> str:
        self.n += 1
        return f"id{self.n:04d}"


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> _Ids:
    made = _Ids()
    monkeypatch.setattr(ids, "uuid7", made)
    return made


async def _notifications(db: Any, made: _Ids) -> dict[str, Any]:
    """Channels, rules, the outbox and what a terminal run's message reads."""
    made.n = 0
    out: dict[str, Any] = {}
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        await tasks.create_task(tx, "t2", _task("t2"), 1)
        for n in range(1, 6):
            await runs.create_run(tx, f"r{n}", "t1", Trigger.MANUAL, n)
        for n, code in ((1, 0), (2, 1), (4, 1)):
            await _spawn(tx, f"r{n}", f"a{n}", 10 + n)
            run = await runs.get_run(tx, f"r{n}")
            att = await attempts.get_attempt(tx, f"a{n}")
            await runs.apply(tx, run, transitions.complete(
                run, att, exit_code=code, finished_at_ms=20 + n), 20 + n)
        await runs.end_if_queued(tx, await runs.get_run(tx, "r3"), 23)
        c1 = await notifications.add_channel(tx, "one", "https://a/1", True, 30)
        c2 = await notifications.add_channel(tx, "two", "https://a/2", False, 30)
        c3 = await notifications.add_channel(tx, "three", "https://a/3", True, 31)
        out["updated"] = await notifications.update_channel(
            tx, c2.id, {"name": "deux", "enabled": True}, 32)
        await notifications.update_channel(tx, c3.id, {"enabled": False}, 33)
        with pytest.raises(notifications.NotFound):
            async with tx.savepoint():
                await notifications.update_channel(tx, "nope", {"enabled": False}, 33)
        out["default_rules"] = await notifications.global_rules(tx)
        await notifications.set_rules(tx, notifications.GLOBAL,
                                      notify.Rules(streak=5), 40)
        await notifications.set_rules(tx, notifications.GLOBAL,  # the upsert
                                      notify.Rules(streak=2, log_lines=3), 41)
        await notifications.set_rules(tx, "t1", notify.RulesPatch(muted=True), 42)
        await notifications.set_rules(tx, "t2", notify.RulesPatch(streak=1), 42)
        await notifications.set_rules(tx, "gone", notify.RulesPatch(muted=False), 42)
        await notifications.set_rules(tx, "t2", None, 43)
        out["enqueued"] = [
            await notifications.enqueue(
                tx, channel_ids=[c1.id, c3.id], kind="run", run_id="r2", task_id="t1",
                title="failed", body="b", log_lines=3, due_at_ms=100, now_ms=50),
            await notifications.enqueue(
                tx, channel_ids=[c1.id], kind="disk", run_id=None, task_id=None,
                title="disk", body="full", log_lines=0, due_at_ms=60, now_ms=51),
            await notifications.enqueue(
                tx, channel_ids=[c2.id], kind="run", run_id="r4", task_id="t1",
                title="failed", body="b", log_lines=0, due_at_ms=100, now_ms=52)]
    async with db.write() as tx:
        out["channels"] = [await notifications.channels(tx),
                           await notifications.channels(tx, enabled_only=True)]
        out["channel"] = await notifications.channel(tx, c1.id)
        out["named"] = [await notifications.channel_named(tx, n) for n in ("deux", "two")]
        out["rules"] = (await notifications.global_rules(tx),
                        await notifications.task_rules(tx, "t1"),
                        await notifications.task_rules(tx, "t2"),
                        await notifications.all_task_rules(tx))
        out["due"] = [[m.id for m in await notifications.due(tx, now, lim)]
                      for now, lim in ((59, 10), (60, 10), (100, 2), (100, 10))]
        out["next_due"] = await notifications.next_due_ms(tx)
        m1, m2 = out["enqueued"][0]
        m3, m4 = out["enqueued"][1][0], out["enqueued"][2][0]
        await notifications.mark_sent(tx, m3, 61)
        await notifications.mark_sent(tx, m3, 62)  # not pending any more: no change
        await notifications.mark_failed(tx, m1, "503", 300, 101)
        await notifications.mark_failed(tx, m4, "410", None, 102)
        out["next_due_after"] = await notifications.next_due_ms(tx)
        out["counts"] = await notifications.counts(tx)
        await notifications.delete_channel(tx, c3.id, 103)  # its pending m2 is given up
        with pytest.raises(notifications.NotFound):
            async with tx.savepoint():
                await notifications.delete_channel(tx, c3.id, 104)
        out["recent"] = await notifications.recent(tx, 10)
        out["recent_run"] = [[m.id for m in await notifications.recent(tx, 10, run_id=r)]
                             for r in ("r2", "r4", "r1")]
        out["counts_after"] = await notifications.counts(tx)
        out["pruned"] = [await notifications.prune(tx, 50, 10),
                         await notifications.prune(tx, 60, 1),
                         await notifications.prune(tx, 60, 10)]
        out["left"] = [m.id for m in await notifications.recent(tx, 10)]
        out["ids"] = [c1.id, c2.id, c3.id, m1, m2, m3, m4]
        out["brief"] = [await notifications.task_brief(tx, t) for t in ("t2", "nope")]
        out["failures"] = [await notifications.failures_before(tx, "t1", "r5", n)
                           for n in (10, 1)]
        out["failures_r2"] = await notifications.failures_before(tx, "t1", "r2", 10)
        out["started_before"] = [
            await notifications.attempt_started_before(tx, r, before)
            for r, before in (("r2", 13), ("r2", 12), ("r5", 100))]
        out["log_path"] = [await notifications.last_log_path(tx, r) for r in ("r4", "r5")]
        # 0028: the rate limit's hold and digest, and the settings row
        (h1, h2) = await notifications.enqueue(
            tx, channel_ids=[c1.id, c1.id], kind="run", run_id="r1", task_id="t1", title="h",
            body="b", log_lines=0, due_at_ms=200, now_ms=200, notify_type="failure")
        await notifications.mark_sent(tx, h1, 210)
        await notifications.hold(tx, h2, 211, 900)
        out["sent_since"] = [await notifications.sent_since(tx, t) for t in (205, 211)]
        out["held"] = [m.id for m in await notifications.held(tx, c1.id)]
        await notifications.digested(tx, [h2], h1, 950)
        got_h2 = await notifications.get_message(tx, h2)
        out["h2"] = (got_h2.state, got_h2.digest_id, got_h2.held_at_ms, got_h2.notify_type)
        out["hold_ids"] = (h1, c1.id)
        out["counts_0028"] = await notifications.counts(tx)
        out["settings"] = [await notifications.settings(tx)]
        await notifications.set_settings(tx, notify.Settings(language="zh-CN"), 1)
        await notifications.set_settings(tx, notify.Settings(base_url="http://pi"), 2)
        out["settings"].append(await notifications.settings(tx))
    return out


async def test_notification_queries_give_the_same_results(
        litedb: Database, pgdb: pg.Database, fixed_ids: _Ids) -> None:
    got = await _on_both(litedb, pgdb, lambda db: _notifications(db, fixed_ids))
    c1, c2, c3, m1, m2, m3, m4 = got["ids"]
    assert (got["updated"].id, got["updated"].name, got["updated"].enabled,
            got["updated"].updated_at_ms) == (c2, "deux", True, 32)
    every, enabled = got["channels"]
    assert [(c.id, c.name, c.enabled) for c in every] == [
        (c1, "one", True), (c2, "deux", True), (c3, "three", False)]
    assert [c.id for c in enabled] == [c1, c2]
    assert got["channel"].url == "https://a/1" and got["named"] == [got["updated"], None]
    assert got["default_rules"] == notify.Rules()
    assert got["rules"] == (notify.Rules(streak=2, log_lines=3),
                            notify.RulesPatch(muted=True), None,
                            {"t1": notify.RulesPatch(muted=True)})
    assert got["enqueued"] == [[m1, m2], [m3], [m4]]
    assert got["due"] == [[], [m3], [m3, m1], [m3, m1, m2, m4]]
    assert (got["next_due"], got["next_due_after"]) == (60, 100)
    assert got["counts"] == {"pending": 2, "sent": 1, "given_up": 1, "held": 0,
                             "digested": 0}
    assert got["counts_after"] == {"pending": 1, "sent": 1, "given_up": 2, "held": 0,
                                   "digested": 0}
    h1, hc = got["hold_ids"]
    assert got["sent_since"] == [{hc: (1, 210)}, {}]
    assert len(got["held"]) == 1  # h2, held; h1 was sent
    assert got["h2"] == ("sent", h1, 211, "failure")
    assert got["counts_0028"]["digested"] == 1
    assert got["settings"] == [notify.Settings(), notify.Settings(base_url="http://pi")]
    recent = {m.id: m for m in got["recent"]}
    assert [m.id for m in got["recent"]] == [m4, m3, m2, m1]
    assert (recent[m1].state, recent[m1].tries, recent[m1].next_at_ms,
            recent[m1].last_error) == ("pending", 1, 300, "503")
    assert (recent[m2].state, recent[m2].done_at_ms, recent[m2].last_error) == (
        "given_up", 103, "channel deleted")
    assert (recent[m3].state, recent[m3].tries, recent[m3].done_at_ms) == ("sent", 1, 61)
    assert (recent[m4].state, recent[m4].tries, recent[m4].last_error) == (
        "given_up", 1, "410")
    assert got["recent_run"] == [[m2, m1], [m4], []]
    assert got["pruned"] == [0, 1, 2] and got["left"] == [m1]
    assert got["brief"] == [("t2", 2), None]
    assert got["failures"] == [2, 1] and got["failures_r2"] == 1
    assert got["started_before"] == [True, False, False]
    assert got["log_path"] == ["t/a4.log", None]


def _sub_fields(n: int, **more: Any) -> dict[str, Any]:
    return {"name": f"s{n}", "type": "public-repo", "url": f"https://x.org/{n}.git",
            "alias": f"s{n}", "extensions": ["py", "js"], **more}


async def _subscriptions(db: Any) -> dict[str, Any]:
    """The rows, the pull's bookkeeping and the links of db/subscriptions.py."""
    out: dict[str, Any] = {}
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        out["created"] = [
            await subscriptions.create(tx, "s1", _sub_fields(
                1, branch="main", secret="hunter2", username="me", auto_add=False,
                caps=subscription_spec.Caps(files=7)), 10),
            await subscriptions.create(tx, "s2", _sub_fields(2, enabled=False), 11),
            await subscriptions.create(tx, "s3", _sub_fields(3), 12)]
        with pytest.raises(errors.IntegrityViolation):
            async with tx.savepoint():  # the alias is unique
                await subscriptions.create(tx, "s4", _sub_fields(4, alias="s1"), 13)
        out["updated"] = [
            await subscriptions.update(tx, "s2", {"enabled": True, "extensions": ["sh"],
                                                  "pull_task_id": "t1"}, 20),
            await subscriptions.update(tx, "s3", {}, 21)]
        with pytest.raises(rows.NotFound):
            await subscriptions.update(tx, "nope", {"name": "x"}, 22)
        await subscriptions.mark_pulled(tx, "s1", "run-a")
        await subscriptions.mark_pulled(tx, "s3", "run-b")
        out["sync_due"] = [s.id for s in await subscriptions.sync_due(tx)]
        await subscriptions.mark_pulled(tx, "s3", "run-c")  # a newer pull ended meanwhile
        await subscriptions.synced(tx, "s1", "run-a", {"added": 2, "paths": ["a.py"]})
        await subscriptions.synced(tx, "s3", "run-b", {"added": 0})
        for path, task_id in (("a.py", "t1"), ("b.py", None)):
            await subscriptions.put_link(tx, "s1", subscriptions.Link(
                path=path, task_id=task_id, applied_schedule="0 1 * * *",
                applied_name=path, disabled_by_pull=False))
        await subscriptions.put_link(tx, "s1", subscriptions.Link(  # the upsert
            path="b.py", task_id="t1", applied_schedule=None, applied_name="B",
            disabled_by_pull=True))
        await subscriptions.put_link(tx, "s2", subscriptions.Link(
            path="c.py", task_id=None, applied_schedule=None, applied_name="c",
            disabled_by_pull=False))
        await subscriptions.drop_link(tx, "s2", "c.py")
        await subscriptions.drop_link(tx, "s2", "nope.py")
    async with db.write() as tx:
        out["get"] = await subscriptions.get(tx, "s1")
        out["list"] = await subscriptions.list_all(tx)
        out["list_one"] = [s.id for s in await subscriptions.list_all(tx, limit=1)]
        out["alias_taken"] = [await subscriptions.alias_taken(tx, a, o)
                              for a, o in (("s1", ""), ("s1", "s1"), ("s9", ""))]
        out["secret"] = [await subscriptions.secret_of(tx, s) for s in ("s1", "s2", "nope")]
        out["by_pull_task"] = [await subscriptions.by_pull_task(tx, t) for t in ("t1", "t9")]
        out["sync_due_after"] = [s.id for s in await subscriptions.sync_due(tx)]
        out["links"] = [await subscriptions.links(tx, s) for s in ("s1", "s2")]
        await subscriptions.delete(tx, "s1")  # its links go with it
        with pytest.raises(rows.NotFound):
            await subscriptions.delete(tx, "s1")
        with pytest.raises(rows.NotFound):
            await subscriptions.get(tx, "s1")
        out["links_deleted"] = await subscriptions.links(tx, "s1")
        out["left"] = [s.id for s in await subscriptions.list_all(tx)]
    return out


async def test_subscription_queries_give_the_same_results(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _subscriptions)
    s1, s2, s3 = got["created"]
    assert [s.num for s in got["created"]] == [1, 2, 3]
    assert (s1.branch, s1.username, s1.has_secret, s1.auto_add, s1.auto_delete,
            s1.extensions, s1.caps.files, s1.version) == (
        "main", "me", True, False, True, ["py", "js"], 7, 1)
    assert (s2.enabled, s2.has_secret, s2.caps) == (False, False, subscription_spec.Caps())
    new2, same3 = got["updated"]
    assert (new2.enabled, new2.extensions, new2.pull_task_id, new2.version,
            new2.updated_at_ms) == (True, ["sh"], "t1", 2, 20)
    assert same3 == s3
    assert got["sync_due"] == ["s1", "s3"] and got["sync_due_after"] == ["s3"]
    got1 = got["get"]
    assert (got1.sync_run_id, got1.last_run_id, got1.last_sync) == (
        None, "run-a", {"added": 2, "paths": ["a.py"]})
    assert [s.id for s in got["list"]] == ["s1", "s2", "s3"] and got["list_one"] == ["s1"]
    s3_now = got["list"][2]
    assert (s3_now.sync_run_id, s3_now.last_run_id, s3_now.last_sync) == (
        "run-c", "run-c", {"added": 0})
    assert got["alias_taken"] == [True, False, False]
    assert got["secret"] == ["hunter2", None, None]
    assert got["by_pull_task"] == [got["list"][1], None]
    assert got["links"] == [
        {"a.py": subscriptions.Link(path="a.py", task_id="t1", applied_schedule="0 1 * * *",
                                    applied_name="a.py", disabled_by_pull=False),
         "b.py": subscriptions.Link(path="b.py", task_id="t1", applied_schedule=None,
                                    applied_name="B", disabled_by_pull=True)},
        {}]
    assert got["links_deleted"] == {} and got["left"] == ["s2", "s3"]


async def _imports(db: Any, made: _Ids) -> dict[str, Any]:
    """An import of QingLong's objects: the target it is planned against, a plan
    applied in one transaction with its mapping, the dependencies declared."""
    made.n = 0
    src = "qinglong:test"
    out: dict[str, Any] = {}

    def pull_task(sub: subscriptions.Subscription) -> dict[str, Any]:
        return _task(f"pull {sub.alias}")

    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1", schedule="0 1 * * *"), 1)
        await envs.create_env(tx, "e1", {"name": "A", "value": "1"}, 1)
        await subscriptions.create(tx, "s1", _sub_fields(1), 1)
        await apps.create_app(tx, app_id="a1", name="app", client_id="cid",
                              secret_hash=b"\x01\x02", scopes=["envs"], now_ms=1)
        await notifications.add_channel(tx, "ch", "https://hook/1", True, 1)
        out["before"] = await imports.target(
            tx, src, files={"x/a.py": {"size": 3}}, folders=["x"], log_files=["l/1.log"])
        Item, Action = qinglong_plan.Item, qinglong_plan.Action
        plan = qinglong_plan.Plan(source=src, root="/ql", apply=True, on_conflict=None, items=[
            Item(kind="cron", key="1", label="c1", action=Action.CREATE, record=True,
                 fields={"name": "c1", "command": "task c1.js", "schedule": "5 * * * *",
                         "labels": ["ql"]}, source_fp="f1", written_fp="w1"),
            Item(kind="cron", key="2", label="c2", action=Action.CHANGE, target_id="t1",
                 record=True, fields={"name": "t1 renamed"}, source_fp="f2"),
            Item(kind="env", key="E", label="E", action=Action.CREATE, record=True,
                 fields={"name": "E", "value": "v", "remarks": "r"}),
            Item(kind="env", key="A", label="A", action=Action.SKIP, target_id="e1",
                 record=True, source_fp="same"),
            Item(kind="env", key="B", label="B", action=Action.SKIP, reason="no"),
            Item(kind="subscription", key="1", label="s1", action=Action.CHANGE,
                 target_id="s1", record=True, fields={"name": "s1 renamed"}),
            Item(kind="subscription", key="2", label="s2", action=Action.CREATE,
                 record=True, fields=_sub_fields(2)),
            Item(kind="app", key="1", label="app", action=Action.CHANGE, target_id="a1",
                 record=True, fields={"name": "app2", "client_id": "cid",
                                      "secret_hash": "0102"}),
            Item(kind="app", key="2", label="new", action=Action.CREATE, record=True,
                 fields={"name": "new", "client_id": "cid2", "secret_hash": "ff",
                         "scopes": ["crons"]}),
            Item(kind="channel", key="ch", label="ch", action=Action.CHANGE,
                 target_id="id0001", record=True, fields={"enabled": False}),
            Item(kind="channel", key="ch2", label="ch2", action=Action.CREATE, record=True,
                 fields={"name": "ch2", "url": "https://hook/2", "enabled": True}),
            Item(kind="script", key="a.py", label="a.py", action=Action.CREATE, record=True,
                 fields={"path": "x/a.py"}),
            Item(kind="dependency", key="9", label="d", action=Action.CREATE, record=True),
        ])
        out["written"] = await imports.apply(tx, plan, 10, pull_task=pull_task)
        deps = [QlDependency(id=1, name="requests=2.0", type=1, remark="http"),
                QlDependency(id=2, name="left-pad", type=0, remark=""),
                QlDependency(id=3, name="not a spec!", type=1, remark=""),
                QlDependency(id=4, name="curl", type=2, remark=""),
                QlDependency(id=5, name="Requests", type=1, remark="")]
        out["deps"] = await imports.dependency_items(tx, src, deps, 11, apply=True, npm=False)
    async with db.write() as tx:
        out["deps_again"] = await imports.dependency_items(tx, src, deps, 12, apply=False,
                                                           npm=True)
        await imports.remember(tx, src, qinglong_plan.Item(  # the upsert
            kind="cron", key="1", label="c1", action=Action.CHANGE, source_fp="f1b",
            written_fp="w1b"), out["written"]["cron:1"], 13)
        out["mapped"] = await imports.mapped(tx, src)
        out["mapped_other"] = await imports.mapped(tx, "qinglong:other")
        out["after"] = await imports.target(tx, src, files={}, folders=[], log_files=[])
        out["declared"] = [(d.type, d.name, d.spec) for d in await dependencies.list_all(tx)]
    return out


async def test_import_queries_give_the_same_results(
        litedb: Database, pgdb: pg.Database, fixed_ids: _Ids) -> None:
    got = await _on_both(litedb, pgdb, lambda db: _imports(db, fixed_ids))
    before, after = got["before"], got["after"]
    assert before.mapped == {} and before.tasks == {"run t1": ["t1"]}
    assert before.objects["a1"] == {"name": "app", "client_id": "cid",
                                    "secret_hash": "0102", "scopes": ["envs"]}
    assert before.objects["s1"]["extensions"] == ["py", "js"]
    assert before.objects["s1"]["auto_add"] is True and before.objects["x/a.py"] == {"size": 3}
    assert (before.envs, before.aliases, before.channels_by_name, before.log_files) == (
        {"A": [("e1", "1")]}, {"s1": "s1"}, {"ch": "id0001"}, ["l/1.log"])
    assert got["written"] == {
        "cron:1": "id0002", "cron:2": "t1", "env:E": "id0003", "subscription:1": "s1",
        "subscription:2": "id0005", "app:1": "a1", "app:2": "id0007", "channel:ch": "id0001",
        "channel:ch2": "id0008", "script:a.py": "x/a.py"}
    assert [(i.key, i.action, i.target_id) for i in got["deps"]] == [
        ("1", qinglong_plan.Action.CREATE, "id0009"), ("2", qinglong_plan.Action.SKIP, None),
        ("3", qinglong_plan.Action.SKIP, None), ("5", qinglong_plan.Action.SKIP, None)]
    assert got["deps"][3].reason == "not imported: qledge already declares this package"
    assert [(i.key, i.action, i.reason) for i in got["deps_again"][:2]] == [
        ("1", qinglong_plan.Action.SKIP, "imported before"),
        ("2", qinglong_plan.Action.CREATE, "")]
    assert got["declared"] == [("python", "requests", "requests==2.0")]
    assert set(got["mapped"]) == {
        "app:1", "app:2", "channel:ch", "channel:ch2", "cron:1", "cron:2", "dependency:1",
        "env:A", "env:E", "script:a.py", "subscription:1", "subscription:2"}
    assert got["mapped"]["cron:1"] == qinglong_plan.Mapped(
        target_id="id0002", source_fp="f1b", written_fp="w1b")
    assert got["mapped"]["env:A"] == qinglong_plan.Mapped(
        target_id="e1", source_fp="same", written_fp="")
    assert got["mapped_other"] == {} and after.mapped == got["mapped"]
    assert after.tasks == {"run t1": ["t1"], "task c1.js": ["id0002"],
                           "run pull s1": ["id0004"], "run pull s2": ["id0006"]}
    assert after.objects["t1"]["name"] == "t1 renamed"
    assert after.objects["id0002"]["labels"] == ["ql"]
    assert after.objects["s1"]["name"] == "s1 renamed"
    assert after.aliases == {"s1": "s1", "s2": "id0005"}
    assert after.envs == {"A": [("e1", "1")], "E": [("id0003", "v")]}
    assert after.objects["id0003"]["remarks"] == "r"
    assert after.apps_by_client == {"cid": "a1", "cid2": "id0007"}
    assert after.objects["a1"]["name"] == "app2" and after.objects["id0007"]["secret_hash"] == "ff"
    assert after.objects["id0001"]["enabled"] is False
    assert after.channel_urls == {"https://hook/1": "id0001", "https://hook/2": "id0008"}


# -- the hot queries' plans on PostgreSQL (test_migrate's test_hot_queries_use_indexes) --

class _Explain:
    """Stands in for a `Tx` (dialect postgresql): each statement is explained on the real
    transaction, not run; its plan (FORMAT JSON) is kept under its SQL."""

    dialect = "postgresql"

    def __init__(self, tx: pg.Tx) -> None:
        self.tx = tx
        self.plans: dict[str, Any] = {}

    async def _explain(self, sql: str, params: Any) -> None:
        row = await self.tx.one(f"EXPLAIN (FORMAT JSON) {sql}", params)
        assert row is not None
        plan = row[0]
        self.plans[" ".join(sql.split())] = json.loads(plan) if isinstance(plan, str) else plan

    async def execute(self, sql: str, params: Any = ()) -> int:
        await self._explain(sql, params)
        return 0

    async def one(self, sql: str, params: Any = ()) -> None:
        await self._explain(sql, params)
        return None

    async def all(self, sql: str, params: Any = ()) -> list[Any]:
        await self._explain(sql, params)
        return []


def _scans(node: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(node type, table, index) of every scan in a plan tree."""
    out = []
    if "Relation Name" in node or "Index Name" in node:  # a bitmap index scan names no table
        out.append((node["Node Type"], node.get("Relation Name", ""), node.get("Index Name")))
    for child in node.get("Plans", []):
        out.extend(_scans(child))
    return out


async def test_hot_queries_use_the_partial_indexes_on_postgresql(pgdb: pg.Database) -> None:
    async with pgdb.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
        for n in range(1, 41):
            await runs.create_run(tx, f"r{n:02d}", "t1", Trigger.MANUAL, n)
        for n in range(1, 31):
            await _spawn(tx, f"r{n:02d}", f"a{n:02d}", 100 + n, deadline_at_ms=500)
            if n <= 25:
                await _finish(tx, f"r{n:02d}", f"a{n:02d}", 200 + n)
            if n <= 20:
                await journal.journal_delete(tx, f"a{n:02d}")
    async with pgdb.write() as tx:
        await tx.execute("ANALYZE")
        # A few dozen rows fit in one page, where a sequential scan is the cheaper plan
        # and PostgreSQL rightly takes it; with it priced out, the plan shows whether an
        # index can serve the query at all (a partial index whose predicate the query
        # does not imply cannot, and the scan stays).
        await tx.execute("SET LOCAL enable_seqscan = off")
        ex = _Explain(tx)
        xt: Any = ex
        await attempts.active_attempts_page(xt, "node-1", "", 64)
        await attempts.expired_attempts(xt, "node-1", 600, 64)
        await attempts.attempts_without_journal(xt, "node-1", 64)
        await attempts.count_active_attempts(xt, "node-1")
        await journal.journal_page(xt, "", 64)
        await journal.journal_ended_page(xt, "", 64)
        await journal.journal_due(xt, 1, 33)
        await journal.journal_age_in_spawn(xt, 1)
        await runs.queued_runs(xt, 8, 1)
        await runs.queued_runs(xt, 8, 1, Node(name="n1", labels=("node=n1", "gpio")))
        await runs.next_not_before(xt, 1)
        await runs.list_runs(xt, task_id=None, status="queued", before=None, limit=50)
    assert len(ex.plans) == 12, list(ex.plans)
    seq = {sql: scans for sql, plan in ex.plans.items()
           if (scans := [s for s in _scans(plan[0]["Plan"]) if s[0] == "Seq Scan"
                         and s[1] in ("runs", "run_attempts")])}
    assert seq == {}
    indexes = {sql: {s[2] for s in _scans(plan[0]["Plan"]) if s[2]}
               for sql, plan in ex.plans.items()}
    # The running runs through runs_active, never another index of runs (their attempts
    # by run_id, or — tiny tables, seq scans priced out — in id order by the primary key).
    through = [ix for sql, ix in indexes.items()
               if "JOIN run_attempts a ON a.run_id = r.id" in sql]
    assert len(through) == 4, through
    assert all({i for i in ix if i.startswith("runs")} == {"runs_active"} for ix in through)
    # The journal's walks through the partial attempts_journal.
    walks = [ix for sql, ix in indexes.items() if "a.receipt_state IS NOT NULL" in sql]
    assert len(walks) == 4 and all("attempts_journal" in ix for ix in walks), walks
    # Queued runs through runs_active (list_runs's `status = ?`: a custom plan, whose
    # bound value implies the index's predicate).
    queued = [ix for sql, ix in indexes.items() if sql.startswith("SELECT")
              and "FROM runs WHERE" in sql]  # queued_runs (both), next_not_before, list_runs
    assert len(queued) == 4 and all(ix == {"runs_active"} for ix in queued), queued
