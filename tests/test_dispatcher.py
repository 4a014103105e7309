"""Dispatcher: the two doors (the loop and a trigger's own commit) and one admission rule."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qledge import ids
from qledge.clock import now_ms
from qledge.db import attempts, events, runs, tasks
from qledge.launch.executor import Prepared
from qledge.model import Run, RunStatus, Trigger
from qledge.operations import trigger
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import TaskFields, task_fields

from support import add_task, make_runtime

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "state", max_concurrent_attempts="2")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def _run(rt: Runtime, run_id: str) -> tuple[Run, list[str]]:
    async with rt.db.read() as tx:
        run = await runs.get_run(tx, run_id)
        tried = [a.id for a in await attempts.attempts_of_run(tx, run_id)]
    return run, tried


async def _terminal(rt: Runtime, run_id: str, timeout: float = 20.0) -> Run:
    for _ in range(int(timeout / 0.02)):
        run, _ = await _run(rt, run_id)
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return run
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} not terminal")


async def test_trigger_with_a_free_slot_prepares_in_its_own_commit(rt: Runtime) -> None:
    task_id = await add_task(rt, "true")
    # The write transactions the trigger itself opens (background loops — retention,
    # supervision — may commit meanwhile on a loaded machine; they don't count).
    mine: list[object] = []
    write = rt.db.write

    def counted(**kw: bool) -> Any:
        mine.append(asyncio.current_task())
        return write(**kw)

    rt.db.write = counted  # type: ignore[method-assign]
    try:
        run = await trigger(rt, task_id, Trigger.API)
    finally:
        rt.db.write = write  # type: ignore[method-assign]
    # One commit created the run and did spawn step 1: the attempt already exists.
    assert mine.count(asyncio.current_task()) == 1, mine
    _, attempts = await _run(rt, run.id)
    assert len(attempts) == 1
    assert (await _terminal(rt, run.id)).status is RunStatus.SUCCEEDED
    async with rt.db.read() as tx:
        types = [e.type for e in await events.list_events(tx, run.id)]
    assert types[:2] == ["run.created", "attempt.created"]
    # Its receipt is deleted once the (deferred) result commit is covered by an
    # fsync: here no other durable commit comes, so the reaper pays for one.
    for _ in range(500):
        durability = (await rt.report())["durability"]
        if durability["receipts_reaped"]:  # type: ignore[index]
            break
        await asyncio.sleep(0.01)
    assert durability == {**durability, "receipts_reaped": 1, "receipts_awaiting_fsync": 0,
                          "forced_syncs": 1}, durability
    assert not list(rt.settings.receipts_path.glob("*/*.json"))


async def test_a_run_prepared_by_its_trigger_is_not_prepared_twice(rt: Runtime) -> None:
    task_id = await add_task(rt, "true")
    async with rt.db.write() as tx:
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 1)
        prepared = await rt.dispatcher.admit_new(tx, run, await tasks.get_task(tx, task_id))
    assert prepared is not None
    # The loop's door sees the run still `queued` (identity not persisted yet).
    assert await rt.dispatcher.dispatch_once() == 0
    rt.dispatcher.launch_soon(prepared)
    assert (await _terminal(rt, run.id)).status is RunStatus.SUCCEEDED
    _, attempts = await _run(rt, run.id)
    assert attempts == [prepared.attempt.id]


async def test_a_new_run_never_overtakes_one_that_waits(rt: Runtime) -> None:
    task_id = await add_task(rt, "true")
    hold: str | None = "held for the test"

    async def may_spawn() -> str | None:
        return hold

    rt.dispatcher.may_spawn = may_spawn
    older = await trigger(rt, task_id, Trigger.API)
    assert (await _run(rt, older.id))[1] == []  # held: queued, no attempt
    hold = None  # a slot is free, nobody woke the loop yet
    newer = await trigger(rt, task_id, Trigger.API)  # wakes the loop
    await _terminal(rt, older.id)
    await _terminal(rt, newer.id)
    first = (await _run(rt, older.id))[1][0]
    second = (await _run(rt, newer.id))[1][0]
    # UUIDv7: had the newer run started in its own commit, its attempt would be older.
    assert first < second, "the newer run overtook the older one"


async def test_concurrent_triggers_never_exceed_the_limit(rt: Runtime) -> None:
    task_id = await add_task(rt, "sleep 0.3")
    runs = await asyncio.gather(*(trigger(rt, task_id, Trigger.API) for _ in range(8)))
    for run in runs:
        assert (await _terminal(rt, run.id)).status is RunStatus.SUCCEEDED
    async with rt.db.read() as tx:
        spans = [(a.created_at_ms, a.finished_at_ms or 0)
                 for run in runs for a in await attempts.attempts_of_run(tx, run.id)]
    assert len(spans) == 8
    # A slot is held from spawn step 1 (created) to the result; at no instant may
    # more than max_concurrent_attempts (2) of these intervals overlap.
    points = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans],
                    key=lambda p: (p[0], p[1]))
    live = peak = 0
    for _, delta in points:
        live += delta
        peak = max(peak, live)
    assert peak <= 2, spans


async def test_a_trigger_finding_no_free_slot_only_queues(rt: Runtime) -> None:
    busy = await add_task(rt, "sleep 1")
    first = [await trigger(rt, busy, Trigger.API) for _ in range(2)]
    for _ in range(500):
        states = [(await _run(rt, r.id))[0].status for r in first]
        if states == [RunStatus.RUNNING] * 2:
            break
        await asyncio.sleep(0.01)
    assert states == [RunStatus.RUNNING] * 2
    third = await trigger(rt, await add_task(rt, "true"), Trigger.API)
    assert (await _run(rt, third.id))[1] == []  # both slots taken: queued, no attempt
    assert (await _terminal(rt, third.id)).status is RunStatus.SUCCEEDED
    ends = [(await _run(rt, r.id))[0].finished_at_ms or 0 for r in first]
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, third.id)
    assert attempt.created_at_ms >= min(ends)  # it started once a slot was free


async def test_a_cron_tick_with_a_free_slot_prepares_in_the_tick_commit(rt: Runtime) -> None:
    launched: list[str] = []
    launch_soon = rt.dispatcher.launch_soon

    def spy(prepared: Prepared) -> None:
        launched.append(prepared.run.id)
        launch_soon(prepared)

    rt.dispatcher.launch_soon = spy  # type: ignore[method-assign]
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="every second", command="true", env={}, labels=[],
            schedule="* * * * * *", concurrency="allow"), 1)
    rt.scheduler.wake()
    for _ in range(300):
        async with rt.db.read() as tx:
            found = await runs.list_runs(tx, task_id=task.id, status=None, before=None,
                                         limit=10)
        if found:
            break
        await asyncio.sleep(0.01)
    run = found[-1]
    assert (await _terminal(rt, run.id)).status is RunStatus.SUCCEEDED
    async with rt.db.read() as tx:
        types = [e.type for e in await events.list_events(tx, run.id)]
    if rt.node.fleet:
        # A fleet's leader queues its ticks' runs; any node claims them (docs/fleet.md).
        assert run.id not in launched and "attempt.created" in types
        return
    assert run.id in launched  # the tick's own commit did spawn step 1
    assert types[:3] == ["run.created", "run.scheduled", "attempt.created"]


async def test_a_rolled_back_step_one_leaves_nothing_in_flight(rt: Runtime) -> None:
    task_id = await add_task(rt, "true")
    with pytest.raises(RuntimeError):
        async with rt.db.write() as tx:
            run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 1)
            prepared = await rt.dispatcher.admit_new(tx, run, await tasks.get_task(tx, task_id))
            assert prepared is not None and prepared.attempt.id in rt.executor.in_flight
            raise RuntimeError("the commit does not happen")
    assert prepared.attempt.id not in rt.executor.in_flight
    async with rt.db.write() as tx:  # the same inside a savepoint that rolls back
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, 1)
        with pytest.raises(RuntimeError):
            async with tx.savepoint():
                prepared = await rt.dispatcher.admit_new(tx, run, await tasks.get_task(tx, task_id))
                assert prepared is not None
                raise RuntimeError("this unit only")
        assert prepared.attempt.id not in rt.executor.in_flight
        assert await attempts.attempts_of_run(tx, run.id) == []


async def _queue_not_before(rt: Runtime, task_id: str, delay_ms: int) -> Run:
    from qledge.clock import now_ms

    async with rt.db.write() as tx:
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.SCHEDULE,
                                     now_ms(), not_before_ms=now_ms() + delay_ms)
    rt.kick()
    return run


async def test_a_run_waits_for_its_not_before_time_and_then_starts_by_itself(
        rt: Runtime) -> None:
    """Nothing wakes the dispatcher but its own timer; a run without a wait queued
    later is not held up behind the waiting one."""
    task_id = await add_task(rt, "true")
    waiting = await _queue_not_before(rt, task_id, 1500)
    assert waiting.not_before_ms is not None
    await asyncio.sleep(0.5)
    assert await _run(rt, waiting.id) == (waiting, [])  # still queued, no attempt
    other = await trigger(rt, task_id, Trigger.API)
    assert (await _terminal(rt, other.id)).status is RunStatus.SUCCEEDED
    assert (await _run(rt, waiting.id))[1] == []
    done = await _terminal(rt, waiting.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.started_at_ms is not None and done.started_at_ms >= waiting.not_before_ms
    async with rt.db.read() as tx:
        created = (await events.list_events(tx, waiting.id))[0]
    assert created.data == {"trigger": "schedule", "not_before_ms": waiting.not_before_ms}


async def test_a_not_before_time_survives_a_restart(tmp_path: Path) -> None:
    """The wait is in the database: a new runtime neither forgets it nor starts early."""
    first = make_runtime(tmp_path / "state")
    await first.start()
    task_id = await add_task(first, "true")
    waiting = await _queue_not_before(first, task_id, 2500)
    await first.stop()
    second = make_runtime(tmp_path / "state")
    await second.start()
    try:
        assert (await _run(second, waiting.id))[1] == []
        done = await _terminal(second, waiting.id)
        assert done.status is RunStatus.SUCCEEDED
        assert waiting.not_before_ms is not None
        assert done.started_at_ms is not None and done.started_at_ms >= waiting.not_before_ms
    finally:
        await second.stop()


# -- one bad run stops nothing (issue 35, finding 2) ------------------------------------

async def _task(rt: Runtime, command: str, **fields: Any) -> str:
    """A task written straight through db/: past every check the APIs make at save (a
    row from before they existed), so the runtime meets the bad value itself."""
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields({
            "name": "t", "command": command, "env": {}, "labels": [],
            "concurrency": "allow", **fields}), now_ms())
    return task.id


async def _runs_of(rt: Runtime, task_id: str) -> list[Run]:
    async with rt.db.read() as tx:
        return await runs.list_runs(tx, task_id=task_id, status=None, before=None, limit=100)


# Each bad value of the finding, past validation: a deadline that overflows the attempt
# row (no check in the runtime catches it: only the round's isolation does), a `-m` and
# a selection range whose size overflowed before parse bounded them.
POISONS = [
    ({"timeout_s": 10**16}, "true", "SPAWN_PREPARE_FAILED"),
    ({}, "task -m 99999999999999999999999d ok.py now", "TASK_BAD_OPTION"),
    ({"env": {"NAMES": "a&b"}}, "task ok.py desi NAMES 1-99999999999999999999",
     "TASK_BAD_SELECTION"),
]


async def test_bad_runs_scheduled_and_queued_beside_healthy_ones_stop_nothing(
        tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "state", max_concurrent_attempts="4")
    (rt.settings.scripts_path / "ok.py").parent.mkdir(parents=True, exist_ok=True)
    (rt.settings.scripts_path / "ok.py").write_text("print('ok')\n")
    await rt.start()
    try:
        # Scheduled: every second, the bad ones beside a healthy ticker.
        every = {"schedule": "* * * * * *"}
        ticker = await _task(rt, "true", **every)
        bad_ticks = [(await _task(rt, cmd, **every, **f), why) for f, cmd, why in POISONS]
        rt.scheduler.wake()
        # Queued: a bad run through a trigger's own commit (admit_new), then bad runs
        # waiting at the head of the queue, healthy ones behind them.
        first = await _task(rt, POISONS[0][1], **POISONS[0][0])
        bad_first = await trigger(rt, first, Trigger.API)
        bad_queued = []
        async with rt.db.write() as tx:
            for f, cmd, why in POISONS:
                task = await tasks.create_task(tx, ids.uuid7(), task_fields({
                    "name": "t", "command": cmd, "env": {}, "labels": [],
                    "concurrency": "allow", **f}), now_ms())
                run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.API, now_ms())
                bad_queued.append((run, why))
        healthy = [await _task(rt, "task ok.py now") for _ in range(3)]
        started_at = now_ms()
        good = [await trigger(rt, t, Trigger.API) for t in healthy]
        rt.dispatcher.wake()
        for run in good:
            done = await _terminal(rt, run.id, timeout=15.0)
            assert done.status is RunStatus.SUCCEEDED, done
            assert done.finished_at_ms is not None
            assert done.finished_at_ms - started_at < 10_000
        for run, why in [(bad_first, "SPAWN_PREPARE_FAILED"), *bad_queued]:
            done = await _terminal(rt, run.id, timeout=10.0)
            assert (done.status, done.reason_code) == (RunStatus.FAILED, why)
            async with rt.db.read() as tx:
                blob = repr([e.data for e in await events.list_events(tx, run.id)])
            assert "99999" not in blob and "ok.py" not in blob
        # The ticker fired on time every second the bad ticks did too, and finished.
        deadline = asyncio.get_running_loop().time() + 15.0
        while asyncio.get_running_loop().time() < deadline:
            ticks = [r for r in await _runs_of(rt, ticker) if r.status is RunStatus.SUCCEEDED]
            if len(ticks) >= 3:
                break
            await asyncio.sleep(0.1)
        assert len(ticks) >= 3
        for run in ticks:
            async with rt.db.read() as tx:
                (scheduled,) = [e for e in await events.list_events(tx, run.id)
                                if e.type == "run.scheduled"]
            assert int(scheduled.data["late_ms"] or 0) < 2_000  # type: ignore[call-overload]
        for task_id, why in bad_ticks:
            while not (ended := [r for r in await _runs_of(rt, task_id)
                                 if r.status is RunStatus.FAILED]):
                assert asyncio.get_running_loop().time() < deadline, why
                await asyncio.sleep(0.1)
            assert {r.reason_code for r in ended} == {why}
    finally:
        await rt.stop()
