"""The spawn protocol's compensation (docs/contract.md §3 step 4), on the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from qledge import ids
from qledge.clock import now_ms
from qledge.db import attempts, runs, tasks
from qledge.db.sqlite import Tx
from qledge.launch import identity, logs
from qledge.launch.executor import STOP_WAIT_S
from qledge.model import AttemptStatus, Reason, Run, Trigger
from qledge.runtime.lifecycle import Runtime
from qledge.transitions import Transition

from support import add_task


async def test_a_failed_identity_commit_stops_the_group_without_blocking_the_loop(
        eager_rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 4 at once (no identity grace): its compensation is what is tested here; a
    deferred identity's failed commit is retried instead (test_unrecorded.py)."""
    rt = eager_rt
    # The group ignores TERM: stopping it takes the whole TERM wait, then KILL.
    task_id = await add_task(rt, "trap '' TERM; echo ready; sleep 60")
    async with rt.db.write() as tx:
        task = await tasks.get_task(tx, task_id)
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now_ms())
        prepared = await rt.executor.prepare_in(tx, run, task)
    assert prepared is not None
    apply = runs.apply

    async def identity_commit_fails(tx: Tx, old: Run, tr: Transition, at: int) -> Run:
        """Step 4 fails — once the command ignores TERM (a TERM before its trap would
        end it at once and prove nothing)."""
        if tr.attempt is None or tr.attempt.id != prepared.attempt.id or \
                tr.attempt.status is not AttemptStatus.RUNNING:
            return await apply(tx, old, tr, at)
        while b"ready" not in logs.read(rt.settings.logs_path, prepared.attempt.log_path,
                                        0, 64)[0]:
            await asyncio.sleep(0.01)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(runs, "apply", identity_commit_fails)
    loop = asyncio.get_running_loop()
    ticks: list[float] = []
    launch = asyncio.create_task(rt.executor.launch(prepared))
    while b"ready" not in logs.read(rt.settings.logs_path, prepared.attempt.log_path, 0, 64)[0]:
        await asyncio.sleep(0.01)
    started = loop.time()
    while not launch.done():
        ticks.append(loop.time())
        await asyncio.sleep(0.01)
    took = loop.time() - started
    assert await launch is None
    # The wait for the TERM-ignoring group really happened ...
    assert took >= STOP_WAIT_S * 0.9
    # ... and the loop kept running all along (a blocking wait would stall it that long).
    gaps = [b - a for a, b in zip([started, *ticks], ticks, strict=False)]
    assert max(gaps) < STOP_WAIT_S * 0.9, f"the loop stalled for {max(gaps):.2f}s"
    async with rt.db.read() as tx:
        attempt = await attempts.get_attempt(tx, prepared.attempt.id)
    assert (attempt.status, attempt.reason_code) == (
        AttemptStatus.LOST, Reason.SPAWN_HANDLE_PERSIST_FAILED.value)
    # Nothing of the group is left: no launcher names this attempt any more.
    deadline = time.monotonic() + 5
    while identity.find_launcher(run.id, prepared.attempt.id, rt.boot_id) is not None:
        assert time.monotonic() < deadline, "the launcher survived its compensation"
        await asyncio.sleep(0.05)
