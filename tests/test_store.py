from __future__ import annotations

import asyncio

import msgspec
import pytest

from qledge import ids, transitions
from qledge.db import attempts, events, rows, runs, tasks
from qledge.db.sqlite import Database, Tx
from qledge.model import CancelReason, NewEvent, Run, RunStatus, Trigger
from qledge.tasks.writable import TaskFields, task_fields


async def _task_and_run(db: Database) -> tuple[str, str]:
    async with db.write() as tx:
        task = await tasks.create_task(
            tx, ids.uuid7(), TaskFields(name="t", command="true", env={}, labels=[]), 1)
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
    return task.id, run.id


async def test_cas_rejects_a_stale_version(db: Database) -> None:
    _, run_id = await _task_and_run(db)
    async with db.read() as tx:
        stale = await runs.get_run(tx, run_id)
    first = transitions.request_cancel(stale, CancelReason.USER, 10)
    assert first is not None
    async with db.write() as tx:
        await runs.apply(tx, stale, first, 10)
    second = transitions.cancel_queued(stale, 11)  # computed from the old version
    with pytest.raises(rows.Conflict):
        async with db.write() as tx:
            await runs.apply(tx, stale, second, 11)
    async with db.read() as tx:
        run = await runs.get_run(tx, run_id)
        evs = await events.list_events(tx, run_id)
    assert run.status is RunStatus.QUEUED and run.cancel_reason is CancelReason.USER
    assert [e.type for e in evs] == ["run.created", "run.cancel_requested"]


async def test_events_stay_ordered_under_concurrent_writers(db: Database) -> None:
    _, run_id = await _task_and_run(db)

    async def writer(n: int) -> None:
        for i in range(25):
            async with db.write() as tx:
                run = await runs.get_run(tx, run_id)
                await events.append_events(
                    tx, run, [NewEvent(type=f"w{n}.{i}.a"), NewEvent(
                        type=f"w{n}.{i}.b")], 100 + i)

    await asyncio.gather(*(writer(n) for n in range(4)))
    async with db.read() as tx:
        evs = await events.list_events(tx, run_id, limit=1000)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert len(evs) == 1 + 4 * 25 * 2
    # each transaction's pair is adjacent: nothing interleaved inside a transaction
    body = evs[1:]
    for a, b in zip(body[::2], body[1::2], strict=True):
        assert a.type.endswith(".a") and b.type == a.type[:-2] + ".b"


async def test_a_raising_transaction_leaves_nothing(db: Database) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with db.write() as tx:
            await tasks.create_task(
                tx, ids.uuid7(), TaskFields(name="x", command="true", env={}, labels=[]), 1)
            raise Boom
    async with db.read() as tx:
        assert await tasks.list_tasks(tx) == []
    # the writer is usable afterwards
    await _task_and_run(db)


async def test_active_runs_of_a_task_one_query_for_all_or_the_oldest(db: Database) -> None:
    """QingLong's stop cancels every active run; a `forbid` task waits on the oldest:
    both read the same query (all of them by default, the first with limit=1)."""
    task_id, first = await _task_and_run(db)
    async with db.write() as tx:
        later = [(await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 3)).id
                 for _ in range(2)]
        done = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 4)
        await runs.apply(tx, done, transitions.cancel_queued(done, 5), 5)
    async with db.read() as tx:
        # ids are UUIDv7: time-ordered, but two made in one millisecond in any order
        active = sorted([first, *later])
        assert [r.id for r in await runs.active_runs_of_task(tx, task_id)] == active
        oldest = await runs.active_run_of_task(tx, task_id)
        assert oldest is not None and oldest.id == active[0]
        assert await runs.active_runs_of_task(tx, ids.uuid7()) == []
        assert await runs.active_run_of_task(tx, ids.uuid7()) is None


async def test_node_id_is_stable(db: Database) -> None:
    async with db.write() as tx:
        first = await attempts.ensure_node_id(tx, ids.uuid7(), 1)
    async with db.write() as tx:
        second = await attempts.ensure_node_id(tx, ids.uuid7(), 2)
    assert first == second and ids.is_uuid7(first)


async def test_readers_cannot_write(db: Database) -> None:
    import sqlite3

    with pytest.raises(sqlite3.OperationalError):
        async with db.read() as tx:
            await tx.execute("DELETE FROM tasks")


async def test_a_cancelled_reader_or_writer_leaves_no_open_transaction(db: Database) -> None:
    # An SSE client that disconnects cancels its task mid-read; a stopped loop cancels
    # a write. Cancelled inside the transaction, each ends it (the writer's changes
    # rolled back) and its connection comes back usable.
    inside: list[Tx] = []
    undone: list[str] = []

    async def reader() -> None:
        async with db.read() as tx:
            await tx.one("SELECT 1")
            inside.append(tx)
            await asyncio.sleep(30)

    async def writer() -> None:
        async with db.write() as tx:
            await tasks.create_task(
                tx, ids.uuid7(), TaskFields(name="x", command="true", env={}, labels=[]), 1)
            tx.on_rollback(lambda: undone.append("writer"))
            inside.append(tx)
            await asyncio.sleep(30)

    # Four of each: two readers fit (readers=2) and one writer (the write lock); the
    # rest are cancelled while waiting for a connection.
    for body, fit in ((reader, 2), (writer, 1)):
        inside.clear()
        pending = [asyncio.create_task(body()) for _ in range(4)]
        async with asyncio.timeout(10):
            while len(inside) < fit:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # nobody else gets in meanwhile
        assert len(inside) == fit
        assert all(tx._conn.in_transaction for tx in inside)
        for t in pending:
            t.cancel()
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results
        assert not any(conn.in_transaction for conn in db._all), body.__name__
    assert undone == ["writer"]
    async with db.read() as tx:
        assert await tasks.list_tasks(tx) == []  # the cancelled write left nothing

    # A cancel that lands while COMMIT/ROLLBACK itself is queued can leave a BEGIN
    # open on the connection: the next user rolls it back instead of failing.
    for conn in db._all:
        await conn.execute("BEGIN")
    for _ in range(4):
        async with db.read() as tx:
            assert await tx.one("SELECT 1") is not None
    await _task_and_run(db)


_MARK = "SELECT value FROM storage_settings WHERE name = ?"


async def test_terminal_listeners_run_once_inside_the_transaction(db: Database) -> None:
    """A listener sees the run's first terminal transition only, and what it writes
    commits with the result — or, when it raises, neither commits."""
    seen: list[tuple[RunStatus, RunStatus]] = []

    async def listener(tx: Tx, old: Run, new: Run, now_ms: int) -> None:
        seen.append((old.status, new.status))
        await tx.execute("INSERT INTO storage_settings(name, value) VALUES (?, ?)",
                         (f"t-{new.id}", "1"))
        if new.reason_code == "BOOM":
            raise RuntimeError("listener failed")

    db.on_terminal(listener)
    _, run_id = await _task_and_run(db)
    async with db.read() as tx:
        run = await runs.get_run(tx, run_id)
    cancel = transitions.request_cancel(run, CancelReason.USER, 10)
    assert cancel is not None
    async with db.write() as tx:
        run = await runs.apply(tx, run, cancel, 10)  # not terminal yet: no call
    assert seen == []
    async with db.write() as tx:
        run = await runs.apply(tx, run, transitions.cancel_queued(run, 11), 11)
    assert seen == [(RunStatus.QUEUED, RunStatus.CANCELLED)]
    async with db.read() as tx:
        assert await tx.one(_MARK, (f"t-{run_id}",))

    _, other = await _task_and_run(db)
    async with db.read() as tx:
        run = await runs.get_run(tx, other)
    tr = transitions.cancel_queued(run, 12)
    tr = msgspec.structs.replace(tr, run=msgspec.structs.replace(tr.run, reason_code="BOOM"))
    with pytest.raises(RuntimeError):
        async with db.write() as tx:
            await runs.apply(tx, run, tr, 12)
    async with db.read() as tx:
        assert (await runs.get_run(tx, other)).status is RunStatus.QUEUED
        assert await tx.one(_MARK, (f"t-{other}",)) is None


async def test_commit_hooks_run_after_the_commit_and_never_after_a_rollback(
        db: Database) -> None:
    """Tx.on_commit: a listener's wake-up reads what its transaction wrote."""
    seen: list[str | None] = []

    async def peek() -> None:
        async with db.read() as tx:
            row = await tx.one(_MARK, ("hook",))
        seen.append(row["value"] if row else None)

    tasks: list[asyncio.Task[None]] = []
    commits: list[int] = []
    before = db.commit_seq

    def hook() -> None:
        commits.append(db.commit_seq)
        tasks.append(asyncio.ensure_future(peek()))

    async with db.write() as tx:
        await tx.execute("INSERT INTO storage_settings(name, value) VALUES ('hook', 'x')")
        tx.on_commit(hook)
        assert tasks == []
    await asyncio.gather(*tasks)
    assert seen == ["x"] and commits == [before + 1]  # called once the commit counted
    with pytest.raises(RuntimeError):
        async with db.write() as tx:
            tx.on_commit(lambda: seen.append("rolled back"))
            raise RuntimeError("no commit")
    assert seen == ["x"]


async def test_inline_runs_a_whole_function_on_the_database_thread(db: Database) -> None:
    """Tx.inline: one hand-off for many statements, savepoints and rollback hooks as
    usual; commit hooks still run on the loop after the commit."""
    import threading

    loop_thread = threading.get_ident()
    where: list[int] = []
    undone: list[str] = []
    hooked: list[int] = []

    async def body(tx: Tx) -> int:
        where.append(threading.get_ident())
        await tx.execute("INSERT INTO storage_settings(name, value) VALUES ('in1', 'a')")
        with pytest.raises(RuntimeError):
            async with tx.savepoint():
                await tx.execute("INSERT INTO storage_settings(name, value) VALUES ('in2', 'b')")
                tx.on_rollback(lambda: undone.append("in2"))
                raise RuntimeError("only this unit")
        tx.on_commit(lambda: hooked.append(threading.get_ident()))
        row = await tx.one("SELECT COUNT(*) AS n FROM storage_settings WHERE name LIKE 'in%'")
        assert row is not None
        return int(row["n"])

    async with db.write() as tx:
        assert await tx.inline(body) == 1
        assert hooked == []
    assert where and where[0] != loop_thread
    assert undone == ["in2"] and hooked == [loop_thread]
    async with db.read() as tx:
        rows_ = await tx.all("SELECT name FROM storage_settings WHERE name LIKE 'in%'")
    assert [r["name"] for r in rows_] == ["in1"]


async def test_inline_code_that_suspends_rolls_the_transaction_back(db: Database) -> None:
    from qledge.db.sqlite import InlineSuspended

    async def body(tx: Tx) -> None:
        await tx.execute("INSERT INTO storage_settings(name, value) VALUES ('sus', 'x')")
        await asyncio.sleep(0)  # not the transaction's: refused

    with pytest.raises(InlineSuspended):
        async with db.write() as tx:
            await tx.inline(body)
    async with db.read() as tx:
        assert await tx.one("SELECT 1 FROM storage_settings WHERE name = 'sus'") is None


async def test_task_sql_names_only_its_own_columns(db: Database) -> None:
    """db/tasks.py builds INSERT/UPDATE from its fixed COLUMNS, one per TaskFields field
    and each a column of the table; a name that is no task field (a typo, or text
    shaped like SQL) is refused when the fields are made, before any SQL exists."""
    assert sorted(field for field, _, _ in tasks.COLUMNS) == sorted(TaskFields.__struct_fields__)
    async with db.read() as tx:
        table = {row["name"] for row in await tx.all("SELECT name FROM pragma_table_info('tasks')")}
    assert set(tasks.WRITABLE) <= table
    assert len(set(tasks.WRITABLE)) == len(tasks.WRITABLE)
    task_id, _ = await _task_and_run(db)
    for bad in ("nmae", "version", "id", "name = 'x', num"):
        with pytest.raises(msgspec.ValidationError, match="unknown field"):
            task_fields({bad: "x"})
        with pytest.raises(msgspec.ValidationError, match="unknown field"):
            task_fields({"name": "u", "command": "true", bad: "x"})
    async with db.write() as tx:
        task = await tasks.update_task(tx, task_id, TaskFields(labels=["a"], overlap="allow",
                                                               placement_labels=["x"]), 6)
    assert (task.labels, str(task.overlap), str(task.concurrency), task.placement_labels,
            task.version) == (["a"], "allow", "allow", ["x"], 2)
