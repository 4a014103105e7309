"""Overlap policies (runtime/overlap.py) with the real launcher: skip, queue, replace,
allow — for manual runs and for fast cron ticks."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import operations, settings
from qledge.clock import now_ms
from qledge.db import attempts as db_attempts
from qledge.db import events as db_events
from qledge.db import runs as db_runs
from qledge.model import Attempt, Event, Run, RunStatus, Task, Trigger
from qledge.operations import ActiveRun, start_run
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import TaskFields, task_fields

from support import eventually_async, make_runtime

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "state", max_concurrent_attempts="4")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def task_with(rt: Runtime, command: str, **fields: Any) -> Task:
    return await operations.create_task(rt, task_fields({
        "name": "o", "command": command, "env": {}, "labels": [], **fields}))


def gated(rt: Runtime, name: str, tail: str = "exit 0") -> str:
    gate = rt.settings.work_path / name
    return f'while [ ! -e "{gate}" ]; do sleep 0.05; done; {tail}'


async def state(rt: Runtime, run_id: str) -> tuple[Run, list[Attempt], list[Event]]:
    async with rt.db.read() as tx:
        return (await db_runs.get_run(tx, run_id), await db_attempts.attempts_of_run(tx, run_id),
                await db_events.list_events(tx, run_id))


async def until(rt: Runtime, run_id: str, check: Any, what: str, timeout: float = 20) -> Run:
    async def holds() -> Run | None:
        run, attempts, _ = await state(rt, run_id)
        return run if check(run, attempts) else None

    return await eventually_async(holds, timeout=timeout, interval=0.05,
                                  what=f"run {run_id}: {what}")


def running(run: Run, attempts: list[Attempt]) -> bool:
    return run.status is RunStatus.RUNNING


def ended(run: Run, attempts: list[Attempt]) -> bool:
    return run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)


async def test_skip_refuses_a_second_run_naming_the_active_one(rt: Runtime) -> None:
    task = await task_with(rt, gated(rt, "g"), overlap="skip")
    first = await start_run(rt, task.id, Trigger.API)
    assert first.outcome == "started"
    with pytest.raises(ActiveRun) as refused:
        await start_run(rt, task.id, Trigger.API)
    assert (refused.value.run_id, refused.value.reason) == (first.run.id, "active_run")
    (rt.settings.work_path / "g").touch()
    assert (await until(rt, first.run.id, ended, "end")).status is RunStatus.SUCCEEDED


async def test_queue_keeps_one_waiting_run_that_starts_after_the_running_one(
        rt: Runtime) -> None:
    task = await task_with(rt, gated(rt, "g"), overlap="queue")
    first = await start_run(rt, task.id, Trigger.API)
    await until(rt, first.run.id, running, "running")
    second = await start_run(rt, task.id, Trigger.API)
    assert second.outcome == "queued"
    with pytest.raises(ActiveRun) as refused:
        await start_run(rt, task.id, Trigger.API)
    assert (refused.value.run_id, refused.value.reason) == (second.run.id, "queued_run")
    await asyncio.sleep(0.5)  # a free slot does not start it beside the running one
    assert (await state(rt, second.run.id))[1] == []
    (rt.settings.work_path / "g").touch()
    await until(rt, second.run.id, ended, "second ends")
    _, a1, _ = await state(rt, first.run.id)
    done, a2, _ = await state(rt, second.run.id)
    assert done.status is RunStatus.SUCCEEDED and a1[0].finished_at_ms is not None
    assert a2[0].created_at_ms >= a1[0].finished_at_ms


async def test_replace_cancels_through_the_fenced_path_and_the_late_receipt_loses(
        rt: Runtime) -> None:
    """The replaced command traps TERM and exits 0: its receipt (exit 0, written after
    the intent) cannot make it `succeeded` — the committed policy cancel wins."""
    marker = rt.settings.work_path / "started"
    task = await task_with(
        rt, f"trap 'exit 0' TERM; touch {marker}; while :; do sleep 0.05; done",
        overlap="replace")
    first = await start_run(rt, task.id, Trigger.API)
    await until(rt, first.run.id, lambda r, a: running(r, a) and marker.exists(), "running")
    second = await start_run(rt, task.id, Trigger.API)
    assert second.replaced == [first.run.id] and second.outcome == "queued"
    old = await until(rt, first.run.id, ended, "replaced run ends")
    _, old_attempts, old_events = await state(rt, first.run.id)
    assert old.status is RunStatus.CANCELLED and old.reason_code == "CANCEL_REQUESTED", old
    assert old_attempts[0].exit_code == 0  # the receipt came, and lost to the intent
    cancel = [e.data for e in old_events if e.type == "run.cancel_requested"]
    assert cancel == [{"reason": "policy"}]
    assert {"run_id": second.run.id} in [e.data for e in old_events
                                         if e.type == "run.replaced_by"]
    _, _, new_events = await state(rt, second.run.id)
    assert [e.data for e in new_events if e.type == "run.replaces"] == [
        {"run_id": first.run.id}]
    await until(rt, second.run.id, running, "the new run starts after the old one")
    _, new_attempts, _ = await state(rt, second.run.id)
    assert old_attempts[0].finished_at_ms is not None
    assert new_attempts[0].created_at_ms >= old_attempts[0].finished_at_ms
    await operations.cancel_run(rt, second.run.id)
    # Stopped before the runtime is: a stop right after the cancel may drop its driver
    # before TERM, and the trapping loop would outlive the test.
    await until(rt, second.run.id, ended, "the new run cancelled")


async def test_allow_runs_side_by_side(rt: Runtime) -> None:
    task = await task_with(rt, gated(rt, "g"), overlap="allow")
    runs = [await start_run(rt, task.id, Trigger.API) for _ in range(3)]
    for got in runs:
        await until(rt, got.run.id, running, "running")
    (rt.settings.work_path / "g").touch()
    for got in runs:
        assert (await until(rt, got.run.id, ended, "end")).status is RunStatus.SUCCEEDED


def test_http_answers_started_queued_and_409_with_the_reason(
        client: TestClient, conf: settings.Settings) -> None:
    gate = conf.work_path / "g"
    task = client.post("/api/v1/tasks", json={
        "name": "q", "command": f'while [ ! -e "{gate}" ]; do sleep 0.05; done',
        "overlap": "queue"}).json()
    url = f"/api/v1/tasks/{task['id']}/runs"
    r1 = client.post(url)
    assert r1.status_code == 202 and r1.json()["outcome"] == "started", r1.text
    first = r1.json()["run"]["id"]
    for _ in range(400):
        if client.get(f"/api/v1/runs/{first}").json()["status"] == "running":
            break
        time.sleep(0.05)
    r2 = client.post(url)
    assert r2.status_code == 202 and r2.json()["outcome"] == "queued", r2.text
    r3 = client.post(url)
    assert r3.status_code == 409, r3.text
    assert (r3.json()["reason"], r3.json()["active_run_id"]) == (
        "queued_run", r2.json()["run"]["id"])
    gate.touch()


# -- fast ticks -------------------------------------------------------------------------


async def runs_of(rt: Runtime, task_id: str) -> list[tuple[Run, list[Attempt], list[Event]]]:
    async with rt.db.read() as tx:
        runs = await db_runs.list_runs(tx, task_id=task_id, status=None, before=None, limit=100)
    return [await state(rt, r.id) for r in reversed(runs)]


def never_two_attempts_at_once(items: list[tuple[Run, list[Attempt], list[Event]]]) -> None:
    spans = sorted((a.created_at_ms, a.finished_at_ms or now_ms()) for _, atts, _ in items
                   for a in atts)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans


async def test_queue_with_ticks_every_second_never_piles_up(rt: Runtime) -> None:
    task = await task_with(rt, gated(rt, "g"), overlap="queue", schedule="* * * * * *")
    await asyncio.sleep(3.6)
    await operations.update_task(rt, task.id, TaskFields(enabled=False))
    items = await runs_of(rt, task.id)
    statuses = [run.status for run, _, _ in items]
    assert statuses == [RunStatus.RUNNING, RunStatus.QUEUED], statuses
    skipped = [e.data["reason"] for e in items[1][2] if e.type == "schedule.skipped"]
    assert skipped and set(skipped) == {"queued_run"}
    (rt.settings.work_path / "g").touch()
    await until(rt, items[1][0].id, ended, "queued run ends")
    never_two_attempts_at_once(await runs_of(rt, task.id))


async def test_replace_with_ticks_every_second_keeps_only_the_newest(rt: Runtime) -> None:
    task = await task_with(rt, "sleep 30", overlap="replace", schedule="* * * * * *")
    await asyncio.sleep(4.2)
    await operations.update_task(rt, task.id, TaskFields(enabled=False))
    items = await runs_of(rt, task.id)
    assert len(items) >= 3, [r.status for r, _, _ in items]
    newest = items[-1][0]
    for run, _, events in items[:-1]:
        run = await until(rt, run.id, ended, "replaced run ends")
        assert run.status is RunStatus.CANCELLED, run
        assert any(e.type == "run.replaced_by" for e in events)
    assert newest.status in (RunStatus.QUEUED, RunStatus.RUNNING)
    await operations.cancel_run(rt, newest.id)
    await until(rt, newest.id, ended, "newest ends")
    never_two_attempts_at_once(await runs_of(rt, task.id))


async def test_conc_children_of_a_skip_task_run_side_by_side_and_chain_once(
        rt: Runtime) -> None:
    """A `task … conc` parent stands for its children: they are not held behind each
    other by the overlap policy, and only the parent's end triggers the chain."""
    scripts = rt.settings.scripts_path
    scripts.mkdir(parents=True, exist_ok=True)
    gate = rt.settings.work_path / "g"
    (scripts / "c.sh").write_text(f'while [ ! -e "{gate}" ]; do sleep 0.05; done\n')
    after = await task_with(rt, "true")
    task = await task_with(rt, "task c.sh conc V", env={"V": "a&b&c"}, overlap="skip",
                           on_finish=[after.id])
    parent = await start_run(rt, task.id, Trigger.API)

    async def children_running() -> int:
        async with rt.db.read() as tx:
            runs = await db_runs.list_runs(tx, task_id=task.id, status=None, before=None,
                                         limit=10)
        return sum(r.status is RunStatus.RUNNING and r.parent_run_id is not None for r in runs)

    for _ in range(400):
        if await children_running() == 3:
            break
        await asyncio.sleep(0.05)
    assert await children_running() == 3  # side by side, not one at a time
    with pytest.raises(ActiveRun):  # the parent is the task's active run
        await start_run(rt, task.id, Trigger.API)
    gate.touch()
    await until(rt, parent.run.id, ended, "parent ends")
    await asyncio.sleep(0.3)
    async with rt.db.read() as tx:
        chained = await db_runs.list_runs(tx, task_id=after.id, status=None, before=None,
                                        limit=10)
    assert len(chained) == 1 and chained[0].trigger is Trigger.CHAIN
    by = [e.data["run_id"] for e in (await state(rt, chained[0].id))[2]
          if e.type == "chain.triggered_by"]
    assert by == [parent.run.id]
