"""Supervision rounds keep the receipt journal bounded under sustained load.

Settled rows (receipt consumed into the terminal state, or known never to
come) age out by one bounded DELETE per round, so the per-round page caps —
which bound *file* work — no longer cap the bookkeeping below the run rate.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec

from qledge.db import tasks
from qledge.model import RunStatus, Trigger
from qledge.runtime.lifecycle import Runtime
from qledge.runtime.operations import trigger

from conftest import add_task, make_runtime

# Attempts with a receipt-journal entry (its columns of the attempt row, migration 0021).
_JOURNAL = "SELECT COUNT(*) FROM run_attempts WHERE receipt_state IS NOT NULL"


async def _count(rt: Runtime, sql: str, *params: object) -> int:
    async with rt.db.read() as tx:
        row = await tx.one(sql, params)
    return int(row[0]) if row else 0


async def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        await asyncio.sleep(0.1)


async def test_the_journal_keeps_up_with_a_burst_far_above_the_page_caps(
        tmp_path: Path) -> None:
    # Rounds every 0.5 s that may look at 1 × 2 journal rows: 4 rows/s of file work.
    # 120 runs arrive at once; their rows must be gone a few rounds after the
    # journal retention, not at 4 per second.
    rt = make_runtime(tmp_path / "state", round_interval_s="0.5", retention_interval_s="0.5")
    rt.profile = msgspec.structs.replace(rt.profile, pages=1, page_size=2,
                                         journal_retention_s=0.3)
    await rt.start()
    try:
        task = await add_task(rt, "true")
        async with rt.db.write() as tx:
            await tasks.update_task(tx, task, {"keep_runs": 3}, 1)
        runs = [(await trigger(rt, task, Trigger.API)).id for _ in range(120)]

        async def all_terminal() -> bool:
            return await _count(rt, "SELECT COUNT(*) FROM runs WHERE status = 'queued'"
                                    " OR status = 'running'") == 0

        await _wait("every run terminal", all_terminal, 60)
        assert await _count(rt, "SELECT COUNT(*) FROM runs WHERE status = ?",
                            RunStatus.SUCCEEDED.value) >= 3
        finished = time.monotonic()

        async def journal_empty() -> bool:
            return await _count(rt, _JOURNAL) == 0

        # 0.3 s retention + a 0.5 s round + slack; the page caps alone would need 30 s.
        await _wait("the journal drained", journal_empty, 6)
        assert rt.supervisor.last is not None

        async def retention_caught_up() -> bool:
            return await _count(rt, "SELECT COUNT(*) FROM runs WHERE task_id = ?", task) == 3

        await _wait("retention kept the newest 3", retention_caught_up, 10)
        assert time.monotonic() - finished < 16
        marks = ",".join("?" * 3)
        kept = await _count(rt, f"SELECT COUNT(*) FROM runs WHERE id IN ({marks})",
                            *runs[-3:])
        assert kept == 3  # the newest three
    finally:
        await rt.stop()


async def test_settled_rows_wait_while_the_reaper_holds_their_receipt(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "state", round_interval_s="600")
    rt.profile = msgspec.structs.replace(rt.profile, journal_retention_s=0.0)
    await rt.start()
    try:
        task = await add_task(rt, "true")
        run = await trigger(rt, task, Trigger.API)

        async def settled() -> bool:
            return await _count(rt, "SELECT COUNT(*) FROM run_attempts"
                                    " WHERE receipt_settled_at_ms IS NOT NULL") == 1

        await _wait("the row settled", settled, 20)
        await rt.reaper.drain()
        # The reaper holds another receipt consumed before this row was settled.
        rt.reaper.remove_after(10**12, ["held"], since_ms=0)
        assert rt.reaper.oldest_since_ms == 0
        await rt.supervisor.round()
        assert await _count(rt, _JOURNAL) == 1
        rt.reaper._pending.clear()  # what its fsync and unlink would do
        report = await rt.supervisor.round()
        assert report.counts.get("journal_aged_out") == 1
        assert await _count(rt, _JOURNAL) == 0
        assert run.id
    finally:
        await rt.stop()
