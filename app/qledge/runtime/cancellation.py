"""Timeouts and cancellation: committed intent first, then fenced signals.

Every cancel — user, timeout, policy, shutdown — first commits
`run.cancel_requested(reason)`; only then may a driver holding the attempt's
lease signal it: TERM to the launcher (which forwards it to the task's
process group), KILL to the group after the profile's grace. Before each
signal the lease row must still carry the driver's epoch (checked inside the
write transaction, so no takeover can slip in between) and the launcher's
identity must still match (a pidfd opened before the re-check). The result is
decided by the committed intent (transitions._intent_wins), never by which
signal or receipt came first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from .. import transitions
from ..clock import now_ms
from ..db import attempts, events, leases, rows, runs
from ..db.interface import Database
from ..launch import identity
from ..limits import SWEEP_BATCH, UNBOUNDED
from ..model import TERMINAL_RUN, Attempt, CancelReason, NewEvent, RunStatus
from ..settings import Profile
from . import conc
from .completion import CompletionService
from .loop import settle

log = logging.getLogger("qledge.cancellation")


class RunTerminal(Exception):
    """Cancel of a run that already ended (HTTP 409)."""


CANCEL_CHANNEL = "qledge_cancel"


class Cancellation:
    def __init__(self, *, db: Database, node_id: str, incarnation: str, boot_id: str,
                 profile: Profile, completion: CompletionService,
                 record_first: Callable[[int | None], Awaitable[None]] | None = None) -> None:
        self.db = db
        self.node_id = node_id
        self.incarnation = incarnation
        self.boot_id = boot_id
        self.kill_grace_s = profile.kill_grace_s
        self.completion = completion
        self.lease_ttl_ms = int((self.kill_grace_s * 2 + 10) * 1000)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._drivers: dict[str, asyncio.Task[None]] = {}
        # Deadline checks started by the timers: owned here, cancelled and awaited at stop.
        self._checks: set[asyncio.Task[None]] = set()
        # Writes the launcher identities still held in memory (launch/unrecorded.py)
        # before a sweep looks for running attempts to signal: a signal needs one.
        # (argument: a deadline check's time — only identities expired by then).
        self.record_first = record_first

    async def start(self) -> None:
        await self.sweep(UNBOUNDED, orphans=True)

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await settle([*self._checks, *self._drivers.values()], 0)

    # -- intents ---------------------------------------------------------------

    async def request(self, run_id: str, reason: CancelReason) -> RunStatus:
        """Commit the intent (idempotent); a queued run ends at once, a running one is
        signalled — at once, or by the sweep that follows its identity commit when its
        launcher is still being spawned (docs/recovery.md)."""
        async with self.db.write() as tx:
            run = await runs.get_run(tx, run_id)
            if run.status in TERMINAL_RUN:
                raise RunTerminal(run.status.value)
            tr = transitions.request_cancel(run, reason, now_ms())
            if tr is not None:
                run = await runs.apply(tx, run, tr, now_ms())
                # A `task … conc` parent: the intent reaches its children too (the
                # last one to end finishes the parent, in its own commit).
                await conc.cancel_children(tx, run, reason, now_ms())
                run = await runs.get_run(tx, run.id)
                # Fleet mode: only the owner can signal its launcher; wake every
                # node's sweep on commit (a lost one costs a supervision round).
                await tx.notify(CANCEL_CHANNEL)
            if run.status is RunStatus.QUEUED:
                run = await runs.end_if_queued(tx, run, now_ms())
                if run.status in TERMINAL_RUN:
                    return run.status
        await self.sweep(SWEEP_BATCH)
        return run.status

    def track(self, attempt: Attempt) -> None:
        """In-memory fast path for a deadline; the DB sweep is the authority after restarts."""
        if attempt.deadline_at_ms is None:
            return
        self._arm(attempt.id, attempt.deadline_at_ms)

    def _arm(self, attempt_id: str, deadline_at_ms: int) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline_at_ms - now_ms()) / 1000)
        self._timers[attempt_id] = loop.call_later(
            delay, self._deadline_reached, attempt_id, deadline_at_ms)

    def _deadline_reached(self, attempt_id: str, deadline_at_ms: int) -> None:
        self._timers.pop(attempt_id, None)
        if now_ms() < deadline_at_ms:
            # The loop's timers keep whole milliseconds of the monotonic clock, the
            # deadline is in wall-clock milliseconds: a timer may fire a millisecond
            # before it. The query would then find nothing expired, and the timeout
            # would wait for the next supervision round (30 s later).
            self._arm(attempt_id, deadline_at_ms)
            return
        task = asyncio.create_task(self._check_deadlines(), name=f"deadline:{attempt_id}")
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check_deadlines(self) -> None:
        try:
            await self.expire_deadlines(SWEEP_BATCH)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The supervisor's round looks for expired deadlines too: nothing is lost.
            log.exception("deadline check failed; the next supervision round retries")

    def untrack(self, attempt_id: str) -> None:
        timer = self._timers.pop(attempt_id, None)
        if timer is not None:
            timer.cancel()

    async def expire_deadlines(self, limit: int) -> int:
        """Commit timeout intents for expired deadlines, then drive their signals."""
        if self.record_first is not None:
            await self.record_first(now_ms())
        async with self.db.read() as tx:
            expired = await attempts.expired_attempts(tx, self.node_id, now_ms(), limit)
        committed = 0
        for attempt in expired:
            async with self.db.write() as tx:
                run = await runs.get_run(tx, attempt.run_id)
                if run.status in TERMINAL_RUN:
                    continue
                tr = transitions.request_cancel(run, CancelReason.TIMEOUT, now_ms())
                if tr is not None:
                    await runs.apply(tx, run, tr, now_ms())
                    committed += 1
        # Nothing new to signal: the identities still in their grace stay there.
        await self.sweep(limit, record=committed > 0)
        return committed

    async def sweep(self, limit: int, *, orphans: bool = False, record: bool = True) -> None:
        """Make sure every running attempt with a committed intent has a driver.

        `orphans`: at start only, the running attempts of runs not `running` too (an
        older version's orphans, adopted by start-up recovery): a walk of run_attempts,
        since attempts are otherwise found through their running runs (migration 0022).
        `record`: commit the identities still in their grace first (a new intent may
        name one of them)."""
        if record and self.record_first is not None:
            await self.record_first(None)
        async with self.db.read() as tx:
            cancelling = await leases.cancelling_attempts(tx, self.node_id, limit)
            if orphans:
                cancelling += await leases.cancelling_orphans(tx, self.node_id, limit)
        for attempt in cancelling:
            if attempt.id not in self._drivers:
                task = asyncio.create_task(self._drive(attempt), name=f"cancel:{attempt.id}")
                self._drivers[attempt.id] = task
                task.add_done_callback(self._forget(attempt.id))

    def _forget(self, attempt_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self._drivers.pop(attempt_id, None)
        return done

    async def cancel_all_for_shutdown(
            self, drain_s: float, spawning: Callable[[str], bool] = lambda _a: False) -> None:
        """Intents for every active attempt of this node, then their signals, within the
        drain. `spawning(attempt_id)`: still between spawn step 1 and its identity
        commit — its driver can start only at that commit (SpawnResult.cancelling), so
        those commits are waited for first."""
        loop = asyncio.get_running_loop()
        until = loop.time() + drain_s
        async with self.db.read() as tx:
            active = await attempts.active_attempts_page(tx, self.node_id, "", UNBOUNDED)
        for attempt in active:
            with contextlib.suppress(RunTerminal, rows.Conflict):
                await self.request(attempt.run_id, CancelReason.SHUTDOWN)
        for _ in range(int(drain_s / 0.02)):  # a bounded look at an in-memory set
            if not any(spawning(a.id) for a in active):
                break
            await asyncio.sleep(0.02)
        await self.sweep(UNBOUNDED)
        if self._drivers:
            await asyncio.wait(list(self._drivers.values()),
                               timeout=max(0.0, until - loop.time()))

    # -- fenced signals ----------------------------------------------------------

    async def _drive(self, attempt: Attempt) -> None:
        try:
            async with self.db.write() as tx:
                lease = await leases.acquire(tx, attempt.id, self.incarnation, now_ms(),
                                             self.lease_ttl_ms)
            if lease is None:
                return  # another live incarnation drives it
            pidfd = self._open(attempt)
            if pidfd is None:
                return  # already gone: the exit path (receipt or intent) decides
            try:
                if not await self.signal(lease, attempt, pidfd, signal.SIGTERM):
                    return
                if await identity.wait_exit(pidfd, self.kill_grace_s):
                    return
                await self.signal(lease, attempt, pidfd, signal.SIGKILL)
            finally:
                os.close(pidfd)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cancellation of attempt %s failed; the next sweep retries", attempt.id)

    def _open(self, attempt: Attempt) -> int | None:
        if attempt.pid is None or attempt.proc_start_time is None or not attempt.boot_id:
            return None
        ident = identity.Identity(pid=attempt.pid, start_time=attempt.proc_start_time,
                                  boot_id=attempt.boot_id)
        pidfd, _ = identity.open_pidfd(ident, self.boot_id)
        return pidfd

    async def signal(self, lease: leases.Lease, attempt: Attempt, pidfd: int,
                     sig: signal.Signals) -> bool:
        """Send `sig` only while the lease row carries our epoch (inside the write lock)."""
        async with self.db.write() as tx:
            if not await leases.holds(tx, lease, now_ms()):
                log.warning("lease of attempt %s fenced off (epoch %d): no signal",
                            attempt.id, lease.epoch)
                return False
            if identity.exited(pidfd):
                return False
            assert attempt.pid is not None and attempt.proc_start_time is not None
            ident = identity.Identity(pid=attempt.pid, start_time=attempt.proc_start_time,
                                      boot_id=attempt.boot_id or "")
            # TERM: the launcher forwards it to the task's group and stays to write
            # the receipt. KILL: the whole group (the launcher's pid is its id).
            if not identity.send_signal(pidfd, ident, self.boot_id, sig,
                                        group=sig is not signal.SIGTERM):
                return False
            column = "term_sent_at_ms" if sig is signal.SIGTERM else "kill_sent_at_ms"
            await leases.record_signal(tx, attempt.id, column, now_ms())
            run = await runs.get_run(tx, attempt.run_id)
            await events.append_events(tx, run, [NewEvent(
                type="attempt.signal_sent", attempt_id=attempt.id,
                data={"signal": sig.name, "epoch": lease.epoch})], now_ms(),
                {attempt.id: attempt.attempt_no})
        return True

