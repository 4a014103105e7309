"""The scheduler with an injected clock: one run per due tick, forbid skips, no replay
storm after downtime, disabled never fires, no double fire across restarts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from qledge import failpoints, ids, transitions
from qledge.db import backend, events, runs, schedule, tasks
from qledge.db.sqlite import Database
from qledge.model import CancelReason, Run, Trigger
from qledge.runtime.scheduler import Scheduler
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields, task_fields

from support import time_zone

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

SHANGHAI = timezone(timedelta(hours=8))
MINUTE = 60_000
DAY = 86_400_000


@pytest.fixture(autouse=True)
def tz() -> Iterator[None]:
    with time_zone("Asia/Shanghai"):
        yield


def at(*args: int) -> int:
    return int(datetime(*args, tzinfo=SHANGHAI).timestamp() * 1000)  # type: ignore[misc]


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


T0 = at(2024, 1, 1, 10, 0, 30)


async def make_task(db: Database, created_ms: int = T0, **fields: Any) -> str:
    body = {"name": "t", "command": "true", "schedule": "* * * * *", "env": {}, "labels": [],
            **fields}
    async with db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields(body), created_ms)
    return task.id


async def runs_of(db: Database, task_id: str) -> list[Run]:
    async with db.read() as tx:
        return list(reversed(await runs.list_runs(tx, task_id=task_id, status=None,
                                                   before=None, limit=1000)))


async def events_of(db: Database, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with db.read() as tx:
        return [(e.type, dict(e.data)) for e in await events.list_events(tx, run_id)]


async def finish(db: Database, run_id: str, now: int) -> None:
    """End a queued run (cancelled before start) so the task is idle again."""
    async with db.write() as tx:
        run = await runs.get_run(tx, run_id)
        tr = transitions.request_cancel(run, CancelReason.USER, now)
        assert tr is not None
        run = await runs.apply(tx, run, tr, now)
        await runs.apply(tx, run, transitions.cancel_queued(run, now), now)


async def test_a_due_tick_creates_exactly_one_schedule_run(db: Database) -> None:
    task_id = await make_task(db)
    clock = Clock(at(2024, 1, 1, 10, 0, 59))
    queued: list[int] = []
    sched = Scheduler(db, clock=clock, on_queued=lambda: queued.append(1))
    assert await sched.round() == at(2024, 1, 1, 10, 1)  # sleeps until the tick
    assert await runs_of(db, task_id) == []

    clock.ms = at(2024, 1, 1, 10, 1) + 7
    assert await sched.round() == at(2024, 1, 1, 10, 2)
    runs = await runs_of(db, task_id)
    assert len(runs) == 1 and runs[0].trigger is Trigger.SCHEDULE
    assert queued == [1]
    evs = await events_of(db, runs[0].id)
    assert [t for t, _ in evs] == ["run.created", "run.scheduled"]
    assert evs[1][1] == {"scheduled_for_ms": at(2024, 1, 1, 10, 1), "late_ms": 7,
                         "catch_up": 0}

    clock.ms += 500  # the same tick seen again: nothing new
    await sched.round()
    assert len(await runs_of(db, task_id)) == 1
    async with db.read() as tx:
        assert await schedule.last_due(tx, task_id) == at(2024, 1, 1, 10, 1)


async def test_forbid_skips_while_a_run_is_active_and_records_it(db: Database) -> None:
    task_id = await make_task(db)
    clock = Clock(at(2024, 1, 1, 10, 1))
    sched = Scheduler(db, clock=clock)
    await sched.round()
    [first] = await runs_of(db, task_id)

    clock.ms = at(2024, 1, 1, 10, 2)
    await sched.round()
    assert [r.id for r in await runs_of(db, task_id)] == [first.id]
    evs = await events_of(db, first.id)
    assert evs[-1] == ("schedule.skipped", {"scheduled_for_ms": at(2024, 1, 1, 10, 2),
                                            "reason": "active_run", "catch_up": 0})
    for _, data in evs:  # low-sensitivity: no command text anywhere
        assert "true" not in str(data.values())
    assert sched.skipped == 1

    await finish(db, first.id, clock.ms + 1)
    clock.ms = at(2024, 1, 1, 10, 3)
    await sched.round()
    runs = await runs_of(db, task_id)
    assert len(runs) == 2 and runs[1].trigger is Trigger.SCHEDULE


async def test_allow_fires_beside_an_active_run_but_never_piles_up_queued_runs(
        db: Database) -> None:
    task_id = await make_task(db, concurrency="allow")
    clock = Clock(at(2024, 1, 1, 10, 1))
    sched = Scheduler(db, clock=clock)
    await sched.round()
    clock.ms = at(2024, 1, 1, 10, 2)
    await sched.round()  # the first one is still queued: no second queued run
    runs = await runs_of(db, task_id)
    assert len(runs) == 1
    assert (await events_of(db, runs[0].id))[-1][1]["reason"] == "queued_run"


async def test_no_replay_storm_after_a_long_downtime(db: Database) -> None:
    three_days_ago = at(2024, 1, 1, 10, 0, 30)
    task_id = await make_task(db, created_ms=three_days_ago)
    clock = Clock(three_days_ago + 30_000)
    sched = Scheduler(db, clock=clock)
    await sched.round()
    [last_before] = await runs_of(db, task_id)
    await finish(db, last_before.id, clock.ms)

    clock.ms = three_days_ago + 3 * DAY + 12_345  # 10:00:42 three days later
    for _ in range(3):
        await sched.round()
    runs = await runs_of(db, task_id)
    assert len(runs) == 2  # exactly one catch-up run, not 4320
    evs = dict(await events_of(db, runs[1].id))
    assert evs["run.scheduled"]["catch_up"] == 1
    assert evs["run.scheduled"]["scheduled_for_ms"] == at(2024, 1, 4, 10, 0)
    # and the normal rhythm resumes at the next tick
    assert sched.next_due_ms == at(2024, 1, 4, 10, 1)


async def test_a_daily_job_missed_during_downtime_fires_once_late(db: Database) -> None:
    task_id = await make_task(db, created_ms=at(2024, 1, 1, 1, 0), schedule="0 3 * * *")
    sched = Scheduler(db, clock=Clock(at(2024, 1, 1, 15, 0)))  # down from 02:00 to 15:00
    await sched.round()
    await sched.round()
    runs = await runs_of(db, task_id)
    assert len(runs) == 1
    evs = dict(await events_of(db, runs[0].id))
    assert evs["run.scheduled"] == {"scheduled_for_ms": at(2024, 1, 1, 3, 0),
                                    "late_ms": 12 * 3_600_000, "catch_up": 1}
    assert sched.next_due_ms == at(2024, 1, 2, 3, 0)


async def test_disabled_tasks_never_fire_and_do_not_replay_when_enabled(db: Database) -> None:
    task_id = await make_task(db, enabled=False)
    unscheduled = await make_task(db, schedule=None)
    clock = Clock(at(2024, 1, 1, 10, 1))
    sched = Scheduler(db, clock=clock)
    for minute in range(1, 30):
        clock.ms = at(2024, 1, 1, 10, minute)
        assert await sched.round() is None
    assert await runs_of(db, task_id) == [] and await runs_of(db, unscheduled) == []

    enabled_at = at(2024, 1, 1, 10, 29, 30)
    async with db.write() as tx:
        await tasks.update_task(tx, task_id, TaskFields(enabled=True), enabled_at)
    clock.ms = enabled_at + 1
    assert await sched.round() == at(2024, 1, 1, 10, 30)  # no replay of the disabled time
    assert await runs_of(db, task_id) == []
    clock.ms = at(2024, 1, 1, 10, 30)
    await sched.round()
    assert len(await runs_of(db, task_id)) == 1


async def test_a_restarted_scheduler_never_fires_the_same_tick_twice(
        db: Database, conf: Settings) -> None:
    task_id = await make_task(db)
    first = Scheduler(db, clock=Clock(at(2024, 1, 1, 10, 1, 0) + 200))
    await first.round()
    assert len(await runs_of(db, task_id)) == 1

    # A new worker: new Database connections and a new Scheduler, mid-minute.
    other = backend.database(conf)
    await other.open()
    try:
        again = Scheduler(other, clock=Clock(at(2024, 1, 1, 10, 1, 30)))
        await again.round()
        await again.round()
    finally:
        await other.close()
    assert len(await runs_of(db, task_id)) == 1


async def test_the_tick_and_its_run_commit_together(db: Database) -> None:
    task_id = await make_task(db)
    sched = Scheduler(db, clock=Clock(at(2024, 1, 1, 10, 1, 0) + 50))
    failpoints.configure("db.before_commit=raise-once")
    try:
        with pytest.raises(failpoints.FailpointError):
            await sched.round()
    finally:
        failpoints.configure("")
    async with db.read() as tx:
        assert await schedule.last_due(tx, task_id) is None  # rolled back with the run
    assert await runs_of(db, task_id) == []
    await sched.round()
    assert len(await runs_of(db, task_id)) == 1


async def test_next_due_is_the_earliest_across_tasks(db: Database) -> None:
    await make_task(db, schedule="0 12 * * *")
    await make_task(db, schedule="*/10 * * * *")
    await make_task(db, schedule="45 * * * * *")  # seconds field: 10:00:45
    sched = Scheduler(db, clock=Clock(T0 + 1))
    assert await sched.round() == at(2024, 1, 1, 10, 0, 45)


async def test_deleting_a_task_drops_its_schedule_state(db: Database) -> None:
    task_id = await make_task(db)
    sched = Scheduler(db, clock=Clock(at(2024, 1, 1, 10, 1)))
    await sched.round()
    [run] = await runs_of(db, task_id)
    await finish(db, run.id, at(2024, 1, 1, 10, 1) + 5)
    async with db.write() as tx:
        await tasks.delete_task(tx, task_id)
    async with db.read() as tx:
        assert await schedule.last_due(tx, task_id) is None


async def test_the_loop_fires_on_time_with_the_real_clock(db: Database) -> None:
    queued: list[int] = []
    sched = Scheduler(db, on_queued=lambda: queued.append(int(time.time() * 1000)))
    sched.start()
    try:
        await asyncio.sleep(0.1)  # the loop now sleeps (no scheduled task: up to 60 s)
        now = int(time.time() * 1000)
        target = (now // 1000 + 2) * 1000  # a whole second, 1-2 s ahead
        second = datetime.fromtimestamp(target / 1000).second
        task_id = await make_task(db, created_ms=now, schedule=f"{second} * * * * *")
        sched.wake()  # a task changed: the loop re-reads and sleeps until the tick
        deadline = time.monotonic() + 6
        while not queued and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert queued, "the tick did not fire"
        [run] = await runs_of(db, task_id)
        evs = dict(await events_of(db, run.id))
        assert evs["run.scheduled"]["scheduled_for_ms"] == target
        assert evs["run.scheduled"]["catch_up"] == 0
        assert 0 <= queued[0] - target < 1500, "fired too late"
        assert sched.next_due_ms == target + 60_000
    finally:
        await sched.stop()
    assert not sched.running


async def test_many_tasks_due_at_once_all_fire(db: Database) -> None:
    task_ids = [await make_task(db, schedule="0 * * * *") for _ in range(40)]
    sched = Scheduler(db, clock=Clock(at(2024, 1, 1, 11, 0) + 20))
    assert await sched.round() == at(2024, 1, 1, 12, 0)
    for task_id in task_ids:
        assert len(await runs_of(db, task_id)) == 1
    assert sched.fired == 40


async def test_skip_events_per_active_run_are_bounded(db: Database) -> None:
    task_id = await make_task(db, schedule="* * * * * *")
    clock = Clock(T0 + 1000)
    sched = Scheduler(db, clock=clock)
    await sched.round()
    [run] = await runs_of(db, task_id)
    for _ in range(130):
        clock.ms += 1000
        await sched.round()
    assert [r.id for r in await runs_of(db, task_id)] == [run.id]
    types = [t for t, _ in await events_of(db, run.id)]
    assert types.count("schedule.skipped") == 100
    assert sched.skipped == 130
    async with db.read() as tx:  # every tick was consumed all the same
        assert await schedule.last_due(tx, task_id) == clock.ms
