"""Power-cut drills for the durability classes (docs/storage.md).

A power cut keeps what was fsync'd and loses the rest of the page cache. Here
it is simulated exactly: the worker runs with automatic checkpoints off, so the
WAL only grows; the WAL's size is recorded each time a commit becomes durable
(a durable commit returned, or a sync()); the "disk after the cut" is a copy of
the state dir whose WAL is cut back to that size — the durable prefix of
commits, which is what SQLite's checksummed WAL recovers after a real cut.
Receipts are fsync'd by the launcher, so the copy keeps them as they are. The
processes die with the power: tasks still running are SIGKILLed. Then a new
runtime starts on the copy and must neither lose the real exit code nor invent
a result.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qledge.db import attempts, events, runs
from qledge.model import Reason, Run, RunStatus, Trigger
from qledge.operations import trigger
from qledge.runtime.lifecycle import Runtime

from support import add_task, make_runtime, make_settings, migrate_for, run_when


class Machine:
    """A runtime whose WAL's durable prefix is known at every instant."""

    def __init__(self, state: Path) -> None:
        self.rt = make_runtime(state)
        self.conf = self.rt.settings
        self.wal = Path(f"{self.conf.db_path}-wal")
        self.durable_bytes = 0

    async def start(self) -> None:
        # Results wait for a durable commit to share; none comes in these drills.
        import msgspec

        self.rt.profile = msgspec.structs.replace(self.rt.profile, group_commit_s=600.0)
        await self.rt.start()
        await self.rt.db.maintenance("PRAGMA wal_autocheckpoint=0")
        await self.rt.db.maintenance("PRAGMA wal_checkpoint(TRUNCATE)")
        self.durable_bytes = 0
        advance = self.rt.db._advance

        async def recorded(seq: int) -> None:
            # Called under the write lock right after a durable commit: nothing
            # else has appended to the WAL since that commit's fsync.
            self.durable_bytes = self.wal.stat().st_size
            await advance(seq)

        self.rt.db._advance = recorded  # type: ignore[method-assign]

    def cut_power(self, disk: Path) -> None:
        """What the card holds after the cut: the state dir, its WAL cut back."""
        state = Path(self.conf.state_dir).absolute()
        shutil.copytree(state, disk, symlinks=True)
        wal = disk / self.wal.relative_to(state)
        with open(wal, "r+b") as f:
            f.truncate(self.durable_bytes)
        shm = wal.with_name(wal.name.removesuffix("-wal") + "-shm")
        shm.unlink(missing_ok=True)  # rebuilt from the WAL at the next open


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncIterator[Machine]:
    m = Machine(tmp_path / "before")
    await m.start()
    try:
        yield m
    finally:
        await m.rt.stop()


async def _reboot(disk: Path) -> Runtime:
    """A new runtime on what the disk kept, on a new boot of the machine (its boot id)."""
    conf = make_settings(disk)
    migrate_for(conf)
    rt = Runtime(conf, boot_id=f"after-the-cut-{disk.name}")
    await rt.start()
    return rt


async def _run(rt: Runtime, run_id: str) -> Run:
    async with rt.db.read() as tx:
        return await runs.get_run(tx, run_id)


async def _until(rt: Runtime, run_id: str, check: object, timeout: float = 20.0) -> Run:
    return await run_when(rt, run_id, check, timeout=timeout)  # type: ignore[arg-type]


async def _terminal_events(rt: Runtime, run_id: str) -> list[str]:
    async with rt.db.read() as tx:
        return [e.type for e in await events.list_events(tx, run_id)
                if e.type in ("attempt.finished", "run.finished")]


def _receipts(root: Path) -> list[Path]:
    return sorted((root / "receipts").glob("*/*.json"))


async def test_cut_after_a_deferred_result_replays_it_from_the_receipt(
        machine: Machine, tmp_path: Path) -> None:
    rt = machine.rt
    run = await trigger(rt, await add_task(rt, "exit 7"), Trigger.API)
    await _until(rt, run.id, lambda r: r.status is RunStatus.FAILED)
    # The result (and the identity before it) are committed but not on disk, so
    # the receipt that proved it must still be there.
    assert rt.db.durable_seq < rt.db.commit_seq
    assert len(_receipts(Path(machine.conf.state_dir))) == 1
    disk = tmp_path / "after"
    machine.cut_power(disk)

    after = await _reboot(disk)
    try:
        assert after.startup_report is not None
        assert after.startup_report.counts.get("receipt_applied") == 1  # not from the WAL
        lost = await _run(after, run.id)
        assert lost.status is RunStatus.FAILED
        assert lost.exit_code == 7 and lost.reason_code == Reason.EXITED.value
        assert await _terminal_events(after, run.id) == ["attempt.finished", "run.finished"]
        await after.reaper.drain()
        assert _receipts(disk) == []
    finally:
        await after.stop()


async def test_a_spawn_cut_by_a_reboot_is_not_called_unconfirmed(
        machine: Machine, tmp_path: Path) -> None:
    """Issue 35, finding 20: the task demonstrably started, the cut took its identity
    commit; recovery must not say "the spawn never happened" (RECOVERY_SPAWN_UNCONFIRMED)
    but that it may have run before the machine went down."""
    rt = machine.rt
    started = rt.settings.work_path / "started"  # the task's own folder
    run = await trigger(rt, await add_task(rt, f"touch {started}; sleep 60"), Trigger.API)
    # `running` from spawn step 1; the identity (and started_at_ms) comes at step 4.
    await _until(rt, run.id, lambda r: r.started_at_ms is not None)
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
    assert attempt.pid is not None
    for _ in range(500):
        if started.exists():
            break
        await asyncio.sleep(0.01)
    assert started.exists()  # the task ran
    disk = tmp_path / "after"
    machine.cut_power(disk)
    os.killpg(attempt.pid, signal.SIGKILL)  # the power takes the task with it

    after = await _reboot(disk)
    try:
        # Spawn step 1 was durable (with the boot id), the identity was not: the
        # attempt is found `preparing` from an earlier boot, no receipt exists.
        decided = await _until(after, run.id, lambda r: r.finished_at_ms is not None)
        assert decided.status is RunStatus.LOST, decided
        assert decided.exit_code is None
        assert decided.reason_code == "RECOVERY_SPAWN_BEFORE_REBOOT"
        assert await _terminal_events(after, run.id) == ["attempt.finished", "run.finished"]
        async with after.db.read() as tx:
            assert [a.id for a in await attempts.attempts_of_run(tx, run.id)] == [attempt.id]
    finally:
        await after.stop()


async def test_cut_after_the_next_durable_commit_keeps_the_result(
        machine: Machine, tmp_path: Path) -> None:
    rt = machine.rt
    task_id = await add_task(rt, "exit 3")
    first = await trigger(rt, task_id, Trigger.API)
    await _until(rt, first.id, lambda r: r.status is RunStatus.FAILED)
    second = await trigger(rt, task_id, Trigger.API)  # its step 1 is durable
    await _until(rt, second.id, lambda r: r.status is RunStatus.FAILED)
    disk = tmp_path / "after"
    machine.cut_power(disk)

    after = await _reboot(disk)
    try:
        assert after.startup_report is not None
        assert after.startup_report.counts.get("receipt_applied") == 1  # the second only
        kept = await _run(after, first.id)
        assert (kept.status, kept.exit_code) == (RunStatus.FAILED, 3)
        assert await _terminal_events(after, first.id) == ["attempt.finished", "run.finished"]
        replayed = await _run(after, second.id)
        assert (replayed.status, replayed.exit_code) == (RunStatus.FAILED, 3)
        assert await _terminal_events(after, second.id) == ["attempt.finished", "run.finished"]
    finally:
        await after.stop()


async def test_cut_after_a_deferred_retention_round_keeps_every_run_with_its_log(
        machine: Machine, tmp_path: Path) -> None:
    """Retention deletes runs in a deferred commit; their log files wait for an fsync
    to cover it. A cut before that loses the deletion — and so must keep the files:
    every run that comes back still has its log."""
    import msgspec

    from qledge.launch import logs

    rt = machine.rt
    task_id = await add_task(rt, "echo kept")
    made = []
    for _ in range(3):
        run = await trigger(rt, task_id, Trigger.API)
        made.append(await _until(rt, run.id, lambda r: r.status is RunStatus.SUCCEEDED))
    async with rt.db.read() as tx:
        aids = {r.id: [a.id for a in await attempts.attempts_of_run(tx, r.id)]
                for r in made}
    await rt.reaper.drain()  # results durable, receipts gone: journal rows may age out
    rt.supervisor.retention.retention_ms = 0  # the journal's due rule (runtime/reaper.py)
    rt.supervisor.age_overdue_ms = 0  # no spawn follows: the supervisor's backstop
    await rt.supervisor.round()
    retention = rt.disk.retention
    retention.profile = msgspec.structs.replace(rt.profile, keep_runs_per_task=1,
                                                retention_interval_s=600.0)
    report = await retention.round()
    assert report.counts.get("runs_deleted") == 2, report.counts
    assert report.counts.get("files_waiting_for_fsync") == 2
    disk = tmp_path / "after"
    machine.cut_power(disk)

    after = await _reboot(disk)
    try:
        for r in made:  # the deletion was not on disk: every run is back, log and all
            back = await _run(after, r.id)
            assert (back.status, back.exit_code) == (RunStatus.SUCCEEDED, 0)
            (aid,) = aids[r.id]
            assert (after.settings.logs_path / logs.relative_path(aid)).read_bytes() \
                == b"kept\n"
    finally:
        await after.stop()
