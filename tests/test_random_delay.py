"""QingLong's random delay: a persisted not-before time on a scheduled `task` run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge import ids
from qledge.clock import now_ms
from qledge.db import events, runs, tasks
from qledge.db.sqlite import Database
from qledge.model import Run, RunStatus, Task, Trigger
from qledge.runtime.lifecycle import Runtime
from qledge.runtime.scheduler import Scheduler, random_delay_ms
from qledge.tasks.writable import TaskFields, task_fields

from support import ADMIN, make_runtime, run_when, time_zone

SHANGHAI = timezone(timedelta(hours=8))


def at(*args: int) -> int:
    return int(datetime(*args, tzinfo=SHANGHAI).timestamp() * 1000)  # type: ignore[misc]


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


async def make_task(db: Database, command: str) -> str:
    body = {"name": "t", "command": command, "schedule": "* * * * *", "env": {},
            "labels": []}
    async with db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields(body),
                                       at(2024, 1, 1, 10, 0, 30))
    return task.id


async def runs_of(db: Database, task_id: str) -> list[Run]:
    async with db.read() as tx:
        return await runs.list_runs(tx, task_id=task_id, status=None, before=None, limit=10)


@pytest.fixture(autouse=True)
def tz() -> Iterator[None]:
    with time_zone("Asia/Shanghai"):
        yield


def _task(command: str) -> Task:
    return Task(id="t", num=1, name="t", command=command, schedule=None, timeout_s=None,
                env={}, enabled=True, concurrency="forbid", labels=[],  # type: ignore[arg-type]
                created_at_ms=0, updated_at_ms=0, version=1)


@pytest.mark.parametrize(("command", "delayed"), [
    ("task sign.js", True),
    ("task -m 10m sign.js -- --x", True),
    ("task sign.js now", False),
    ("task sign.js desi C 1", False),
    ("task sign.js conc C 1", False),
    ("task sign.js arg", False),
    ("task sign.js; rm x", False),  # refused at spawn, without waiting first
    ("node sign.js", False),
])
def test_only_the_plain_task_form_is_delayed(command: str, delayed: bool) -> None:
    for _ in range(50):
        d = random_delay_ms(_task(command), 3)
        assert (0 < d <= 3000) if delayed else d == 0
    assert random_delay_ms(_task(command), 0) == 0


async def test_a_scheduled_run_gets_a_persisted_not_before_time(db: Database) -> None:
    task_id = await make_task(db, "task sign.js")
    clock = Clock(at(2024, 1, 1, 10, 1) + 7)
    await Scheduler(db, clock=clock, random_delay_s=30).round()
    (run,) = await runs_of(db, task_id)
    assert run.not_before_ms is not None
    assert clock.ms < run.not_before_ms <= clock.ms + 30_000
    async with db.read() as tx:
        evs = await events.list_events(tx, run.id)
    assert evs[0].type == "run.created"
    assert evs[0].data["not_before_ms"] == run.not_before_ms
    other = await make_task(db, "task sign.js now")
    await Scheduler(db, clock=clock, random_delay_s=30).round()
    assert (await runs_of(db, other))[0].not_before_ms is None


async def _queue_delayed(rt: Runtime, command: str, delay_ms: int) -> tuple[str, int]:
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command=command, env={}, labels=[],
            concurrency="allow"), 1)
        at_ms = now_ms() + delay_ms
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.SCHEDULE, now_ms(),
                                     not_before_ms=at_ms)
    return run.id, at_ms


async def _get(rt: Runtime, run_id: str) -> Run:
    async with rt.db.read() as tx:
        return await runs.get_run(tx, run_id)


async def _until_terminal(rt: Runtime, run_id: str, timeout: float = 20.0) -> Run:
    return await run_when(rt, run_id, timeout=timeout)


async def test_the_dispatcher_starts_a_delayed_run_at_its_time_not_before(
        tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "s")
    await rt.start()
    try:
        run_id, at_ms = await _queue_delayed(rt, "true", 1500)
        # A run without a delay, queued after it, is not held up by it.
        now_task = await store_task(rt, "true")
        rt.kick()
        await asyncio.sleep(0.5)
        assert (await _get(rt, run_id)).status is RunStatus.QUEUED
        assert (await _until_terminal(rt, now_task)).status is RunStatus.SUCCEEDED
        run = await _until_terminal(rt, run_id)
        assert run.status is RunStatus.SUCCEEDED
        assert run.started_at_ms is not None and run.started_at_ms >= at_ms
        assert run.started_at_ms < at_ms + 5000  # woken by its timer, not by chance
    finally:
        await rt.stop()


async def store_task(rt: Runtime, command: str) -> str:
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="n", command=command, env={}, labels=[],
            concurrency="allow"), 1)
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.API, now_ms())
    return run.id


async def test_the_wait_survives_a_restart(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "s")
    await rt.start()
    run_id, at_ms = await _queue_delayed(rt, "true", 2000)
    rt.kick()
    await asyncio.sleep(0.2)
    await rt.stop()
    assert (await _get_offline(tmp_path, run_id)).status is RunStatus.QUEUED
    rt = make_runtime(tmp_path / "s")
    await rt.start()
    try:
        run = await _until_terminal(rt, run_id)
        assert run.status is RunStatus.SUCCEEDED
        assert run.started_at_ms is not None and run.started_at_ms >= at_ms
        assert run.not_before_ms == at_ms
    finally:
        await rt.stop()


async def _get_offline(tmp_path: Path, run_id: str) -> Run:
    rt = make_runtime(tmp_path / "s")
    await rt.db.open()
    try:
        return await _get(rt, run_id)
    finally:
        await rt.db.close()


def test_the_api_shows_the_not_before_time(client: TestClient) -> None:
    h = {"Authorization": f"Bearer {ADMIN}"}
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]

    async def queue() -> tuple[str, int]:
        return await _queue_delayed(rt, "true", 3_600_000)

    run_id, at_ms = client.portal.call(queue)  # type: ignore[attr-defined]
    body = client.get(f"/api/v1/runs/{run_id}", headers=h).json()
    assert body["status"] == "queued"
    assert body["not_before_ms"] == at_ms
