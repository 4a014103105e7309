"""More schedule forms (issue 20): extra schedules, @boot, @once, shorthands, and a
per-task time zone that is DST-safe — driven through the real Scheduler."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from qledge import cron, ids, transitions
from qledge.db import events as db_events
from qledge.db import runs as db_runs
from qledge.db import tasks as db_tasks
from qledge.db.sqlite import Database
from qledge.model import TERMINAL_RUN, CancelReason, Run, Trigger
from qledge.runtime.lifecycle import Runtime
from qledge.runtime.scheduler import Scheduler
from qledge.tasks.writable import TaskFields, task_fields

from support import make_runtime, time_zone

MINUTE = 60_000


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def at(zone: str, *args: int) -> int:
    return int(datetime(*args, tzinfo=ZoneInfo(zone)).timestamp() * 1000)  # type: ignore[misc]


async def make_task(db: Database, created_ms: int, **fields: Any) -> str:
    body = {"name": "t", "command": "true", "env": {}, "labels": [], "overlap": "allow",
            **fields}
    async with db.write() as tx:
        task = await db_tasks.create_task(tx, ids.uuid7(), task_fields(body), created_ms)
    return task.id


async def runs_of(db: Database, task_id: str) -> list[Run]:
    async with db.read() as tx:
        return list(reversed(await db_runs.list_runs(tx, task_id=task_id, status=None,
                                                   before=None, limit=1000)))


async def drive(db: Database, clock: Clock, until_ms: int, step_ms: int = MINUTE) -> None:
    """Walk the clock forward in steps, a scheduler round at each; queued runs are
    cancelled at once so `allow`'s no-pile-up rule never hides a tick."""
    sched = Scheduler(db, clock=clock)
    while clock.ms < until_ms:
        clock.ms += step_ms
        await sched.round()
        async with db.write() as tx:
            for run in await db_runs.queued_runs(tx, 100, clock.ms):
                tr = transitions.request_cancel(run, CancelReason.USER, clock.ms)
                assert tr is not None
                run = await db_runs.apply(tx, run, tr, clock.ms)
                await db_runs.apply(tx, run, transitions.cancel_queued(run, clock.ms), clock.ms)


def test_shorthands_and_special_schedules_validate() -> None:
    assert cron.validate(" @Hourly ") == "@hourly"
    assert cron.validate("@boot") == "@boot" and cron.validate("@ONCE") == "@once"
    t0 = at("UTC", 2024, 1, 1, 10, 20)
    assert cron.first_due_after("@hourly", t0, "UTC") == at("UTC", 2024, 1, 1, 11, 0)
    assert cron.first_due_after("@daily", t0, "UTC") == at("UTC", 2024, 1, 2, 0, 0)
    for special in ("@boot", "@once"):
        assert cron.first_due_after(special, t0) is None
        assert cron.last_due_at_or_before(special, t0) is None
        assert cron.next_ticks(special, t0, 5) == []


async def test_extra_schedules_fire_each(db: Database) -> None:
    t0 = at("UTC", 2024, 1, 1, 9, 58)
    task_id = await make_task(db, t0, schedule="0 10 * * *", tz="UTC",
                              extra_schedules=["30 10 * * *", "@hourly"])
    await drive(db, Clock(t0), at("UTC", 2024, 1, 1, 12, 5))
    async with db.read() as tx:
        fired = [e.data["scheduled_for_ms"] for r in await runs_of(db, task_id)
                 for e in await db_events.list_events(tx, r.id) if e.type == "run.scheduled"]
    assert fired == [at("UTC", 2024, 1, 1, 10, 0), at("UTC", 2024, 1, 1, 10, 30),
                     at("UTC", 2024, 1, 1, 11, 0), at("UTC", 2024, 1, 1, 12, 0)]


async def test_extra_schedules_alone_are_scheduled(db: Database) -> None:
    t0 = at("UTC", 2024, 1, 1, 9, 58)
    task_id = await make_task(db, t0, extra_schedules=["0 10 * * *"], tz="UTC")
    await drive(db, Clock(t0), at("UTC", 2024, 1, 1, 10, 3))
    assert len(await runs_of(db, task_id)) == 1


async def test_once_and_boot_never_tick(db: Database) -> None:
    t0 = at("UTC", 2024, 1, 1, 9, 58)
    ids_ = [await make_task(db, t0, schedule=s) for s in ("@once", "@boot")]
    await drive(db, Clock(t0), t0 + 120 * MINUTE, step_ms=10 * MINUTE)
    for task_id in ids_:
        assert await runs_of(db, task_id) == []


@pytest.mark.parametrize(("zone", "spring", "fall"), [
    ("Europe/Berlin", (2024, 3, 31), (2024, 10, 27)),
    ("America/New_York", (2024, 3, 10), (2024, 11, 3)),
])
async def test_a_0230_job_runs_once_on_both_dst_days_in_the_task_zone(
        db: Database, zone: str, spring: tuple[int, int, int], fall: tuple[int, int, int]
) -> None:
    """The container runs in Shanghai (no DST); the task's own zone decides."""
    with time_zone("Asia/Shanghai"):
        for day in (spring, fall):
            start = at(zone, *day, 0, 0) - 60 * MINUTE
            task_id = await make_task(db, start, schedule="30 2 * * *", tz=zone)
            await drive(db, Clock(start), at(zone, *day, 6, 0), step_ms=5 * MINUTE)
            runs = await runs_of(db, task_id)
            assert len(runs) == 1, (zone, day, [r.created_at_ms for r in runs])
            async with db.read() as tx:
                ev = next(e for e in await db_events.list_events(tx, runs[0].id)
                          if e.type == "run.scheduled")
            local = datetime.fromtimestamp(int(ev.data["scheduled_for_ms"] or 0) / 1000,
                                           ZoneInfo(zone))
            # spring: 02:30 does not exist, it fires right after the gap (03:00);
            # fall: 02:30 happens twice, it fires once (the first)
            assert (local.hour, local.minute) == ((3, 0) if day == spring else (2, 30)), local
            assert local.fold == 0


# -- @boot with the runtime ------------------------------------------------------------


async def _boot_runs(rt: Runtime, task_id: str) -> list[Run]:
    async with rt.db.read() as tx:
        return await db_runs.list_runs(tx, task_id=task_id, status=None, before=None, limit=50)


async def test_boot_runs_once_per_appliance_start_not_per_worker_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = make_runtime(state)
    first.start_id = "start-1"
    await first.start()
    try:
        async with first.db.write() as tx:
            task = await db_tasks.create_task(tx, ids.uuid7(), TaskFields(
                name="b", command="true", schedule="@boot", env={}, labels=[]),
                1)
            other = await db_tasks.create_task(tx, ids.uuid7(), TaskFields(
                name="x", command="true", schedule="0 0 1 1 *", env={},
                labels=[], extra_schedules=["@boot"]), 1)
        # the first start claimed its @boot before the tasks existed: nothing ran
        assert await _boot_runs(first, task.id) == []
    finally:
        await first.stop()
    for start_id, want in (("start-2", 1), ("start-2", 1), ("start-3", 2)):
        rt = make_runtime(state)
        rt.start_id = start_id  # a worker respawn keeps the id; an appliance start changes it
        await rt.start()
        try:
            for task_id in (task.id, other.id):
                runs = await _boot_runs(rt, task_id)
                assert len(runs) == want, (start_id, runs)
                assert {r.trigger for r in runs} == {Trigger.SCHEDULE}
                for _ in range(200):  # let them end: a run still active would be skipped
                    if all(r.status in TERMINAL_RUN for r in await _boot_runs(rt, task_id)):
                        break
                    await asyncio.sleep(0.05)
        finally:
            await rt.stop()


def test_the_default_start_id_is_the_supervisor_on_this_boot() -> None:
    import os

    from qledge.runtime.lifecycle import appliance_start_id

    got = appliance_start_id("boot-x")
    assert got.startswith(f"boot-x:{os.getppid()}:") and not got.endswith(":0")
    assert appliance_start_id("boot-x") == got
