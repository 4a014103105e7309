"""Supervision rounds keep the receipt journal bounded under sustained load.

Settled rows (receipt consumed into the terminal state, or known never to
come) age out in spawn step 1's commit, and by one bounded UPDATE per round as
the backstop, so the per-round page caps — which bound *file* work — no longer
cap the bookkeeping below the run rate.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from qledge.db import attempts, journal, tasks
from qledge.model import Reason, RunStatus, Trigger
from qledge.operations import trigger
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import TaskFields

from _appliance import kill_leftover_tasks
from support import add_task, eventually_async, make_runtime

# Attempts with a receipt-journal entry (its columns of the attempt row, migration 0021).
_JOURNAL = "SELECT COUNT(*) FROM run_attempts WHERE receipt_state IS NOT NULL"


async def _count(rt: Runtime, sql: str, *params: object) -> int:
    async with rt.db.read() as tx:
        row = await tx.one(sql, params)
    return int(row[0]) if row else 0


async def _wait(what: str, check: object, timeout: float) -> None:
    await eventually_async(check, timeout=timeout, interval=0.1, what=what)  # type: ignore[arg-type]


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
            await tasks.update_task(tx, task, TaskFields(keep_runs=3), 1)
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

        # Spawn step 1 and the backstop (more than age_backlog due) leave at most
        # age_backlog settled rows waiting for the next spawn: 0.3 s retention + a
        # 0.5 s round + slack; the page caps alone would need 30 s.
        async def within_the_bound() -> bool:
            return await _count(rt, _JOURNAL) <= rt.supervisor.age_backlog
        await _wait("the journal within its bound", within_the_bound, 6)
        assert await _count(rt, _JOURNAL + " AND receipt_settled_at_ms IS NULL") == 0
        rt.supervisor.age_overdue_ms = 0  # no spawn comes: the backstop takes the rest
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
        rt.supervisor.age_overdue_ms = 0  # no spawn comes: the backstop ages it
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


# Spawn step 1 ages due settled rows; the supervisor's round is the backstop.

_RETENTION_S = 60.0


async def _settled_runs(rt: Runtime, task: str, n: int) -> list[str]:
    """n runs of the task ended, their rows settled and their receipts reaped; their
    attempt ids, oldest first."""
    for _ in range(n):
        run = await trigger(rt, task, Trigger.API)

        async def ended(run_id: str = run.id) -> bool:
            return await _count(rt, "SELECT COUNT(*) FROM run_attempts WHERE run_id = ?"
                                    " AND receipt_settled_at_ms IS NOT NULL", run_id) == 1
        await _wait("the run's row settled", ended, 20)
    await rt.reaper.drain()
    async with rt.db.read() as tx:
        rows = await tx.all("SELECT id FROM run_attempts WHERE receipt_state IS NOT NULL"
                            " ORDER BY id")
    return [str(r["id"]) for r in rows]


async def _set_settled(rt: Runtime, ids: list[str], settled_ms: int | None) -> None:
    marks = ",".join("?" * len(ids))
    async with rt.db.write() as tx:
        await tx.execute("UPDATE run_attempts SET receipt_settled_at_ms = ?"
                         f" WHERE id IN ({marks})", [settled_ms, *ids])


async def _entries(rt: Runtime, ids: list[str]) -> list[bool]:
    async with rt.db.read() as tx:
        got = [await tx.one("SELECT receipt_state FROM run_attempts WHERE id = ?", (a,))
               for a in ids]
    return [row is not None and row[0] is not None for row in got]


def _quiet_runtime(tmp_path: Path) -> Runtime:
    # No round on its own timer within a test: rounds run when the test says so.
    rt = make_runtime(tmp_path / "state", round_interval_s="600", retention_interval_s="600")
    rt.profile = msgspec.structs.replace(rt.profile, journal_retention_s=_RETENTION_S)
    return rt


async def test_spawn_step_1_ages_due_settled_rows_and_leaves_the_others(
        tmp_path: Path) -> None:
    rt = _quiet_runtime(tmp_path)
    await rt.start()
    try:
        task = await add_task(rt, "true")
        due, fresh, unsettled, held = await _settled_runs(rt, task, 4)
        past = int(time.time() * 1000) - int(_RETENTION_S * 1000)
        await _set_settled(rt, [due], past - 2000)
        await _set_settled(rt, [unsettled], None)  # file work left: not step 1's
        # `held` settled after the reaper took a receipt it still holds: not yet.
        await _set_settled(rt, [held], past - 500)
        rt.reaper.remove_after(10**12, ["other"], since_ms=past - 1000)
        [nxt] = [a for a in await _settled_runs(rt, task, 1)
                 if a not in (due, fresh, unsettled, held)]
        assert await _entries(rt, [due, fresh, unsettled, held, nxt]) == [
            False, True, True, True, True]
    finally:
        rt.reaper._pending.clear()
        await rt.stop()


async def test_spawn_step_1_ages_at_most_its_limit(tmp_path: Path) -> None:
    rt = _quiet_runtime(tmp_path)
    await rt.start()
    try:
        task = await add_task(rt, "true")
        old = await _settled_runs(rt, task, journal.SPAWN_AGE_LIMIT + 3)
        await _set_settled(rt, old, 1)
        await _settled_runs(rt, task, 1)
        # The oldest go first; the rest wait for the next spawn (or the backstop).
        assert await _entries(rt, old) == [False] * journal.SPAWN_AGE_LIMIT + [True] * 3
    finally:
        await rt.stop()


async def test_the_supervisor_ages_due_rows_only_as_a_backstop(tmp_path: Path) -> None:
    rt = _quiet_runtime(tmp_path)
    await rt.start()
    try:
        task = await add_task(rt, "true")
        rows = await _settled_runs(rt, task, rt.supervisor.age_backlog + 3)
        now = int(time.time() * 1000)
        due_ms = now - int(_RETENTION_S * 1000) - 1000
        # A few due, none long overdue: a spawn will come for them, no commit of its own.
        await _set_settled(rt, rows[:2], due_ms)
        assert (await rt.supervisor.round()).counts.get("journal_aged_out") is None
        assert await _entries(rt, rows[:2]) == [True, True]
        # No spawn came for an hour: the backstop ages every due row.
        await _set_settled(rt, rows[:1], due_ms - rt.supervisor.age_overdue_ms)
        assert (await rt.supervisor.round()).counts.get("journal_aged_out") == 2
        assert await _entries(rt, rows[:2]) == [False, False]
        # More due than age_backlog (spawns do not keep up): the bound, at once.
        rest = rows[2:]
        await _set_settled(rt, rest[:rt.supervisor.age_backlog], due_ms)
        assert (await rt.supervisor.round()).counts.get("journal_aged_out") is None
        await _set_settled(rt, rest, due_ms)
        report = await rt.supervisor.round()
        assert report.counts.get("journal_aged_out") == len(rest)
        assert await _count(rt, _JOURNAL) == 0
    finally:
        await rt.stop()


# An ended attempt whose launcher runs on (issue 41): `lost` by a fleet takeover while
# its node was away. Its receipt is still to come: the journal keeps its entry.


async def test_an_ended_attempt_whose_launcher_runs_on_keeps_its_journal_entry(
        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    state = tmp_path / "state"

    def runtime() -> Runtime:
        rt = make_runtime(state, round_interval_s="600", identity_grace_s="0")
        rt.profile = msgspec.structs.replace(rt.profile, journal_retention_s=0.0)
        return rt

    try:
        rt = runtime()
        await rt.start()
        try:
            task = await add_task(rt, f"while [ ! -e {gate} ]; do sleep 0.05; done")
            run = await trigger(rt, task, Trigger.API)

            async def identified() -> bool:
                async with rt.db.read() as tx:
                    got = await attempts.attempts_of_run(tx, run.id)
                return len(got) == 1 and got[0].pid is not None
            await _wait("its launcher's identity recorded", identified, 20)
            async with rt.db.read() as tx:
                (attempt,) = await attempts.attempts_of_run(tx, run.id)
            # Decided without its receipt, as another node's takeover does.
            got = await rt.completion.without_receipt(attempt.id, Reason.NODE_LEASE_EXPIRED)
            assert got.status == "lost"
            report = await rt.supervisor.round()
            assert "journal_dropped" not in report.counts, report.counts
            assert await _entries(rt, [attempt.id]) == [True]
        finally:
            await rt.stop()  # the launcher runs on; the next worker does not watch it
        rt = runtime()
        await rt.start()
        try:
            report = await rt.supervisor.round()
            assert "journal_dropped" not in report.counts, report.counts
            assert await _entries(rt, [attempt.id]) == [True]
            gate.touch()

            async def consumed() -> bool:
                report = await rt.supervisor.round()
                return report.counts.get("late_receipt_already_terminal") == 1
            await _wait("its receipt consumed by a round", consumed, 20)
        finally:
            await rt.stop()
    finally:
        kill_leftover_tasks(state)  # a failure must not leave the task running
