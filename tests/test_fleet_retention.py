"""Retention in a fleet (docs/fleet.md): a log lives on the disk of the node that ran
its attempt, so the node that deletes runs (the scheduler lease's holder) queues each
log for its owner, and every node sizes, evicts and unlinks only its own.

Real PostgreSQL (tests/_pg.py) and the embedded SQLite, whose single volume is
unchanged.
"""

from __future__ import annotations

from typing import Any

from qledge import transitions
from qledge.db import attempts, pg, runs, tasks
from qledge.db import retention_queries as q
from qledge.db.sqlite import Database
from qledge.model import Trigger
from qledge.tasks.writable import TaskFields


async def _finished(db: Any, run_id: str, owner: str, code: int = 0) -> None:
    """A run of task t whose one attempt ran on `owner` and ended."""
    async with db.write() as tx:
        run = await runs.create_run(tx, run_id, "t", Trigger.MANUAL, 10)
        run = await runs.apply(tx, run, transitions.attempt_prepared(run), 11)
        att = await attempts.prepare_attempt(
            tx, run, attempt_id=f"a-{run_id}", owner=owner, executor_type="local",
            token_hash=b"h", deadline_at_ms=None, log_path=f"{run_id[-2:]}/a-{run_id}.log",
            receipt_path=f"x/a-{run_id}", now_ms=12)
        run = await runs.get_run(tx, run_id)
        run = await runs.apply(tx, run, transitions.attempt_started(
            run, att, pid=1, start_time=1, boot_id="b", now_ms=13), 13)
        att = await attempts.get_attempt(tx, att.id)
        await runs.apply(tx, run, transitions.complete(run, att, exit_code=code,
                                                       finished_at_ms=20), 20)
        await tx.execute("UPDATE run_attempts SET receipt_state = NULL, receipt_path = NULL,"
                         " receipt_created_at_ms = NULL, receipt_updated_at_ms = NULL,"
                         " receipt_since_ms = NULL, receipt_settled_at_ms = NULL")


async def _seed(db: Any) -> None:
    async with db.write() as tx:
        await tasks.create_task(tx, "t", TaskFields(name="t", command="true", env={},
                                          labels=[]), 1)
    for i, owner in enumerate(["n1", "n2", "n1", "n2"]):
        await _finished(db, f"r{i}", owner)


async def test_deleted_runs_queue_each_log_for_the_node_that_has_it(
        pgdb: pg.Database) -> None:
    await _seed(pgdb)
    async with pgdb.write() as tx:
        deleted = await q.delete_runs(tx, ["r0", "r1", "r2", "r3"], 30, owner="n1")
    # The deleting node unlinks its own at once; n2's wait in n2's volume.
    assert sorted(deleted.log_paths) == ["r0/a-r0.log", "r2/a-r2.log"]
    async with pgdb.read() as tx:
        assert await q.pending_deletions(tx, 10, "logs@n1") == ["r0/a-r0.log", "r2/a-r2.log"]
        assert await q.pending_deletions(tx, 10, "logs@n2") == ["r1/a-r1.log", "r3/a-r3.log"]
        assert await q.pending_deletions(tx, 10) == []  # no node drains the shared name
        assert await q.count_pending_deletions(tx, "logs@n2") == 2
        assert await q.count_pending_deletions(tx) == 4


async def test_each_node_sizes_and_evicts_only_its_own_logs(pgdb: pg.Database) -> None:
    await _seed(pgdb)
    async with pgdb.read() as tx:
        mine = [r.attempt_id for r in await q.unsized_logs(tx, 10, "n2")]
        cands = await q.eviction_candidates(tx, "", 10, keep_newest=False, owner="n2")
        totals = await q.log_totals(tx, "n2")
        everyone = await q.log_totals(tx)
    assert mine == ["a-r1", "a-r3"]
    assert [c.attempt_id for c in cands] == ["a-r1", "a-r3"]
    assert (totals.live, everyone.live) == (2, 4)
    async with pgdb.write() as tx:
        evicted = await q.evict_logs(tx, ["a-r1"], "SIZE_CAP", 40, "logs@n2")
    assert evicted == [("a-r1", "r1/a-r1.log")]
    async with pgdb.read() as tx:
        assert await q.pending_deletions(tx, 10, "logs@n2") == ["r1/a-r1.log"]


async def test_deleting_a_task_queues_its_logs_per_owner(pgdb: pg.Database) -> None:
    await _seed(pgdb)
    async with pgdb.write() as tx:
        paths = await tasks.delete_task(tx, "t", 50)
    assert len(paths) == 4
    async with pgdb.read() as tx:
        assert len(await q.pending_deletions(tx, 10, "logs@n1")) == 2
        assert len(await q.pending_deletions(tx, 10, "logs@n2")) == 2


async def test_the_embedded_sqlite_keeps_one_volume(litedb: Database) -> None:
    await _seed(litedb)
    async with litedb.write() as tx:
        deleted = await q.delete_runs(tx, ["r0", "r1"], 30)
    assert sorted(deleted.log_paths) == ["r0/a-r0.log", "r1/a-r1.log"]
    async with litedb.read() as tx:
        assert await q.pending_deletions(tx, 10) == ["r0/a-r0.log", "r1/a-r1.log"]
        assert [r.attempt_id for r in await q.unsized_logs(tx, 10)] == ["a-r2", "a-r3"]
