"""The scheduler leader (runtime/leader.py, db/fleet_leases.py) on a real PostgreSQL:
two Database objects are two nodes. One holder at a time, a takeover after the TTL
with epoch + 1, a stale holder's tick fires nothing, and a tick fires once even when
two nodes believe they lead or the leader dies before its commit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _pg import pg_dsn, pg_server  # noqa: F401  (fixtures: a throwaway PostgreSQL)
from qledge import ids, transitions
from qledge.db import (
    events,
    fleet_leases,
    migrate,
    migrate_pg,
    notifications,
    pg,
    runs,
    tasks,
)
from qledge.db.sqlite import Database
from qledge.model import CancelReason, Run, Trigger
from qledge.node import Node
from qledge.runtime.diskwatch import DiskWatch
from qledge.runtime.leader import Leader
from qledge.runtime.notifier import Notifier
from qledge.runtime.retention import Retention
from qledge.runtime.scheduler import Outcome, Scheduler
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields

from support import eventually_async, time_zone

TTL_S = 1.0
SETTINGS = Settings(leader_lease_s=TTL_S)


@pytest.fixture(autouse=True)
def tz() -> Iterator[None]:
    with time_zone("UTC"):  # the cron arithmetic's zone, as `at` below
        yield


def at(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


TICK = at(2024, 1, 1, 10, 1)  # "* * * * *" is due at 10:01 for a task made at 10:00:30


class Clock:
    """A scheduler's wall clock, or a leader's monotonic one, held still by the test."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


@pytest.fixture
async def nodes(pg_dsn: str) -> AsyncIterator[tuple[pg.Database, pg.Database]]:  # noqa: F811
    await migrate_pg.apply(pg_dsn)
    a, b = pg.Database(pg_dsn), pg.Database(pg_dsn)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def leader(db: pg.Database, name: str, settings: Settings = SETTINGS, **kw: Any) -> Leader:
    return Leader(db, Node(name=name, labels=(), fleet=True), settings, **kw)  # type: ignore[arg-type]


async def make_task(db: Any, created_ms: int = at(2024, 1, 1, 10, 0, 30),
                    schedule: str = "* * * * *") -> str:
    async with db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command="true", schedule=schedule, env={},
            labels=[]), created_ms)
    return str(task.id)


async def runs_of(db: Any, task_id: str) -> list[Run]:
    async with db.read() as tx:
        return list(await runs.list_runs(tx, task_id=task_id, status=None, before=None,
                                         limit=100))


async def scheduled_for(db: Any, run_id: str) -> list[int]:
    async with db.read() as tx:
        return [int(e.data["scheduled_for_ms"]) for e in await events.list_events(tx, run_id)
                if e.type == "run.scheduled"]


async def lease_row(db: Any) -> fleet_leases.Lease | None:
    async with db.read() as tx:
        return await fleet_leases.current(tx, fleet_leases.SCHEDULER)


async def until(pred: Any, timeout_s: float) -> float:
    start = time.monotonic()

    async def holds() -> bool:
        return bool(pred())

    await eventually_async(holds, timeout=timeout_s, what="the condition")
    return time.monotonic() - start


# -- the lease ---------------------------------------------------------------------------

async def test_exactly_one_of_two_nodes_holds_the_lease(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    a, b = leader(nodes[0], "n1"), leader(nodes[1], "n2")
    for _ in range(5):  # racing renewals, again and again: never two holders
        got = await asyncio.gather(a.renew(), b.renew())
        assert sorted(got) == [False, True]
    holder, other = (a, b) if a.is_leader else (b, a)
    assert holder.epoch == 1 and other.epoch is None
    row = await lease_row(nodes[0])
    assert row is not None and row.holder == holder.node.name and row.epoch == 1
    async with nodes[0].write() as tx:
        assert await holder.holds_in(tx)
        assert not await other.holds_in(tx)


async def test_a_holder_that_stops_renewing_is_replaced_after_the_ttl_with_the_next_epoch(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    a = leader(nodes[0], "n1")
    assert await a.renew()
    b = leader(nodes[1], "n2")
    changes: list[bool] = []
    b.on_change(changes.append)
    a.start()
    b.start()
    try:
        await asyncio.sleep(TTL_S * 1.5)  # renewals keep the lease where it is
        assert a.is_leader and not b.is_leader and a.epoch == 1
        await a.loop.stop()  # frozen: no renewal, no release (SIGSTOP)
        waited = await until(lambda: b.is_leader, TTL_S * 3)
        # Not before the last renewal's TTL ran out (renewals every TTL/5).
        assert waited >= TTL_S * 0.7
        assert b.epoch == 2 and changes == [True]
        assert not a.is_leader and a.epoch is None  # its own view ran out as well
        async with nodes[0].write() as tx:  # and the database says so to the old one
            assert not await fleet_leases.holds_in(tx, "scheduler", "n1", 1)
        row = await lease_row(nodes[0])
        assert row is not None and (row.holder, row.epoch) == ("n2", 2)
        # Back from its freeze, the old holder does not get it back.
        assert not await a.renew()
    finally:
        await a.stop()
        await b.stop()


async def test_a_clean_stop_hands_over_at_the_next_renewal(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    a, b = leader(nodes[0], "n1"), leader(nodes[1], "n2")
    a.start()
    await until(lambda: a.is_leader, 2)
    await a.stop()
    assert not a.is_leader
    assert await b.renew() and b.epoch == 2


async def test_a_new_incarnation_of_the_holder_waits_for_the_ttl(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    old = leader(nodes[0], "n1")
    assert await old.renew()
    new = leader(nodes[1], "n1")  # the worker restarted: the old one may be frozen
    assert not await new.renew()
    await asyncio.sleep(TTL_S + 0.1)
    assert await new.renew() and new.epoch == 2
    assert not await old.renew()


async def test_a_cluster_worker_never_takes_the_lease(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    worker = leader(nodes[0], "w1", Settings(leader_lease_s=TTL_S,
                                             profile="cluster-worker"))  # type: ignore[arg-type]
    worker.start()
    assert not worker.loop.running
    await asyncio.sleep(0.1)
    assert not worker.is_leader and await lease_row(nodes[0]) is None


async def test_on_sqlite_the_one_node_always_leads_and_fires_as_before(tmp_path: Path) -> None:
    path = tmp_path / "qledge.db"
    migrate.apply(path)
    db = Database(path)
    await db.open()
    try:
        one = Leader(db, Node(name="n1", labels=()), SETTINGS)
        one.start()
        assert not one.loop.running and one.is_leader and one.epoch is None
        task_id = await make_task(db)
        sched = Scheduler(db, clock=Clock(TICK + 5), leader=one)
        await sched.round()
        assert len(await runs_of(db, task_id)) == 1
    finally:
        await db.close()


# -- ticks under the lease ---------------------------------------------------------------

async def test_a_stale_holders_tick_transaction_fires_nothing(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    frozen = Clock(0.0)  # its monotonic clock stood still: it still believes it leads
    a = leader(nodes[0], "n1", clock=frozen)
    b = leader(nodes[1], "n2")
    assert await a.renew()
    task_id = await make_task(nodes[0])
    await asyncio.sleep(TTL_S + 0.1)
    assert await b.renew() and b.epoch == 2  # took over: a's lease ran out
    assert a.is_leader and a.epoch == 1  # a's own, stale, view

    stale = Scheduler(nodes[0], clock=Clock(TICK + 5), leader=a)  # type: ignore[arg-type]
    assert await stale.round() is None
    assert stale.fired == 0 and stale.not_leader_rounds == 1
    assert await runs_of(nodes[0], task_id) == []
    async with nodes[0].read() as tx:  # rolled back: not even the cursor row was written
        assert await tx.one("SELECT 1 FROM task_schedule_state") is None

    fresh = Scheduler(nodes[1], clock=Clock(TICK + 5), leader=b)  # type: ignore[arg-type]
    await fresh.round()
    [run] = await runs_of(nodes[1], task_id)
    assert await scheduled_for(nodes[1], run.id) == [TICK]


async def test_two_nodes_firing_the_same_tick_at_once_create_one_run(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    """Both believe they lead (no lease check at all): the cursor row lock alone."""
    a, b = nodes
    task_id = await make_task(a)
    first = Scheduler(a, clock=Clock(TICK + 5))  # type: ignore[arg-type]
    second = Scheduler(b, clock=Clock(TICK + 5))  # type: ignore[arg-type]
    async with a.write() as tx:
        outcome, _ = await first.fire(tx, task_id, TICK + 5)  # type: ignore[arg-type]
        assert outcome == Outcome.FIRED
        other = asyncio.create_task(second.round())
        await asyncio.sleep(0.3)
        assert not other.done()  # waiting on the cursor row a's transaction holds
    await asyncio.wait_for(other, 5)
    assert second.fired == 0
    [run] = await runs_of(a, task_id)
    assert await scheduled_for(a, run.id) == [TICK]

    # And racing whole rounds over several tasks, at the next tick: each tick consumed
    # once (the first task's still queued run makes its tick a skip).
    more = [await make_task(a, created_ms=TICK + 10) for _ in range(5)]
    first.clock = second.clock = Clock(at(2024, 1, 1, 10, 2) + 3)
    await asyncio.gather(first.round(), second.round())
    assert (first.fired + second.fired, first.skipped + second.skipped) == (5, 1)
    for tid in more:
        [run] = await runs_of(a, tid)
        assert await scheduled_for(a, run.id) == [at(2024, 1, 1, 10, 2)]
    [queued] = await runs_of(a, task_id)
    async with a.read() as tx:
        assert await events.count_events(tx, queued.id, "schedule.skipped") == 1


class Killed(Exception):
    pass


async def test_a_leader_killed_before_its_tick_commits_leaves_it_to_the_next_leader(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    a, b = leader(nodes[0], "n1"), leader(nodes[1], "n2")
    assert await a.renew()
    task_id = await make_task(nodes[0])
    dying = Scheduler(nodes[0], clock=Clock(TICK + 5), leader=a)  # type: ignore[arg-type]
    with pytest.raises(Killed):
        async with nodes[0].write() as tx:
            assert await a.holds_in(tx)
            outcome, _ = await dying.fire(tx, task_id, TICK + 5)  # type: ignore[arg-type]
            assert outcome == Outcome.FIRED
            nodes[0]._writer.terminate()  # kill -9: the server rolls the transaction back
            raise Killed
    assert await runs_of(nodes[1], task_id) == []

    b.start()  # a renews no more: b leads after the TTL, and its scheduler is poked
    nxt = Scheduler(nodes[1], clock=Clock(TICK + 5_000), leader=b)  # type: ignore[arg-type]
    nxt.start()
    try:
        await until(lambda: nxt.fired == 1, TTL_S * 4)
        assert b.epoch == 2
        [run] = await runs_of(nodes[1], task_id)
        assert await scheduled_for(nodes[1], run.id) == [TICK]
        await nxt.round()  # seen again: consumed once
        assert nxt.fired == 1 and len(await runs_of(nodes[1], task_id)) == 1
    finally:
        await nxt.stop()
        await b.stop()


async def test_a_follower_runs_no_ticks_and_takes_over_within_the_lease(
        nodes: tuple[pg.Database, pg.Database]) -> None:
    a, b = leader(nodes[0], "n1"), leader(nodes[1], "n2")
    assert await a.renew()
    task_id = await make_task(nodes[0])
    follower = Scheduler(nodes[1], clock=Clock(TICK + 5), leader=b)  # type: ignore[arg-type]
    a.start()
    b.start()
    follower.start()
    try:
        await asyncio.sleep(0.4)
        assert follower.not_leader_rounds >= 1 and follower.fired == 0
        assert await runs_of(nodes[1], task_id) == []
        await a.loop.stop()  # the leader froze before it fired this tick
        waited = await until(lambda: follower.fired == 1, TTL_S * 3)
        assert waited <= TTL_S + 0.6
        assert len(await runs_of(nodes[1], task_id)) == 1
    finally:
        await follower.stop()
        await a.stop()
        await b.stop()


# -- the other singleton duties ----------------------------------------------------------

async def test_only_the_holder_sends_notifications(
        nodes: tuple[pg.Database, pg.Database], tmp_path: Path) -> None:
    a, b = leader(nodes[0], "n1"), leader(nodes[1], "n2")
    assert await a.renew() and not await b.renew()

    def sender(db: pg.Database, lead: Leader) -> Notifier:
        return Notifier(db, logs_root=tmp_path, base_url="", interval_s=60,  # type: ignore[arg-type]
                        retry_base_s=1, max_tries=1, max_age_s=60, started_at_ms=0,
                        leader=lead)

    async with nodes[0].write() as tx:  # its channel is gone: a send gives it up at once
        await notifications.enqueue(tx, channel_ids=["gone"], kind="test", run_id=None,
                                    task_id=None, title="t", body="b", log_lines=0,
                                    due_at_ms=0, now_ms=0)
    follower, holder = sender(nodes[1], b), sender(nodes[0], a)
    await follower._round()
    assert follower.failures == 0
    async with nodes[0].read() as tx:
        assert len(await notifications.due(tx, 1, 10)) == 1
    await holder._round()
    assert holder.given_up == 1
    async with nodes[0].read() as tx:
        assert await notifications.due(tx, 1, 10) == []


async def test_only_the_holder_runs_retentions_policy_deletions(tmp_path: Path) -> None:
    conf = Settings(state_dir=str(tmp_path))
    for p in (conf.data_path, conf.logs_path):
        p.mkdir(parents=True, exist_ok=True)
    migrate.apply(conf.db_path)
    db = Database(conf.db_path)
    await db.open()
    try:
        task_id = await make_task(db)
        async with db.write() as tx:
            for _ in range(3):
                run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 1)
                tr = transitions.request_cancel(run, CancelReason.USER, 2)
                assert tr is not None
                run = await runs.apply(tx, run, tr, 2)
                await runs.apply(tx, run, transitions.cancel_queued(run, 3), 3)
        profile = msgspec.structs.replace(conf.profile_limits, keep_runs_per_task=1,
                                          keep_days=0)

        def keeper(lead: Leader) -> Retention:
            disk = DiskWatch({"logs": conf.logs_path}, low_water_mb=0, low_water_pct=0)
            return Retention(db=db, logs_root=conf.logs_path, db_path=conf.db_path,
                             profile=profile, disk=disk, leader=lead)

        # A fleet node that holds no lease (never renewed): no policy deletions.
        follower = Leader(db, Node(name="n2", labels=(), fleet=True), SETTINGS)
        await keeper(follower).round()
        assert len(await runs_of(db, task_id)) == 3
        await keeper(Leader(db, Node(name="n1", labels=()), SETTINGS)).round()
        assert len(await runs_of(db, task_id)) == 1
    finally:
        await db.close()
