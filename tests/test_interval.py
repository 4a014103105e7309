"""Interval schedules (`@every 6h`): the form, QingLong's interval_schedule, and the
real Scheduler firing them with an injected clock — on a grid from the task's last
save, once per due tick, with no double fire across a restart and one catch-up
after downtime (docs/tasks.md, "Schedules")."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import cron, ids, interval
from qledge.db import events as db_events
from qledge.db import runs as db_runs
from qledge.db import schedule as db_schedule
from qledge.db import tasks as db_tasks
from qledge.db.sqlite import Database
from qledge.model import Run, Trigger
from qledge.runtime.scheduler import Scheduler
from qledge.tasks.writable import TaskFields, task_fields

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = 1_717_200_030_123  # a save time that is not on a whole minute or second


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


async def make_task(db: Database, created_ms: int = T0, **fields: Any) -> str:
    body = {"name": "t", "command": "true", "env": {}, "labels": [], "overlap": "allow",
            "schedule": cron.validate("@every 90m"), **fields}
    async with db.write() as tx:
        task = await db_tasks.create_task(tx, ids.uuid7(), task_fields(body), created_ms)
    return task.id


async def scheduled_for(db: Database, task_id: str) -> list[int]:
    """Each schedule run's due time, oldest first."""
    async with db.read() as tx:
        found: list[Run] = await db_runs.list_runs(tx, task_id=task_id, status=None,
                                                   before=None, limit=1000)
        out = []
        for run in reversed(found):
            assert run.trigger is Trigger.SCHEDULE
            [ev] = [e for e in await db_events.list_events(tx, run.id)
                    if e.type == "run.scheduled"]
            out.append(int(ev.data["scheduled_for_ms"]))
        return out


async def cancel_queued(db: Database, task_id: str, now: int) -> None:
    """End queued runs, so `allow`'s no-pile-up rule never hides a tick."""
    from qledge import transitions
    from qledge.model import CancelReason

    async with db.write() as tx:
        queued = await db_runs.queued_run_of_task(tx, task_id)
        if queued is not None:
            tr = transitions.request_cancel(queued, CancelReason.USER, now)
            assert tr is not None
            run = await db_runs.apply(tx, queued, tr, now)
            await db_runs.apply(tx, run, transitions.cancel_queued(run, now), now)


# -- the form ----------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "stored", "seconds"), [
    ("@every 6h", "@every 6h", 6 * 3600),
    ("@every 90m", "@every 1h30m", 5400),
    ("  @EVERY   1h30m ", "@every 1h30m", 5400),
    ("@every 30m1h", "@every 1h30m", 5400),
    ("@every 60s", "@every 1m", 60),
    ("@every 2d", "@every 2d", 2 * 86400),
    ("@every 1d1h1m1s", "@every 1d1h1m1s", 90061),
    ("@every 31d", "@every 31d", 31 * 86400),
])
def test_intervals_are_stored_in_one_spelling(given: str, stored: str, seconds: int) -> None:
    assert cron.validate(given) == stored
    assert interval.period_ms(stored) == seconds * 1000
    assert cron.validate(stored) == stored  # idempotent: a stored value re-validates


@pytest.mark.parametrize(("unit", "value", "expr"), [
    ("days", 1, "@every 1d"), ("hours", 6, "@every 6h"), ("minutes", 90, "@every 1h30m"),
    ("seconds", 120, "@every 2m"), ("hours", "12", "@every 12h"), ("days", 31, "@every 31d"),
])
def test_qinglong_interval_schedule_maps_both_ways(unit: str, value: Any, expr: str) -> None:
    assert interval.from_qinglong(unit, value) == expr
    back = interval.to_qinglong(expr)
    assert back is not None
    assert interval.from_qinglong(back["type"], back["value"]) == expr
    assert interval.to_qinglong("@every 1h30m") == {"type": "minutes", "value": 90}
    assert interval.to_qinglong("0 * * * *") is None


@pytest.mark.parametrize(("unit", "value", "why"), [
    ("seconds", 30, "at least 60 s"), ("days", 32, "at most 31 days"),
    ("weeks", 1, "type must be one of days, hours, minutes, seconds"),
    ("milliseconds", 60000, "type must be one of"), ("hours", 0, "at least 1"),
    ("hours", 1.5, "whole number"), ("hours", True, "whole number"),
    ("hours", None, "whole number"), ("minutes", 10**12, "at most 31 days"),
    ("hours", "\u00b2", "whole number"),  # isdigit() took it, int() did not: a 500
])
def test_bad_qinglong_intervals_are_refused(unit: str, value: Any, why: str) -> None:
    with pytest.raises(interval.IntervalError, match=why):
        interval.from_qinglong(unit, value)


def test_the_grid_starts_one_period_after_the_anchor() -> None:
    p = 90 * MINUTE
    assert interval.first_after(p, T0, T0) == T0 + p
    assert interval.first_after(p, T0, T0 - HOUR) == T0 + p  # never before the anchor
    assert interval.first_after(p, T0, T0 + p) == T0 + 2 * p  # strictly after
    assert interval.last_at_or_before(p, T0, T0 + p - 1) is None
    assert interval.last_at_or_before(p, T0, T0 + p) == T0 + p
    assert interval.last_at_or_before(p, T0, T0 + 10 * p + 5) == T0 + 10 * p
    # through cron.py as the scheduler and the previews call it (no zone involved)
    ticks = cron.next_ticks("@every 1h30m", T0 + 1, 3, "Asia/Shanghai", anchor_ms=T0)
    assert [int(t.timestamp() * 1000) for t in ticks] == [T0 + p, T0 + 2 * p, T0 + 3 * p]
    assert cron.first_due_after("@every 1h30m", T0 + 5, None) == T0 + 5 + p  # preview: now
    assert cron.last_due_at_or_before("@every 1h30m", T0 + 5 * p, None) is None


# -- the real scheduler ------------------------------------------------------------------

async def test_an_interval_fires_on_its_grid_and_a_restart_neither_shifts_nor_doubles(
        db: Database) -> None:
    task_id = await make_task(db)
    p = 90 * MINUTE
    clock = Clock(T0 + p - 1)
    sched = Scheduler(db, clock=clock)
    assert await sched.round() == T0 + p  # sleeps until the first tick
    assert await scheduled_for(db, task_id) == []

    clock.ms = T0 + p + 7
    assert await sched.round() == T0 + 2 * p
    assert await scheduled_for(db, task_id) == [T0 + p]
    async with db.read() as tx:
        [run] = await db_runs.list_runs(tx, task_id=task_id, status=None, before=None,
                                        limit=10)
        evs = {e.type: dict(e.data) for e in await db_events.list_events(tx, run.id)}
    assert evs["run.scheduled"] == {"scheduled_for_ms": T0 + p, "late_ms": 7, "catch_up": 0}
    await cancel_queued(db, task_id, clock.ms)

    # A worker restart: a new Scheduler on the same database, the same tick seen again.
    clock.ms = T0 + p + 1000
    restarted = Scheduler(db, clock=clock)
    assert await restarted.round() == T0 + 2 * p  # the grid did not move
    assert await scheduled_for(db, task_id) == [T0 + p]  # and nothing fired twice

    clock.ms = T0 + 2 * p
    await restarted.round()
    assert await scheduled_for(db, task_id) == [T0 + p, T0 + 2 * p]
    async with db.read() as tx:
        assert await db_schedule.last_due(tx, task_id) == T0 + 2 * p


async def test_after_downtime_an_interval_fires_once_for_the_latest_tick(db: Database) -> None:
    task_id = await make_task(db, schedule=cron.validate("@every 1h"))
    clock = Clock(T0 + HOUR)
    sched = Scheduler(db, clock=clock)
    await sched.round()
    await cancel_queued(db, task_id, clock.ms)
    clock.ms = T0 + 10 * HOUR + 25 * MINUTE  # nine ticks missed while nobody ran
    assert await Scheduler(db, clock=clock).round() == T0 + 11 * HOUR
    assert await scheduled_for(db, task_id) == [T0 + HOUR, T0 + 10 * HOUR]
    async with db.read() as tx:
        [latest, _] = await db_runs.list_runs(tx, task_id=task_id, status=None, before=None,
                                              limit=10)
        [ev] = [e for e in await db_events.list_events(tx, latest.id)
                if e.type == "run.scheduled"]
    assert ev.data["catch_up"] == 1 and ev.data["late_ms"] == 25 * MINUTE
    await cancel_queued(db, task_id, clock.ms)
    clock.ms = T0 + 11 * HOUR  # back on the grid, on time
    await sched.round()
    assert (await scheduled_for(db, task_id))[-1] == T0 + 11 * HOUR


async def test_saving_the_task_moves_the_grid_and_never_replays(db: Database) -> None:
    task_id = await make_task(db, schedule=cron.validate("@every 1h"))
    clock = Clock(T0 + HOUR)
    sched = Scheduler(db, clock=clock)
    await sched.round()
    await cancel_queued(db, task_id, clock.ms)
    edit = T0 + HOUR + 20 * MINUTE
    async with db.write() as tx:  # disabled, then enabled again 20 minutes later
        await db_tasks.update_task(tx, task_id, TaskFields(enabled=False), edit)
        await db_tasks.update_task(tx, task_id, TaskFields(enabled=True), edit + 20 * MINUTE)
    clock.ms = T0 + 2 * HOUR + 30 * MINUTE  # the old grid's 2h tick fell while disabled
    assert await sched.round() == edit + 20 * MINUTE + HOUR
    assert await scheduled_for(db, task_id) == [T0 + HOUR]
    clock.ms = edit + 20 * MINUTE + HOUR
    await sched.round()
    assert await scheduled_for(db, task_id) == [T0 + HOUR, edit + 20 * MINUTE + HOUR]


async def test_an_interval_beside_a_cron_schedule_keeps_its_own_grid(db: Database) -> None:
    start = 1_717_200_000_000 + 30_000  # 00:00:30 UTC
    task_id = await make_task(db, start, schedule="0 * * * *",
                              extra_schedules=[cron.validate("@every 90m")], tz="UTC")
    clock = Clock(start)
    sched = Scheduler(db, clock=clock)
    while clock.ms < start + 4 * HOUR:
        clock.ms += MINUTE // 2
        await sched.round()
        await cancel_queued(db, task_id, clock.ms)
    hourly = [start - 30_000 + k * HOUR for k in range(1, 5)]
    every = [start + k * 90 * MINUTE for k in (1, 2)]
    assert await scheduled_for(db, task_id) == sorted(hourly + every)


def test_tasks_api_accepts_intervals_and_refuses_bad_ones(client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json={"name": "i", "command": "true",
                                           "schedule": "@every 90m",
                                           "extra_schedules": ["@every 2d"]})
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["schedule"] == "@every 1h30m" and task["extra_schedules"] == ["@every 2d"]
    saved = task["updated_at_ms"]
    assert task["next_fire_at_ms"] == saved + 90 * MINUTE
    for bad, why in [("@every 59s", "at least 60 s"), ("@every 40d", "at most 31 days"),
                     ("@every soon", "not an interval")]:
        r = client.post("/api/v1/tasks", json={"name": "i", "command": "true",
                                               "schedule": bad})
        assert r.status_code == 422 and r.json()["field"] == "schedule", r.text
        assert why in r.json()["message"]
    r = client.get("/api/v1/cron/preview", params={"schedule": "@every 6h", "n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schedule"] == "@every 6h"
    first, second = (t["at_ms"] for t in body["next"])
    assert second - first == 6 * HOUR
