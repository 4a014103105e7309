"""Receipt reaper: a consumed receipt is deleted once the result it proved is durable.

Results are committed without an fsync of their own (a deferred commit,
docs/storage.md): the next durable commit — typically the next attempt's
spawn step 1 — or, at the latest `window_s` later, one explicit fdatasync of
the WAL makes them durable. Until then the receipt stays where it is and is
the durable proof: a power cut that loses the committed result leaves the
receipt, which recovery replays into the same result. A receipt is never
deleted before a fsync that follows the commit it was consumed by, nor when
that commit is in doubt (`Database.proven`: a PostgreSQL server that crashed
in between may have dropped it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..db import journal
from ..db.interface import Database
from ..receipts.store import ReceiptStore

log = logging.getLogger("qledge.reaper")


class Reaper:
    def __init__(self, db: Database, receipts: ReceiptStore, window_s: float) -> None:
        self.db = db
        self.receipts = receipts
        self.window_s = window_s
        # (commit seq, attempt ids, a time before that commit settled their rows)
        self._pending: list[tuple[int, list[str], int]] = []
        self._kick = asyncio.Event()
        # The loop and drain() both remove: one at a time, so none deletes a file on
        # the strength of a list another has handled (and, meanwhile, seen republished).
        self._removing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.removed = 0
        self.forced_syncs = 0

    def remove_after(self, seq: int, attempt_ids: list[str], since_ms: int) -> None:
        """Delete these receipts once commit `seq` (their consumption) is on disk.
        `since_ms`: taken before that commit, so no row it settled is older."""
        if not attempt_ids:
            return
        self._pending.append((seq, attempt_ids, since_ms))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="reaper")
        self._kick.set()

    @property
    def waiting(self) -> int:
        return sum(len(ids) for _, ids, _ in self._pending)

    @property
    def oldest_since_ms(self) -> int | None:
        """No journal row settled before this is still waiting here (None: nothing is)."""
        return min((since for _, _, since in self._pending), default=None)

    def holds(self, attempt_id: str) -> bool:
        """Consumed, its deletion waiting for the fsync: not a late receipt."""
        return any(attempt_id in ids for _, ids, _ in self._pending)

    async def _loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._pending:
                try:
                    await self._reap_once()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # A failed fsync proves nothing: the receipts stay, and the loop
                    # (not a lost exception) tries again after the window.
                    log.exception("receipt reaping failed; retrying in %ss", self.window_s)
                    await asyncio.sleep(self.window_s)

    async def _reap_once(self) -> None:
        seq = max(s for s, _, _ in self._pending)
        try:
            await asyncio.wait_for(self.db.wait_durable(seq), self.window_s)
        except TimeoutError:
            # No durable commit came along to share: pay for one fsync.
            await self.db.sync()
            self.forced_syncs += 1
        await self._remove_durable()

    async def _remove_durable(self) -> None:
        async with self._removing:
            durable = self.db.durable_seq
            ready = [p for p in self._pending if p[0] <= durable]
            kept: list[str] = []
            doubtful: list[str] = []
            for seq, ids, _ in ready:
                if self.db.proven(seq):
                    kept += await asyncio.to_thread(self._remove_all, ids)
                else:
                    # Consumed by a commit the database server may have lost in a crash
                    # (db/_durability.py): the receipt is still the proof of the result.
                    doubtful += ids
            if doubtful:
                log.warning("%d consumed receipts kept: their commit may have been lost "
                            "with the database server", len(doubtful))
                kept += doubtful
            if kept:
                # Left behind (a failed delete, a commit in doubt): the journal-driven
                # scan replays each — into already_terminal if its commit survived, into
                # its result if not — once its row is back with the rows that need file
                # checks. Durable: a row left settled would age out beside its file.
                async with self.db.write() as tx:
                    await journal.journal_unsettle(tx, kept)
            # Dropped from _pending only now: until their files are gone (or their rows
            # are back with the file checks) these rows must not age out.
            self._pending = [p for p in self._pending if not any(p is r for r in ready)]

    def _remove_all(self, attempt_ids: list[str]) -> list[str]:
        """Delete these receipts; the ids whose file could not be deleted."""
        failed = []
        for attempt_id in attempt_ids:
            try:
                if self.receipts.remove(attempt_id):
                    self.removed += 1
            except OSError as exc:
                failed.append(attempt_id)
                log.warning("could not remove a consumed receipt: %s", type(exc).__name__)
        return failed

    async def drain(self) -> None:
        """Now: one fsync if needed, then every receipt waiting for it is deleted."""
        if self._pending and self.db.is_open:
            await self.db.sync()
            await self._remove_durable()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.drain()


class JournalRetention:
    """When a settled journal row is due: past the journal retention, minus any whose
    receipt file the reaper still holds (it deletes after an fsync, normally within
    group_commit_s). Spawn step 1 (the executor) and the supervision rounds age rows by
    this one rule; it exists before either of them."""

    def __init__(self, retention_s: float, reaper: Reaper) -> None:
        self.retention_ms = int(retention_s * 1000)
        self.reaper = reaper

    def cutoff(self, now: int) -> int:
        cutoff = now - self.retention_ms
        held = self.reaper.oldest_since_ms
        if held is not None:
            cutoff = min(cutoff, held - 1)
        return cutoff
