"""Recovery of active attempts from the database (never from a directory listing).

Per attempt: a receipt present → the consumer (one door); else the durable
identity decides: other boot → `lost` (before anything about the pid);
running → keep and re-attach a pidfd; exited → one bounded publish grace, look
again, else `lost`; unsupported/mismatched → fail closed with a stable reason.
A bare pid is never signalled. At start-up, left-over receipts of attempts
already terminal are consumed (`already_terminal`) and reaped too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import msgspec

from .. import transitions
from ..clock import now_ms
from ..db import attempts, journal, rows, runs
from ..db.interface import Database
from ..launch import identity
from ..limits import UNBOUNDED
from ..model import TERMINAL_RUN, Attempt, AttemptStatus, Reason
from ..settings import Profile
from .completion import CompletionService, Outcome
from .consumer import Consumed, Consumer

log = logging.getLogger("qledge.reconciler")

_FAIL_CLOSED = {
    identity.Liveness.MISMATCH: (Reason.RECOVERY_IDENTITY_MISMATCH, AttemptStatus.LOST),
    identity.Liveness.BOOT_CHANGED: (Reason.RECOVERY_BOOT_CHANGED, AttemptStatus.LOST),
    identity.Liveness.UNSUPPORTED: (Reason.RECOVERY_IDENTITY_UNSUPPORTED, AttemptStatus.BLOCKED),
}


class RoundReport(msgspec.Struct, kw_only=True):
    kind: str
    started_at_ms: int
    finished_at_ms: int = 0
    examined: int = 0
    counts: dict[str, int] = {}

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n


class Reconciler:
    def __init__(self, *, db: Database, consumer: Consumer, completion: CompletionService,
                 node_id: str, boot_id: str, profile: Profile,
                 reattach: Callable[[str, int], None],
                 in_flight: Callable[[str], bool], journal_owner: str | None = None) -> None:
        self.db = db
        self.consumer = consumer
        self.completion = completion
        self.node_id = node_id
        # Fleet mode: this node's journal entries only (their receipts are on its disk).
        self.journal_owner = journal_owner
        self.boot_id = boot_id
        self.grace_s = profile.publish_grace_ms / 1000
        self.reattach = reattach  # hands a pidfd to the exit watcher
        self.in_flight = in_flight  # attempts this worker is spawning or already watches

    async def startup(self, page_size: int = 64, max_pages: int = 100_000) -> RoundReport:
        """Every active attempt of this node, before /readyz turns 200.

        Active attempts are found through their running runs (migration 0022); an
        older version's orphans (an active attempt under a terminal or a queued run)
        are not on that path and no index leads to them: one walk of run_attempts finds
        them here, the only place that looks (none is made any more). They are checked
        after the others, like any active attempt at start-up."""
        report = RoundReport(kind="startup", started_at_ms=now_ms())
        orphans: list[Attempt] = []
        async with self.db.read() as tx:
            cursor = ""
            for _ in range(max_pages):
                page = await attempts.orphan_attempts(tx, self.node_id, cursor, page_size)
                if not page:
                    break
                cursor = page[-1].id
                orphans.extend(page)
        async with self.db.write() as tx:
            # Attempts from before the journal existed get their row, idempotently.
            bare = await attempts.attempts_without_journal(tx, self.node_id, UNBOUNDED)
            bare += orphans  # registered only if they have no entry yet
            for attempt in bare:
                shard_rel = self.consumer.receipts.relative_path(attempt.id)
                if await journal.journal_register(tx, attempt.id, shard_rel, now_ms()):
                    report.add("journal_registered")
        cursor = ""
        for _ in range(max_pages):
            async with self.db.read() as tx:
                page = await attempts.active_attempts_page(tx, self.node_id, cursor, page_size)
            if not page:
                break
            cursor = page[-1].id
            await self.check(page, report, startup=True)
        for start in range(0, len(orphans), page_size):
            await self.check(orphans[start:start + page_size], report, startup=True)
        await self._leftovers(report, page_size, max_pages)
        report.finished_at_ms = now_ms()
        return report

    async def _leftovers(self, report: RoundReport, page_size: int, max_pages: int) -> None:
        """Receipts of attempts already terminal: the result was durable but the
        receipt stayed or came back (the worker died before the reaper's delete, a
        power cut undid the unlink, or it was published after the attempt was decided
        without it). Consumed into `already_terminal` and reaped now, not a periodic
        round (30 s on edge) later. Settled rows are looked at too: they age out
        without file work, so this is their one look. The journal is small: it holds
        active attempts and those that ended within the journal retention."""
        cursor = ""
        for _ in range(max_pages):
            async with self.db.read() as tx:
                ids = await journal.journal_ended_page(tx, cursor, page_size,
                                                       self.journal_owner)
            if not ids:
                break
            cursor = ids[-1]
            # Consumed by the active pass just now: already handed to the reaper.
            ended = [a for a in ids if not self.consumer.reaper.holds(a)]
            for got in (await self.consumer.consume_many(ended)).values():
                if got is not Consumed.MISSING:
                    report.add(f"late_receipt_{got.value}")

    async def _adopt(self, attempt: Attempt, ident: identity.Identity | None) -> bool:
        """Record the identity of an unconfirmed launcher found by its attempt id.

        Safe against impostors: adoption only decides that we keep waiting; the
        result still needs a receipt carrying the attempt's token. An orphan (its run
        already ended: a cancel that raced the spawn in an earlier version) is adopted
        too, never left running unrecorded: the run's committed intent has the
        cancellation sweep that follows start-up stop it, and its receipt settles
        the attempt.
        """
        if ident is None:
            return False
        pidfd, _live = identity.open_pidfd(ident, self.boot_id)
        if pidfd is None:
            return False
        try:
            async with self.db.write() as tx:
                run = await runs.get_run(tx, attempt.run_id)
                current = await attempts.get_attempt(tx, attempt.id)
                started = (transitions.orphan_started if run.status in TERMINAL_RUN
                           else transitions.attempt_started)
                # Started when spawned: right after step 1 (its time), before the kill
                # that left it unrecorded — not now.
                tr = started(run, current, pid=ident.pid, start_time=ident.start_time,
                             boot_id=ident.boot_id, now_ms=current.created_at_ms)
                await runs.apply(tx, run, tr, now_ms())
        except (transitions.InvalidTransition, rows.Conflict):
            os.close(pidfd)
            return False
        self.reattach(attempt.id, pidfd)
        log.warning("adopted the unconfirmed launcher of attempt %s (pid %d)", attempt.id,
                    ident.pid)
        return True

    async def check(self, page: list[Attempt], report: RoundReport, *,
                    startup: bool) -> None:
        """Decide a page of active page; the publish grace is waited once per page."""
        if not startup:
            page = [a for a in page if not self.in_flight(a.id)]
        if not page:
            return
        report.examined += len(page)
        results = await self.consumer.consume_many([a.id for a in page])
        exited: list[tuple[Attempt, Reason, AttemptStatus]] = []
        unconfirmed = [(a.run_id, a.id) for a in page
                       if a.status is AttemptStatus.PREPARING and results[a.id] not in (
                           Consumed.APPLIED, Consumed.ALREADY_TERMINAL, Consumed.RETRY)]
        # One walk of /proc for the page (in a thread, off the loop), not one per attempt.
        launchers = (await asyncio.to_thread(identity.find_launchers, unconfirmed, self.boot_id)
                     if startup and unconfirmed else {})
        for attempt in page:
            got = results[attempt.id]
            if got in (Consumed.APPLIED, Consumed.ALREADY_TERMINAL, Consumed.RETRY):
                report.add(f"receipt_{got.value}")
                continue
            if got is Consumed.QUARANTINED:
                report.add("receipt_quarantined")
            if attempt.status is AttemptStatus.PREPARING:
                # Spawn never confirmed (the worker died between spawn and the identity
                # commit). Its launcher may be running: adopt it by its unique attempt id.
                # Else, on the boot that prepared it, no launcher of it runs; prepared on
                # an earlier boot, a power loss or reboot may have taken a launcher that
                # ran the task, with its unsynced receipt and deferred identity commit —
                # a different fact for whoever decides to run it again (contract.md).
                # Either way no signal is ever sent here.
                if startup and await self._adopt(attempt, launchers.get(attempt.id)):
                    report.add("adopted")
                    continue
                rebooted = attempt.spawn_boot_id not in (None, self.boot_id)
                exited.append((attempt, Reason.RECOVERY_SPAWN_BEFORE_REBOOT if rebooted
                               else Reason.RECOVERY_SPAWN_UNCONFIRMED, AttemptStatus.LOST))
                continue
            if attempt.pid is None or attempt.proc_start_time is None or not attempt.boot_id:
                exited.append((attempt, Reason.RECOVERY_IDENTITY_MISSING, AttemptStatus.LOST))
                continue
            ident = identity.Identity(pid=attempt.pid, start_time=attempt.proc_start_time,
                                      boot_id=attempt.boot_id)
            pidfd, live = identity.open_pidfd(ident, self.boot_id)
            if pidfd is not None:
                self.reattach(attempt.id, pidfd)
                report.add("reattached")
            elif live is identity.Liveness.EXITED:
                exited.append((attempt, Reason.RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT,
                               AttemptStatus.LOST))
            else:
                reason, status = _FAIL_CLOSED[live]
                exited.append((attempt, reason, status))
        if not exited:
            return
        # The launcher publishes before it exits, but give a racing publish one grace.
        await asyncio.sleep(self.grace_s)
        again = await self.consumer.consume_many([a.id for a, _, _ in exited])
        for attempt, reason, status in exited:
            got = again[attempt.id]
            if got in (Consumed.APPLIED, Consumed.ALREADY_TERMINAL, Consumed.RETRY):
                report.add(f"receipt_{got.value}")
                continue
            result = await self.completion.without_receipt(attempt.id, reason, status,
                                                           seen=attempt.status)
            report.add(f"{result.outcome.value}:{reason.value}")
            if result.outcome is Outcome.APPLIED:
                log.warning("attempt %s has no receipt: %s (%s)", attempt.id, reason.value,
                            result.status)
