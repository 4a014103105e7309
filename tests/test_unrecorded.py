"""Spawn step 4 deferred by the profile's identity grace (launch/unrecorded.py).

A launcher that exits within the grace has its identity written in its result's
commit; one still running after it gets a commit of its own; anything that signals
by the identity (cancel, deadline, shutdown) records it first, so deferring it never
delays a signal; a worker stopped with identities pending records them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qledge import operations
from qledge.clock import now_ms
from qledge.db import attempts, events, runs, tasks
from qledge.db.sqlite import Tx
from qledge.launch import identity
from qledge.model import Attempt, AttemptStatus, Reason, Run, RunStatus, Trigger
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import TaskFields
from qledge.transitions import Transition

from support import add_task, make_runtime, run_when


@pytest.fixture
async def lazy(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A runtime whose grace outlasts every task here: nothing waits it out by chance."""
    rt = make_runtime(tmp_path / "state", identity_grace_s="30")
    await rt.start()
    try:
        yield rt
    finally:
        await rt.stop()


async def _run(rt: Runtime, run_id: str) -> Run:
    async with rt.db.read() as tx:
        return await runs.get_run(tx, run_id)


async def _attempt(rt: Runtime, run_id: str) -> Attempt:
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run_id)
    return attempt


async def _types(rt: Runtime, run_id: str) -> list[str]:
    async with rt.db.read() as tx:
        return [e.type for e in await events.list_events(tx, run_id)]


async def _until_terminal(rt: Runtime, run_id: str, timeout: float = 20.0) -> Run:
    return await run_when(rt, run_id, timeout=timeout, what=f"run {run_id} to end")


async def _launcher(rt: Runtime, run: Run) -> identity.Identity:
    """The launcher of the run's one attempt, found in /proc by its attempt id."""
    for _ in range(500):
        async with rt.db.read() as tx:
            found = await attempts.attempts_of_run(tx, run.id)
        if found:
            ident = identity.find_launcher(run.id, found[0].id, rt.boot_id)
            if ident is not None:
                return ident
        await asyncio.sleep(0.01)
    raise AssertionError("no launcher")


async def _pending(rt: Runtime) -> None:
    """The launcher shows in /proc as soon as it is spawned; its identity is held a
    moment later (captured from /proc after posix_spawn returns)."""
    for _ in range(500):
        if len(rt.identities) == 1:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no identity pending")


async def test_a_short_task_writes_its_identity_in_its_result_commit(lazy: Runtime) -> None:
    task_id = await add_task(lazy, "echo hi; exit 3")
    run = await operations.trigger(lazy, task_id, Trigger.API)
    done = await _until_terminal(lazy, run.id)
    attempt = await _attempt(lazy, run.id)
    assert (done.status, done.exit_code) == (RunStatus.FAILED, 3)
    assert attempt.status is AttemptStatus.FAILED
    # The identity is kept: the result's commit wrote it first, as step 4 would have.
    assert attempt.pid is not None and attempt.proc_start_time is not None
    assert attempt.boot_id == lazy.boot_id
    assert attempt.started_at_ms is not None and attempt.finished_at_ms is not None
    assert attempt.created_at_ms <= attempt.started_at_ms <= attempt.finished_at_ms
    assert done.started_at_ms == attempt.started_at_ms
    assert await _types(lazy, run.id) == ["run.created", "attempt.created", "attempt.started",
                                          "run.started", "attempt.finished", "run.finished"]
    # ... and it had no commit of its own.
    assert lazy.executor.identity_commits == 0
    assert len(lazy.identities) == 0


async def test_a_task_running_past_the_grace_gets_its_identity_commit(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "state", identity_grace_s="0.3")
    await rt.start()
    try:
        task_id = await add_task(rt, "sleep 2; exit 5")
        run = await operations.trigger(rt, task_id, Trigger.API)
        ident = await _launcher(rt, run)
        for _ in range(150):
            attempt = await _attempt(rt, run.id)
            if attempt.status is AttemptStatus.RUNNING:
                break
            await asyncio.sleep(0.02)
        # Recorded while the task still runs: the launcher, by its identity.
        assert attempt.status is AttemptStatus.RUNNING
        assert (attempt.pid, attempt.proc_start_time) == (ident.pid, ident.start_time)
        assert (await _run(rt, run.id)).status is RunStatus.RUNNING
        assert rt.executor.identity_commits == 1
        done = await _until_terminal(rt, run.id)
        assert (done.status, done.exit_code) == (RunStatus.FAILED, 5)
        assert (await _types(rt, run.id)).count("attempt.started") == 1
    finally:
        await rt.stop()


async def test_a_grace_ending_records_only_the_identities_whose_grace_is_over(
        tmp_path: Path) -> None:
    """Each identity waits its own grace: the first one's ending does not commit a
    launcher spawned since, which may still finish within its grace."""
    rt = make_runtime(tmp_path / "state", identity_grace_s="1.0")
    await rt.start()
    try:
        first = await operations.trigger(rt, await add_task(rt, "sleep 4"), Trigger.API)
        await _launcher(rt, first)
        await _pending(rt)
        await asyncio.sleep(0.4)
        second = await operations.trigger(rt, await add_task(rt, "sleep 4"), Trigger.API)
        await _launcher(rt, second)
        for _ in range(500):
            if (await _attempt(rt, first.id)).status is AttemptStatus.RUNNING:
                break
            await asyncio.sleep(0.01)
        assert (await _attempt(rt, first.id)).status is AttemptStatus.RUNNING
        # The first grace's commit left the younger identity pending, unwritten.
        younger = await _attempt(rt, second.id)
        assert younger.status is AttemptStatus.PREPARING and younger.id in rt.identities
        assert rt.executor.identity_commits == 1
        for _ in range(500):
            if (await _attempt(rt, second.id)).status is AttemptStatus.RUNNING:
                break
            await asyncio.sleep(0.01)
        assert (await _attempt(rt, second.id)).status is AttemptStatus.RUNNING
        assert rt.executor.identity_commits == 2
        assert len(rt.identities) == 0
        for run in (first, second):
            assert await operations.cancel_run(rt, run.id) is RunStatus.RUNNING
            assert (await _until_terminal(rt, run.id)).status is RunStatus.CANCELLED
    finally:
        await rt.stop()


async def test_a_cancel_inside_the_grace_signals_at_once(lazy: Runtime) -> None:
    task_id = await add_task(lazy, "sleep 30")
    run = await operations.trigger(lazy, task_id, Trigger.API)
    await _launcher(lazy, run)
    await _pending(lazy)
    assert (await _attempt(lazy, run.id)).status is AttemptStatus.PREPARING
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await operations.cancel_run(lazy, run.id) is RunStatus.RUNNING
    done = await _until_terminal(lazy, run.id)
    took = loop.time() - t0
    attempt = await _attempt(lazy, run.id)
    assert (done.status, done.reason_code) == (RunStatus.CANCELLED,
                                               Reason.CANCEL_REQUESTED.value)
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.CANCELLED, 143)
    assert took < 10, f"the cancel waited {took:.1f} s (the grace is 30)"
    types = await _types(lazy, run.id)
    assert types.index("run.cancel_requested") < types.index("attempt.started") \
        < types.index("attempt.signal_sent") < types.index("attempt.finished")
    assert types.count("run.finished") == 1


async def test_a_deadline_inside_the_grace_fires_on_time(lazy: Runtime) -> None:
    task_id = await add_task(lazy, "sleep 30")
    async with lazy.db.write() as tx:
        await tasks.update_task(tx, task_id, TaskFields(timeout_s=1), now_ms())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    run = await operations.trigger(lazy, task_id, Trigger.API)
    done = await _until_terminal(lazy, run.id)
    took = loop.time() - t0
    assert (done.status, done.reason_code) == (RunStatus.TIMED_OUT, Reason.TIMEOUT.value)
    assert took < 10, f"a 1 s timeout took {took:.1f} s (the grace is 30)"


async def test_a_stopped_worker_records_what_is_pending(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = make_runtime(state, identity_grace_s="30")
    await first.start()
    task_id = await add_task(first, "sleep 30")
    run = await operations.trigger(first, task_id, Trigger.API)
    ident = await _launcher(first, run)
    await _pending(first)
    await first.stop()  # shutdown policy "leave": the task keeps running
    second = make_runtime(state, identity_grace_s="30")
    await second.start()
    try:
        attempt = await _attempt(second, run.id)
        assert attempt.status is AttemptStatus.RUNNING
        assert (attempt.pid, attempt.proc_start_time) == (ident.pid, ident.start_time)
        # Reattached by its recorded identity, not adopted by a walk of /proc.
        assert second.startup_report is not None
        assert second.startup_report.counts.get("reattached") == 1
        assert "adopted" not in second.startup_report.counts
        await operations.cancel_run(second, run.id)
        assert (await _until_terminal(second, run.id)).status is RunStatus.CANCELLED
    finally:
        await second.stop()


async def test_a_failed_deferred_identity_commit_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unlike a failed step 4 commit at once (test_executor), nothing is stopped: the
    worker still holds the identity and watches the launcher, its result's commit
    writes it, and a worker killed meanwhile leaves what start-up adoption handles."""
    rt = make_runtime(tmp_path / "state", identity_grace_s="0.2")
    await rt.start()
    try:
        apply = runs.apply
        failed: list[str] = []

        async def first_identity_commit_fails(tx: Tx, old: Run, tr: Transition,
                                              at: int) -> Run:
            if (tr.attempt is not None and tr.attempt.status is AttemptStatus.RUNNING
                    and not failed):
                failed.append(tr.attempt.id)
                raise sqlite3.OperationalError("disk I/O error")
            return await apply(tx, old, tr, at)

        monkeypatch.setattr(runs, "apply", first_identity_commit_fails)
        task_id = await add_task(rt, "sleep 1.5; exit 4")
        run = await operations.trigger(rt, task_id, Trigger.API)
        done = await _until_terminal(rt, run.id)
        attempt = await _attempt(rt, run.id)
        assert failed == [attempt.id]
        assert (done.status, done.exit_code) == (RunStatus.FAILED, 4)
        assert attempt.pid is not None
        assert (await _types(rt, run.id)).count("attempt.started") == 1
    finally:
        await rt.stop()


async def test_shutdown_policy_cancel_reaches_a_launcher_inside_the_grace(
        tmp_path: Path) -> None:
    """`QLEDGE_SHUTDOWN_POLICY=cancel` with an identity still in memory: shutdown
    commits it, then stops the launcher — not left running past the shutdown."""
    rt = make_runtime(tmp_path / "state", shutdown_policy="cancel", kill_grace_s="2",
                      identity_grace_s="30")
    await rt.start()
    run = await operations.trigger(rt, await add_task(rt, "sleep 30"), Trigger.API)
    await _launcher(rt, run)
    await _pending(rt)
    await rt.stop()
    again = make_runtime(tmp_path / "state")
    await again.db.open()
    try:
        async with again.db.read() as tx:
            done = await runs.get_run(tx, run.id)
            (attempt,) = await attempts.attempts_of_run(tx, run.id)
    finally:
        await again.db.close()
    assert (done.status, done.reason_code) == (RunStatus.CANCELLED,
                                               Reason.CANCEL_REQUESTED.value), done
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.CANCELLED, 143)
    assert identity.find_launcher(run.id, attempt.id, rt.boot_id) is None


async def _gone_within_the_grace(state: Path, command: str
                                 ) -> tuple[Run, identity.Identity, str]:
    """A worker that dies with an identity still in memory (what a kill -9 within the
    grace leaves: the attempt `preparing`, nothing recorded)."""
    first = make_runtime(state, identity_grace_s="30")
    await first.start()
    run = await operations.trigger(first, await add_task(first, command), Trigger.API)
    ident = await _launcher(first, run)
    await _pending(first)
    attempt_id = (await _attempt(first, run.id)).id

    async def forgets(attempt_ids: list[str] | None = None) -> list[Attempt]:
        return []

    first.executor.record = forgets  # type: ignore[method-assign]
    await first.stop()
    return run, ident, attempt_id


async def test_a_receipt_of_an_unrecorded_launcher_gives_the_start_time(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    run, ident, attempt_id = await _gone_within_the_grace(state, "sleep 0.5; exit 7")
    for _ in range(500):  # the launcher finishes while no worker runs
        if identity.find_launcher(run.id, attempt_id, ident.boot_id) is None:
            break
        await asyncio.sleep(0.01)
    second = make_runtime(state, identity_grace_s="30")
    await second.start()
    try:
        done = await _until_terminal(second, run.id)
        attempt = await _attempt(second, run.id)
        assert (done.status, done.exit_code) == (RunStatus.FAILED, 7)
        assert attempt.pid is None  # never recorded, never invented
        assert attempt.started_at_ms is not None and attempt.finished_at_ms is not None
        assert attempt.created_at_ms <= attempt.started_at_ms < attempt.finished_at_ms
        assert attempt.finished_at_ms - attempt.started_at_ms >= 400  # the 0.5 s sleep
        assert done.started_at_ms == attempt.started_at_ms
        types = await _types(second, run.id)
        assert types.count("run.started") == 1 and "attempt.started" not in types
        assert types.count("run.finished") == 1
    finally:
        await second.stop()


async def test_an_adopted_launcher_started_at_its_spawn_not_at_adoption(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    run, ident, _ = await _gone_within_the_grace(state, "sleep 30")
    second = make_runtime(state, identity_grace_s="30")
    await second.start()
    try:
        attempt = await _attempt(second, run.id)
        assert second.startup_report is not None
        assert second.startup_report.counts.get("adopted") == 1
        assert (attempt.status, attempt.pid) == (AttemptStatus.RUNNING, ident.pid)
        assert attempt.started_at_ms == attempt.created_at_ms
        assert (await _run(second, run.id)).started_at_ms == attempt.created_at_ms
        await operations.cancel_run(second, run.id)
        assert (await _until_terminal(second, run.id)).status is RunStatus.CANCELLED
    finally:
        await second.stop()

