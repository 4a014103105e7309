"""Chains (runtime/chains.py): run B after A, created with A's end, cycles refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import operations
from qledge.db import attempts as db_attempts
from qledge.db import events as db_events
from qledge.db import runs as db_runs
from qledge.model import Event, Run, RunStatus, Task, Trigger
from qledge.runtime import chains
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import task_fields

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


async def new_task(rt: Runtime, command: str, **fields: Any) -> Task:
    return await operations.create_task(rt, task_fields({
        "name": "c", "command": command, "env": {}, "labels": [], **fields}))


async def runs_of(rt: Runtime, task_id: str) -> list[Run]:
    async with rt.db.read() as tx:
        return list(reversed(await db_runs.list_runs(tx, task_id=task_id, status=None,
                                                   before=None, limit=50)))


async def events(rt: Runtime, run_id: str) -> list[Event]:
    async with rt.db.read() as tx:
        return await db_events.list_events(tx, run_id)


async def ended(rt: Runtime, run_id: str, timeout: float = 20) -> Run:
    for _ in range(int(timeout / 0.05)):
        async with rt.db.read() as tx:
            run = await db_runs.get_run(tx, run_id)
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end")


def test_targets_follow_the_outcome() -> None:
    task = Task(id="a", num=1, name="a", command="true", schedule=None, timeout_s=None,
                env={}, enabled=True, concurrency="forbid", labels=[], created_at_ms=1,  # type: ignore[arg-type]
                updated_at_ms=1, version=1, on_success=["s", "f"], on_failure=["x"],
                on_finish=["f"])
    assert chains.targets(task, RunStatus.SUCCEEDED) == ["s", "f"]
    for bad in (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.LOST, RunStatus.BLOCKED):
        assert chains.targets(task, bad) == ["x", "f"]
    assert chains.targets(task, RunStatus.CANCELLED) == ["f"]


async def test_success_and_failure_branches(rt: Runtime) -> None:
    ok_next = await new_task(rt, "true")
    bad_next = await new_task(rt, "true")
    always = await new_task(rt, "true")
    for command, want in (("true", ok_next), ("exit 4", bad_next)):
        up = await new_task(rt, command, on_success=[ok_next.id], on_failure=[bad_next.id],
                            on_finish=[always.id])
        run = await operations.trigger(rt, up.id, Trigger.API)
        done = await ended(rt, run.id)
        downs = [r for r in await runs_of(rt, want.id) if r.trigger is Trigger.CHAIN]
        assert downs, f"no chained run of {want.name} after {command}"
        down = downs[-1]
        assert (await ended(rt, down.id)).status is RunStatus.SUCCEEDED
        by = [e.data for e in await events(rt, down.id) if e.type == "chain.triggered_by"]
        assert by == [{"run_id": run.id, "task_id": up.id, "status": done.status.value}]
        up_events = await events(rt, run.id)
        triggered = [e.data["task_id"] for e in up_events if e.type == "chain.triggered"]
        assert triggered == [want.id, always.id]
        # the downstream run commits with the upstream end: it exists before the
        # upstream's run.finished could be read without it
        assert up_events[-1].type == "chain.triggered"
    assert len(await runs_of(rt, ok_next.id)) == 1 and len(await runs_of(rt, bad_next.id)) == 1
    assert len(await runs_of(rt, always.id)) == 2


async def test_a_retrying_run_chains_once_after_its_last_attempt(rt: Runtime) -> None:
    down = await new_task(rt, "true")
    up = await new_task(rt, "exit 1", retries=2, retry_delay_s=0, on_failure=[down.id])
    run = await operations.trigger(rt, up.id, Trigger.API)
    assert (await ended(rt, run.id)).status is RunStatus.FAILED
    await asyncio.sleep(0.3)
    async with rt.db.read() as tx:
        assert len(await db_attempts.attempts_of_run(tx, run.id)) == 3
    assert len(await runs_of(rt, down.id)) == 1


async def test_disabled_and_skipping_targets_are_recorded_not_run(rt: Runtime) -> None:
    off = await new_task(rt, "true", enabled=False)
    gate = rt.settings.work_path / "g"
    busy = await new_task(rt, f'while [ ! -e "{gate}" ]; do sleep 0.05; done', overlap="skip")
    blocking = await operations.trigger(rt, busy.id, Trigger.API)
    up = await new_task(rt, "true", on_finish=[off.id, busy.id])
    run = await operations.trigger(rt, up.id, Trigger.API)
    await ended(rt, run.id)
    skipped = [e.data for e in await events(rt, run.id) if e.type == "chain.skipped"]
    assert skipped == [{"task_id": off.id, "reason": "disabled"},
                       {"task_id": busy.id, "reason": "active_run"}]
    assert await runs_of(rt, off.id) == [] and len(await runs_of(rt, busy.id)) == 1
    gate.touch()
    await ended(rt, blocking.id)


def test_cycles_and_unknown_tasks_are_refused_naming_the_field(client: TestClient) -> None:
    def make(**kw: Any) -> dict[str, Any]:
        r = client.post("/api/v1/tasks", json={"name": "t", "command": "true", **kw})
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        return body

    c = make()
    b = make(on_failure=[c["id"]])
    a = make(on_success=[b["id"]])
    r = client.patch(f"/api/v1/tasks/{c['id']}", json={"on_finish": [a["id"]]})
    assert (r.status_code, r.json()["field"]) == (422, "on_finish"), r.text
    assert "cycle" in r.json()["message"]
    r = client.patch(f"/api/v1/tasks/{a['id']}", json={"on_failure": [a["id"]]})
    assert (r.status_code, r.json()["field"]) == (422, "on_failure"), r.text
    r = client.post("/api/v1/tasks", json={"name": "x", "command": "true",
                                           "on_success": ["no-such-task"]})
    assert (r.status_code, r.json()["field"]) == (422, "on_success"), r.text
    # nothing of the refused saves was kept
    assert client.get(f"/api/v1/tasks/{c['id']}").json()["on_finish"] == []
    assert len(client.get("/api/v1/tasks").json()["items"]) == 3
    # a diamond is not a cycle
    d = make(on_success=[b["id"], c["id"]])
    assert d["on_success"] == [b["id"], c["id"]]
