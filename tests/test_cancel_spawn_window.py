"""A cancel that meets a run between spawn step 1 and the identity commit.

Step 1 commits the attempt `preparing` durably; the launcher may already run before
step 4 records its identity. A cancel (user, overlap `replace`, a `conc` parent) in
that window must go through the running-attempt path — intent committed, launcher
signalled once its identity is known, result from the receipt — and never end the
run `cancelled`/`CANCELLED_BEFORE_START` ("nothing was started") with a process
running and its attempt left `preparing` (docs/contract.md §3, §7).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from qledge import ids, operations, transitions
from qledge.clock import now_ms
from qledge.db import attempts, events, journal, runs, tasks
from qledge.db.sqlite import Database, Tx
from qledge.launch import identity, logs
from qledge.launch.executor import EXECUTOR_TYPE, Prepared, base_env
from qledge.model import (
    ACTIVE_ATTEMPT,
    Attempt,
    AttemptStatus,
    CancelReason,
    Overlap,
    Reason,
    Run,
    RunStatus,
    Trigger,
)
from qledge.receipts.codec import new_token, token_hash
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import TaskFields

from support import add_task, ended, make_runtime, run_when


class _HeldIdentityCommit:
    """The executor's database, except that its identity commit (spawn step 4, the
    one deferred write of the executor) first runs `before` — the launcher is spawned
    by then, its identity not yet recorded."""

    def __init__(self, db: Database, before: Callable[[], Awaitable[None]]) -> None:
        self._db = db
        self._before = before
        self.held = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    @contextlib.asynccontextmanager
    async def write(self, *, durable: bool = True) -> AsyncIterator[Tx]:
        if not durable:
            self.held += 1
            await self._before()
        async with self._db.write(durable=durable) as tx:
            yield tx


async def _run(rt: Runtime, run_id: str) -> Run:
    async with rt.db.read() as tx:
        return await runs.get_run(tx, run_id)


async def _until_terminal(rt: Runtime, run_id: str, timeout: float = 20.0) -> Run:
    return await run_when(rt, run_id, lambda r: r.finished_at_ms is not None and ended(r),
                          timeout=timeout, what=f"run {run_id} to end")


async def _types(rt: Runtime, run_id: str) -> list[str]:
    async with rt.db.read() as tx:
        return [e.type for e in await events.list_events(tx, run_id)]


async def _until_no_launcher(rt: Runtime, run_id: str, attempt_id: str) -> None:
    for _ in range(250):
        if identity.find_launcher(run_id, attempt_id, rt.boot_id) is None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the launcher is still running")


def _cancelled_from_its_receipt(run: Run, attempt: Any) -> None:
    """What the convergence rule gives a TERM'd `sleep`: the intent decides, the
    receipt's exit code (128 + SIGTERM) is kept."""
    assert (run.status, run.reason_code) == (RunStatus.CANCELLED,
                                             Reason.CANCEL_REQUESTED.value), run
    assert (attempt.status, attempt.reason_code) == (AttemptStatus.CANCELLED,
                                                     Reason.CANCEL_REQUESTED.value), attempt
    assert run.exit_code == attempt.exit_code == 143


async def test_a_user_cancel_while_the_launcher_starts_ends_from_its_receipt(
        eager_rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = eager_rt
    task_id = await add_task(rt, "sleep 30")
    started: dict[str, Run] = {}
    seen: list[RunStatus] = []

    async def cancel() -> None:
        while "run" not in started:
            await asyncio.sleep(0.005)
        run = await _run(rt, started["run"].id)
        seen.append(run.status)
        assert await operations.cancel_run(rt, run.id) is RunStatus.RUNNING

    held = _HeldIdentityCommit(rt.db, cancel)
    monkeypatch.setattr(rt.executor, "db", held)
    started["run"] = await operations.trigger(rt, task_id, Trigger.API)
    run = await _until_terminal(rt, started["run"].id)
    assert held.held == 1
    assert seen == [RunStatus.RUNNING]  # step 1 made the run `running`
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
    _cancelled_from_its_receipt(run, attempt)
    types = await _types(rt, run.id)
    assert types.count("run.finished") == types.count("attempt.finished") == 1
    assert types.index("run.cancel_requested") < types.index("attempt.started") \
        < types.index("attempt.signal_sent") < types.index("attempt.finished")
    await _until_no_launcher(rt, run.id, attempt.id)


async def _step_one(rt: Runtime, command: str) -> Prepared:
    """A new run of a new task through spawn step 1 only (committed, nothing spawned)."""
    task_id = await add_task(rt, command)
    async with rt.db.write() as tx:
        task = await tasks.get_task(tx, task_id)
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now_ms())
        prepared = await rt.executor.prepare_in(tx, run, task)
    assert isinstance(prepared, Prepared)
    return prepared


async def test_a_cancel_right_after_step_one_is_not_cancelled_before_start(
        rt: Runtime) -> None:
    """The intent lands before the launcher even exists: it is spawned (step 1 is
    committed, there is no going back without a trace) and stopped through the fenced
    path; the receipt decides."""
    prepared = await _step_one(rt, "sleep 30")
    run = prepared.run
    assert prepared.run.status is RunStatus.RUNNING
    assert await operations.cancel_run(rt, run.id) is RunStatus.RUNNING
    rt.dispatcher.launch_soon(prepared)
    done = await _until_terminal(rt, run.id)
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
    assert done.reason_code != Reason.CANCELLED_BEFORE_START.value
    _cancelled_from_its_receipt(done, attempt)
    types = await _types(rt, run.id)
    assert types.count("run.finished") == types.count("attempt.finished") == 1


async def test_overlap_replace_in_the_window_cancels_through_the_receipt(
        eager_rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = eager_rt
    task_id = await add_task(rt, "sleep 30")
    async with rt.db.write() as tx:
        task = await tasks.get_task(tx, task_id)
        await tasks.update_task(tx, task.id, TaskFields(overlap=Overlap.REPLACE.value), now_ms())
    started: dict[str, Run] = {}
    replacing: list[operations.Started] = []

    async def replace() -> None:
        if replacing:
            return  # the new run's own identity commit
        while "run" not in started:
            await asyncio.sleep(0.005)
        replacing.append(await operations.start_run(rt, task_id, Trigger.API))

    held = _HeldIdentityCommit(rt.db, replace)
    monkeypatch.setattr(rt.executor, "db", held)
    started["run"] = await operations.trigger(rt, task_id, Trigger.API)
    old = await _until_terminal(rt, started["run"].id)
    assert replacing[0].replaced == [old.id]
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, old.id)
    assert (old.cancel_reason, old.reason_code) == (CancelReason.POLICY,
                                                    Reason.CANCEL_REQUESTED.value)
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.CANCELLED, 143)
    types = await _types(rt, old.id)
    assert types.count("run.finished") == types.count("attempt.finished") == 1
    # The new run starts once the replaced one's attempt is gone.
    new_id = replacing[0].run.id
    for _ in range(500):
        if (await _run(rt, new_id)).started_at_ms is not None:
            break
        await asyncio.sleep(0.02)
    assert (await _run(rt, new_id)).status is RunStatus.RUNNING
    await operations.cancel_run(rt, new_id)
    assert (await _until_terminal(rt, new_id)).status is RunStatus.CANCELLED


async def test_a_worker_gone_after_a_cancel_in_the_window_adopts_and_stops_the_launcher(
        tmp_path: Path) -> None:
    """The worker dies after the cancel committed, before the identity commit: the
    next one finds the run `running` with its intent and the attempt `preparing`,
    adopts the launcher, stops it through the fenced path, and the receipt decides."""
    state = tmp_path / "state"
    before = make_runtime(state, round_interval_s="600")
    await before.start()
    try:
        p = await _step_one(before, "sleep 30")
        run = p.run
        assert await operations.cancel_run(before, run.id) is RunStatus.RUNNING
        # Steps 2 and 3 only: the worker is gone before step 4.
        await asyncio.to_thread(before.executor._launch, p.attempt, p.run, p.task, p.token,
                                p.env, ["/bin/sh", "-c", p.task.command], None)
    finally:
        await before.stop()

    after = make_runtime(state, round_interval_s="600")
    await after.start()
    try:
        assert after.startup_report is not None
        assert after.startup_report.counts.get("adopted") == 1, after.startup_report.counts
        done = await _until_terminal(after, run.id)
        async with after.db.read() as tx:
            (attempt,) = await attempts.attempts_of_run(tx, run.id)
        _cancelled_from_its_receipt(done, attempt)
        types = await _types(after, run.id)
        assert types.count("run.finished") == types.count("attempt.finished") == 1
        await _until_no_launcher(after, run.id, attempt.id)
    finally:
        await after.stop()


async def test_shutdown_policy_cancel_reaches_an_attempt_being_spawned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`QLEDGE_SHUTDOWN_POLICY=cancel` while a launcher is between spawn and identity
    commit: the intent is committed, the identity commit is waited for within the
    drain, and the launcher is stopped — not left running past the shutdown."""
    state = tmp_path / "state"
    rt = make_runtime(state, shutdown_policy="cancel", kill_grace_s="2", identity_grace_s="0")
    await rt.start()
    release = asyncio.Event()
    holding = asyncio.Event()

    async def hold() -> None:
        holding.set()
        await release.wait()

    monkeypatch.setattr(rt.executor, "db", _HeldIdentityCommit(rt.db, hold))
    run = await operations.trigger(rt, await add_task(rt, "sleep 30"), Trigger.API)
    await asyncio.wait_for(holding.wait(), 20)
    stopping = asyncio.create_task(rt.stop())
    for _ in range(500):
        if (await _run(rt, run.id)).cancel_reason is not None:
            break
        await asyncio.sleep(0.01)
    release.set()
    await stopping
    db = Database(rt.settings.db_path)
    await db.open()
    try:
        async with db.read() as tx:
            done = await runs.get_run(tx, run.id)
            (attempt,) = await attempts.attempts_of_run(tx, run.id)
            types = [e.type for e in await events.list_events(tx, run.id)]
    finally:
        await db.close()
    assert (done.status, done.cancel_reason, done.reason_code) == (
        RunStatus.CANCELLED, CancelReason.SHUTDOWN, Reason.CANCEL_REQUESTED.value), done
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.CANCELLED, 143)
    assert types.count("run.finished") == types.count("attempt.finished") == 1
    assert identity.find_launcher(run.id, attempt.id, rt.boot_id) is None


def test_the_transitions_of_the_window() -> None:
    """Pure: step 1 makes the run `running` (no `run.started` yet: that is the
    identity's); an orphan's end leaves its terminal run's result alone."""
    run = Run(id="r", task_id="t", trigger=Trigger.API, status=RunStatus.QUEUED, version=1,
              event_seq=1, cancel_reason=None, cancel_requested_at_ms=None, created_at_ms=1,
              started_at_ms=None, finished_at_ms=None, exit_code=None, reason_code=None)
    prepared = transitions.attempt_prepared(run)
    assert (prepared.run.status, prepared.run.version, prepared.run.started_at_ms,
            prepared.events) == (RunStatus.RUNNING, 2, None, [])
    with pytest.raises(transitions.InvalidTransition):
        transitions.attempt_prepared(prepared.run)
    attempt = Attempt(id="a", run_id="r", attempt_no=1, executor_type=EXECUTOR_TYPE,
                      runtime_owner="n", status=AttemptStatus.PREPARING,
                      callback_token_hash=b"", callback_sequence=1, log_path="l",
                      pid=None, proc_start_time=None, boot_id=None,
                      exit_code=None, reason_code=None, created_at_ms=2, started_at_ms=None,
                      finished_at_ms=None, deadline_at_ms=None)
    started = transitions.attempt_started(prepared.run, attempt, pid=9, start_time=1,
                                          boot_id="b", now_ms=7)
    assert [e.type for e in started.events] == ["attempt.started", "run.started"]
    assert started.run.started_at_ms == 7
    intent = transitions.request_cancel(run, CancelReason.USER, 3)
    assert intent is not None
    ended = transitions.cancel_queued(intent.run, 4).run
    lost = transitions.without_receipt(ended, attempt, Reason.RECOVERY_SPAWN_UNCONFIRMED, 9)
    assert lost.attempt is not None
    assert (lost.attempt.status, lost.attempt.reason_code) == (
        AttemptStatus.LOST, Reason.RECOVERY_RUN_ALREADY_ENDED.value)
    assert [e.type for e in lost.events] == ["attempt.finished"]
    assert (lost.run.status, lost.run.reason_code, lost.run.version) == (
        ended.status, ended.reason_code, ended.version + 1)
    with pytest.raises(transitions.InvalidTransition):
        transitions.attempt_started(ended, attempt, pid=9, start_time=1, boot_id="b",
                                    now_ms=7)
    adopted = transitions.orphan_started(ended, attempt, pid=9, start_time=1, boot_id="b",
                                         now_ms=7)
    assert adopted.attempt is not None and adopted.run.status is RunStatus.CANCELLED
    done = transitions.complete(ended, adopted.attempt, exit_code=143, finished_at_ms=8)
    assert done.attempt is not None
    assert (done.attempt.status, done.attempt.exit_code, done.run.status) == (
        AttemptStatus.CANCELLED, 143, RunStatus.CANCELLED)
    assert [e.type for e in done.events] == ["attempt.finished"]


async def _legacy_state(rt: Runtime, command: str, *, spawn: bool) -> tuple[Run, str]:
    """What a cancel in the window left behind before this fix: the run ended
    `cancelled`/`CANCELLED_BEFORE_START` by cancel_queued (it still read `queued`),
    its attempt `preparing` forever — with its launcher running when `spawn`."""
    task_id = await add_task(rt, command)
    token = new_token()
    attempt_id = ids.uuid7()
    async with rt.db.write() as tx:
        task = await tasks.get_task(tx, task_id)
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now_ms())
        attempt = await attempts.prepare_attempt(
            tx, run, attempt_id=attempt_id, owner=rt.node_id, executor_type=EXECUTOR_TYPE,
            token_hash=token_hash(token), deadline_at_ms=None,
            log_path=logs.relative_path(attempt_id),
            receipt_path=rt.receipts.relative_path(attempt_id), now_ms=now_ms())
        run = await runs.get_run(tx, run.id)
        assert run.status is RunStatus.QUEUED  # the old step 1 left the run queued
    if spawn:
        await asyncio.to_thread(
            rt.executor._launch, attempt, run, task, token, base_env(rt.settings.work_path),
            ["/bin/sh", "-c", command], None)
    async with rt.db.write() as tx:
        run = await runs.get_run(tx, run.id)
        tr = transitions.request_cancel(run, CancelReason.USER, now_ms())
        assert tr is not None
        run = await runs.apply(tx, run, tr, now_ms())
        run = await runs.apply(tx, run, transitions.cancel_queued(run, now_ms()), now_ms())
    assert (run.status, run.reason_code) == (RunStatus.CANCELLED,
                                             Reason.CANCELLED_BEFORE_START.value)
    return run, attempt_id


async def _attempt(rt: Runtime, attempt_id: str) -> Any:
    async with rt.db.read() as tx:
        return await attempts.get_attempt(tx, attempt_id)


async def test_startup_repairs_preparing_attempts_of_ended_runs(tmp_path: Path) -> None:
    """Databases written before the fix may hold them: start-up decides each from its
    receipt, adopts and stops a launcher still running, or ends it `lost` with a
    reason — the run keeps its one terminal result, the attempt gets its one end."""
    state = tmp_path / "state"
    before = make_runtime(state, round_interval_s="600")
    await before.start()
    try:
        # `exit 3` waits for the cancel to be committed: a command that ended before it
        # honestly stays `failed` (the receipt proves it finished first), which a
        # loaded machine made happen now and then.
        gate = tmp_path / "cancel-committed"
        exited, exited_id = await _legacy_state(
            before, f"while [ ! -e {gate} ]; do sleep 0.01; done; exit 3", spawn=True)
        gate.touch()
        alive, alive_id = await _legacy_state(before, "sleep 30", spawn=True)
        never, never_id = await _legacy_state(before, "true", spawn=False)
        receipt = before.receipts.root / before.receipts.relative_path(exited_id)
        for _ in range(250):
            if receipt.exists():
                break
            await asyncio.sleep(0.02)
        assert receipt.exists()
        for attempt_id in (exited_id, alive_id, never_id):
            assert (await _attempt(before, attempt_id)).status is AttemptStatus.PREPARING
    finally:
        await before.stop()

    after = make_runtime(state, round_interval_s="600")
    await after.start()
    try:
        report = after.startup_report
        assert report is not None
        assert report.counts.get("adopted") == 1, report.counts
        # The receipt decides (the committed intent wins, its exit code is kept).
        got = await _attempt(after, exited_id)
        assert (got.status, got.reason_code, got.exit_code) == (
            AttemptStatus.CANCELLED, Reason.CANCEL_REQUESTED.value, 3)
        # No launcher, no receipt: lost, and why.
        got = await _attempt(after, never_id)
        assert (got.status, got.reason_code, got.exit_code) == (
            AttemptStatus.LOST, Reason.RECOVERY_RUN_ALREADY_ENDED.value, None)
        # A launcher still running: adopted, stopped by the committed intent, its
        # receipt decides.
        for _ in range(500):
            got = await _attempt(after, alive_id)
            if got.status not in ACTIVE_ATTEMPT:
                break
            await asyncio.sleep(0.02)
        assert (got.status, got.reason_code, got.exit_code) == (
            AttemptStatus.CANCELLED, Reason.CANCEL_REQUESTED.value, 143)
        await _until_no_launcher(after, alive.id, alive_id)
        for run, attempt_id in ((exited, exited_id), (alive, alive_id), (never, never_id)):
            same = await _run(after, run.id)
            # The run's result was final: it stays, with its one terminal event.
            assert (same.status, same.reason_code) == (RunStatus.CANCELLED,
                                                       Reason.CANCELLED_BEFORE_START.value)
            types = await _types(after, run.id)
            assert types.count("run.finished") == 1
            assert types.count("attempt.finished") == 1
            async with after.db.read() as tx:
                assert not await attempts.run_has_active_attempt(tx, run.id)
                rows = [r for r in await journal.journal_page(tx, "", 1000)
                        if r.attempt_id == attempt_id]
            assert all(r.attempt_status not in ACTIVE_ATTEMPT for r in rows)
        async with after.db.read() as tx:
            assert await attempts.count_active_attempts(tx, after.node_id) == 0
    finally:
        await after.stop()


async def test_only_start_up_recovery_looks_for_stuck_attempts(rt: Runtime) -> None:
    """Active attempts are found through their running runs (migration 0022): a stuck
    attempt of an ended run is not on that path, so supervision rounds do not see it;
    start-up recovery walks run_attempts for it (none is made while a worker runs)."""
    run, attempt_id = await _legacy_state(rt, "true", spawn=False)
    await rt.supervisor.round()
    assert (await _attempt(rt, attempt_id)).status is AttemptStatus.PREPARING
    report = await rt.reconciler.startup()
    assert report.examined == 1, report.counts
    got = await _attempt(rt, attempt_id)
    assert (got.status, got.reason_code) == (AttemptStatus.LOST,
                                             Reason.RECOVERY_RUN_ALREADY_ENDED.value)
    types = await _types(rt, run.id)
    assert types.count("run.finished") == types.count("attempt.finished") == 1
    assert (await _run(rt, run.id)).status is RunStatus.CANCELLED


async def test_a_queued_run_with_a_live_attempt_is_not_cancelled_before_start(
        rt: Runtime) -> None:
    """A database from before the fix can hold a run that reads `queued` with a
    `preparing` attempt (the worker died in the window). A cancel then commits its
    intent and leaves the end to the attempt's path: the run is not ended as if
    nothing had started."""
    task_id = await add_task(rt, "true")
    async with rt.db.write() as tx:
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now_ms())
        attempt_id = ids.uuid7()
        await attempts.prepare_attempt(
            tx, run, attempt_id=attempt_id, owner=rt.node_id, executor_type=EXECUTOR_TYPE,
            token_hash=token_hash(new_token()), deadline_at_ms=None,
            log_path=logs.relative_path(attempt_id),
            receipt_path=rt.receipts.relative_path(attempt_id), now_ms=now_ms())
    assert await operations.cancel_run(rt, run.id) is RunStatus.QUEUED
    same = await _run(rt, run.id)
    assert (same.status, same.cancel_reason, same.reason_code) == (
        RunStatus.QUEUED, CancelReason.USER, None)
    # Start-up recovery decides the attempt (no launcher, no receipt): lost, and the run
    # with it. It is found by its walk of run_attempts: its run is not `running`, and
    # supervision rounds find attempts through running runs (migration 0022).
    await rt.supervisor.round()
    assert (await _attempt(rt, attempt_id)).status is AttemptStatus.PREPARING
    await rt.reconciler.startup()
    same = await _run(rt, run.id)
    assert (same.status, same.reason_code) == (RunStatus.LOST,
                                               Reason.RECOVERY_SPAWN_UNCONFIRMED.value)
    types = await _types(rt, run.id)
    assert types.count("run.finished") == types.count("attempt.finished") == 1
