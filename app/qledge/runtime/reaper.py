"""Receipt reaper: a consumed receipt is deleted once the result it proved is durable.

Results are committed without an fsync of their own (a deferred commit,
docs/storage.md): the next durable commit — typically the next attempt's
spawn step 1 — or, at the latest `window_s` later, one explicit fdatasync of
the WAL makes them durable. Until then the receipt stays where it is and is
the durable proof: a power cut that loses the committed result leaves the
receipt, which recovery replays into the same result. A receipt is never
deleted before a fsync that follows the commit it was consumed by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..db.connection import Database
from ..receipts.store import ReceiptStore

log = logging.getLogger("qledge.reaper")


class Reaper:
    def __init__(self, db: Database, receipts: ReceiptStore, window_s: float) -> None:
        self.db = db
        self.receipts = receipts
        self.window_s = window_s
        self._pending: list[tuple[int, list[str]]] = []
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.removed = 0
        self.forced_syncs = 0

    def remove_after(self, seq: int, attempt_ids: list[str]) -> None:
        """Delete these receipts once commit `seq` (their consumption) is on disk."""
        if not attempt_ids:
            return
        self._pending.append((seq, attempt_ids))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="reaper")
        self._kick.set()

    @property
    def waiting(self) -> int:
        return sum(len(ids) for _, ids in self._pending)

    def holds(self, attempt_id: str) -> bool:
        """Consumed, its deletion waiting for the fsync: not a late receipt."""
        return any(attempt_id in ids for _, ids in self._pending)

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
        seq = max(s for s, _ in self._pending)
        try:
            await asyncio.wait_for(self.db.wait_durable(seq), self.window_s)
        except TimeoutError:
            # No durable commit came along to share: pay for one fsync.
            await self.db.sync()
            self.forced_syncs += 1
        await self._remove_durable()

    async def _remove_durable(self) -> None:
        durable = self.db.durable_seq
        ready = [ids for s, ids in self._pending if s <= durable]
        self._pending = [(s, ids) for s, ids in self._pending if s > durable]
        for ids in ready:
            await asyncio.to_thread(self._remove_all, ids)

    def _remove_all(self, attempt_ids: list[str]) -> None:
        for attempt_id in attempt_ids:
            try:
                if self.receipts.remove(attempt_id):
                    self.removed += 1
            except OSError as exc:
                # Left behind: the journal-driven scan replays it into already_terminal.
                log.warning("could not remove a consumed receipt: %s", type(exc).__name__)

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
