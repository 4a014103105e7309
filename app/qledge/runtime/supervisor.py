"""Periodic supervision rounds: bounded pages, a cursor that resumes, no overlap.

Each round (the profile's interval; pages × page size caps the file work):
1. active attempts not watched by this worker → the reconciler's check
   (receipt → consumer; identity → keep/re-attach/lost);
2. settled journal rows (their receipt consumed, or known never to come) older
   than the journal retention age out in spawn step 1's commit (the executor asks
   `journal_cutoff`); a round ages them itself, in ONE bounded UPDATE, only as the
   backstop for when no spawn comes: more than `age_backlog` due, or one overdue
   by `age_overdue_ms` — no file work, so not capped below the run rate
   (docs/storage.md);
3. the other journal rows: a terminal attempt's left-over receipt is consumed
   into `already_terminal` and removed; rows whose receipt is gone age out
   after the journal retention; quarantined files are purged exactly after
   the quarantine retention, then their rows dropped;
4. expired deadlines are handed to the cancellation side (timeouts).
Reports carry counts and bounded relative references, never file contents.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..clock import now_ms
from ..db import attempts, journal
from ..db.interface import Database
from ..launch import identity
from ..model import ACTIVE_ATTEMPT
from ..receipts.store import QUARANTINE_DIR, ReceiptStore, quarantine_names
from ..settings import Profile
from .consumer import Consumed, Consumer
from .reaper import JournalRetention
from .reconciler import Reconciler, RoundReport

log = logging.getLogger("qledge.supervisor")
# Settled rows dropped per round, at most: a bound on one transaction, far above
# any sustained run rate (edge: 30 s rounds → 8000 runs/min).
AGE_OUT_PER_ROUND = 4000
# The backstop's trigger (spawn step 1 ages due rows in a commit it makes anyway; a
# round's own ageing is a cold commit, ~20 KiB on an SD card, docs/performance.md):
# more than this many due, which bounds the due rows left waiting for a spawn...
AGE_BACKLOG = 32
# ...or one due for this long: at cron pace slower than hourly no spawn comes in time.
AGE_OVERDUE_MS = 3_600_000


class Supervisor:
    def __init__(self, *, db: Database, consumer: Consumer, reconciler: Reconciler,
                 receipts: ReceiptStore, node_id: str, boot_id: str, profile: Profile,
                 retention: JournalRetention, on_expired: Callable[[int], Awaitable[int]],
                 watching: Callable[[str], bool], journal_owner: str | None) -> None:
        self.db = db
        self.consumer = consumer
        self.reconciler = reconciler
        self.receipts = receipts
        self.node_id = node_id
        self.profile = profile
        self.retention = retention
        self.on_expired = on_expired
        self.active_cursor = ""
        self.journal_cursor = ""
        self.last: RoundReport | None = None
        self.age_backlog = AGE_BACKLOG
        self.age_overdue_ms = AGE_OVERDUE_MS
        # Fleet mode: this node's entries only (their receipts are on its disk).
        self.journal_owner = journal_owner
        # Launchers whose exit this worker watches, and the boot they run on: an ended
        # attempt's launcher still running keeps its journal entry (_launchers_gone).
        self.watching = watching
        self.boot_id = boot_id

    async def round(self) -> RoundReport:
        report = RoundReport(kind="periodic", started_at_ms=now_ms())
        size, pages = self.profile.page_size, self.profile.pages
        for _ in range(pages):
            async with self.db.read() as tx:
                page = await attempts.active_attempts_page(tx, self.node_id, self.active_cursor,
                                                        size)
            self.active_cursor = page[-1].id if len(page) == size else ""
            await self.reconciler.check(page, report, startup=False)
            if len(page) < size:
                break
        await self._age_out(report)
        for _ in range(pages):
            async with self.db.read() as tx:
                rows = await journal.journal_page(tx, self.journal_cursor, size,
                                                  self.journal_owner)
            self.journal_cursor = rows[-1].attempt_id if len(rows) == size else ""
            await self._journal(rows, report)
            if len(rows) < size:
                break
        expired = await self.on_expired(size)
        if expired:
            report.add("deadline_expired", expired)
        report.finished_at_ms = now_ms()
        self.last = report
        if report.counts:
            log.info("supervision round: %s", report.counts)
        return report

    def journal_cutoff(self, now: int) -> int:
        """Settled rows before this are due (runtime/reaper.py JournalRetention); spawn
        step 1 ages by the same cutoff."""
        return self.retention.cutoff(now)

    async def _age_out(self, report: RoundReport) -> None:
        """The backstop: a commit of its own only when spawns do not keep up (more than
        `age_backlog` due) or none came for `age_overdue_ms`; then every due row."""
        cutoff = self.journal_cutoff(now_ms())
        async with self.db.read() as tx:
            due = await journal.journal_due(tx, cutoff, self.age_backlog + 1)
            overdue = due > 0 and await journal.journal_due(
                tx, cutoff - self.age_overdue_ms, 1) > 0
        if due <= self.age_backlog and not overdue:
            return
        # Deferred, like the other journal bookkeeping: a lost drop is redone later.
        async with self.db.write(durable=False) as tx:
            dropped = await journal.journal_age_out(tx, cutoff, AGE_OUT_PER_ROUND)
        if dropped:
            report.add("journal_aged_out", dropped)

    async def _journal(self, rows: list[journal.JournalRow], report: RoundReport) -> None:
        now = now_ms()
        keep_ms = int(self.profile.journal_retention_s * 1000)
        purge_ms = int(self.profile.quarantine_retention_s * 1000)
        # A receipt the reaper holds was consumed already; it waits for an fsync.
        terminal = [r for r in rows
                    if r.state == "pending" and r.attempt_status not in ACTIVE_ATTEMPT
                    and not self.consumer.reaper.holds(r.attempt_id)]
        results = await self.consumer.consume_many([r.attempt_id for r in terminal])
        to_mark: list[str] = []
        to_drop: list[str] = []
        for row in terminal:
            got = results[row.attempt_id]
            if got is not Consumed.MISSING:
                report.add(f"late_receipt_{got.value}")
            elif row.retention_since_ms is None:
                to_mark.append(row.attempt_id)
            elif row.retention_since_ms + keep_ms <= now:
                to_drop.append(row.attempt_id)
        if to_drop:
            to_drop = await self._launchers_gone(to_drop)
        if to_mark or to_drop:
            # One transaction per page, not one per row, and deferred (no fsync of
            # its own): a power cut that loses it only makes a later round redo it.
            async with self.db.write(durable=False) as tx:
                for attempt_id in to_mark:
                    await journal.journal_mark_terminal(tx, attempt_id, now)
                for attempt_id in to_drop:
                    await journal.journal_delete(tx, attempt_id)
            if to_drop:
                report.add("journal_dropped", len(to_drop))
        for row in rows:
            if row.state != "quarantined":
                continue
            active = row.attempt_status in ACTIVE_ATTEMPT
            if not active and await asyncio.to_thread(self._still_in_place, row.attempt_id):
                # A file at the final name after a quarantine is NOT necessarily the
                # rejected one again (the launcher may have published its real receipt
                # under the freed name): it goes through the one door, never a blind
                # move. Active attempts are left to the exit watcher and the active scan.
                got = await self.consumer.consume(row.attempt_id)
                report.add(f"late_receipt_{got.value}")
            elif row.retention_since_ms is not None and row.retention_since_ms + purge_ms <= now:
                purged = await asyncio.to_thread(self._purge, row.attempt_id)
                async with self.db.write() as tx:
                    if active:  # keep indexing a running attempt's future receipt
                        await journal.journal_reset_pending(tx, row.attempt_id, now)
                    else:
                        await journal.journal_delete(tx, row.attempt_id)
                report.add("quarantine_purged", purged)

    async def _launchers_gone(self, attempt_ids: list[str]) -> list[str]:
        """Those of these ended attempts whose launcher no longer runs. One that runs on
        was decided without it — `lost` by a fleet takeover while its node was away —
        and its receipt is still to come: the entry stays, or that receipt would be
        found by no round and recorded by nobody once this worker stops watching it."""
        gone: list[str] = []
        async with self.db.read() as tx:
            for attempt_id in attempt_ids:
                if self.watching(attempt_id):
                    continue
                attempt = await attempts.find_attempt(tx, attempt_id)
                if (attempt is not None and attempt.pid is not None
                        and attempt.proc_start_time is not None and attempt.boot_id
                        and identity.check(identity.Identity(
                            pid=attempt.pid, start_time=attempt.proc_start_time,
                            boot_id=attempt.boot_id), self.boot_id)
                        is identity.Liveness.RUNNING):
                    continue
                gone.append(attempt_id)
        return gone

    def _still_in_place(self, attempt_id: str) -> bool:
        try:
            return self.receipts.read(attempt_id) is not None
        except OSError:
            return False

    def _purge(self, attempt_id: str) -> int:
        shard = self.receipts.relative_path(attempt_id).split("/", 1)[0]
        purged = 0
        for name in quarantine_names(attempt_id):
            try:
                purged += self.receipts.purge_quarantined(f"{QUARANTINE_DIR}/{shard}/{name}")
            except OSError:
                break
        return purged
