"""The start-up reconciler after a reboot: reason codes and left-over receipts.

A reboot is simulated with the runtime's test-only `boot_id` argument (the
product always reads /proc/sys/kernel/random/boot_id).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from qledge.db import attempts, migrate, runs
from qledge.model import Reason, Run, RunStatus, Trigger
from qledge.operations import trigger
from qledge.runtime.lifecycle import Runtime, read_boot_id

from support import add_task, make_settings, run_when


async def _run(rt: Runtime, run_id: str) -> Run:
    async with rt.db.read() as tx:
        return await runs.get_run(tx, run_id)


async def _until(rt: Runtime, run_id: str, check: object, timeout: float = 20.0) -> Run:
    return await run_when(rt, run_id, check, timeout=timeout)  # type: ignore[arg-type]


def _runtime(state: Path, boot_id: str, **overrides: str) -> Runtime:
    conf = make_settings(state, **overrides)
    migrate.apply(conf.db_path)
    return Runtime(conf, boot_id=boot_id)


def test_the_product_reads_the_kernels_boot_id(tmp_path: Path) -> None:
    rt = Runtime(make_settings(tmp_path / "state"))
    assert rt.boot_id == read_boot_id()
    assert rt.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


async def _running_task(rt: Runtime) -> tuple[Run, int]:
    run = await trigger(rt, await add_task(rt, "sleep 60"), Trigger.API)
    # `running` from spawn step 1; the identity (and started_at_ms) comes at step 4.
    await _until(rt, run.id, lambda r: r.started_at_ms is not None)
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
    assert attempt.pid is not None and attempt.boot_id == "boot-before"
    return run, attempt.pid


def _kill_group(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)
    # Our child (an in-process runtime spawned it): reap it, as init would after a
    # reboot there is no such pid at all.
    os.waitpid(pid, 0)


async def test_an_attempt_from_before_a_reboot_ends_boot_changed(tmp_path: Path) -> None:
    """The pid is gone after the reboot, yet the reason is the boot, not the exit:
    a pid recorded on another boot proves nothing (docs/recovery.md)."""
    before = _runtime(tmp_path / "state", "boot-before")
    await before.start()
    try:
        run, pid = await _running_task(before)
    finally:
        await before.stop()
    _kill_group(pid)  # the power took the task with it

    after = _runtime(tmp_path / "state", "boot-after")
    await after.start()
    try:
        lost = await _run(after, run.id)
        assert lost.status is RunStatus.LOST
        assert lost.exit_code is None
        assert lost.reason_code == Reason.RECOVERY_BOOT_CHANGED.value
        assert after.startup_report is not None
        assert after.startup_report.counts == {
            f"applied:{Reason.RECOVERY_BOOT_CHANGED.value}": 1}
    finally:
        await after.stop()


async def test_a_live_pid_from_another_boot_is_neither_trusted_nor_signalled(
        tmp_path: Path) -> None:
    before = _runtime(tmp_path / "state", "boot-before")
    await before.start()
    try:
        run, pid = await _running_task(before)
    finally:
        await before.stop()
    after = _runtime(tmp_path / "state", "boot-after")
    await after.start()
    try:
        lost = await _run(after, run.id)
        assert (lost.status, lost.reason_code) == (RunStatus.LOST,
                                                   Reason.RECOVERY_BOOT_CHANGED.value)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still running: never signalled
    finally:
        await after.stop()
        _kill_group(pid)


async def test_startup_reaps_a_left_over_receipt_of_a_durable_result(tmp_path: Path) -> None:
    """A result already durable, its receipt back on disk (a power cut forgot the
    unlink, or the worker died before the delete): gone right after start-up, not
    at the next periodic round (made 10 minutes away here)."""
    state = tmp_path / "state"
    before = _runtime(state, "boot", round_interval_s="600")
    await before.start()
    try:
        run = await trigger(before, await add_task(before, "exit 4"), Trigger.API)
        done = await _until(before, run.id, lambda r: r.status is RunStatus.FAILED)
        async with before.db.read() as tx:
            (attempt,) = await attempts.attempts_of_run(tx, run.id)
        receipt = before.receipts.root / before.receipts.relative_path(attempt.id)
        kept = receipt.read_bytes()
    finally:
        await before.stop()  # the result is durable and the receipt reaped
    assert not receipt.exists()
    receipt.write_bytes(kept)  # what a forgotten unlink leaves
    os.chmod(receipt, 0o600)

    after = _runtime(state, "boot", round_interval_s="600")
    await after.start()
    try:
        assert after.startup_report is not None
        assert after.startup_report.counts == {"late_receipt_already_terminal": 1}
        for _ in range(250):
            if not receipt.exists():
                break
            await asyncio.sleep(0.02)
        assert not receipt.exists()
        same = await _run(after, run.id)
        assert (same.status, same.exit_code, same.version) == (
            RunStatus.FAILED, 4, done.version)
    finally:
        await after.stop()
