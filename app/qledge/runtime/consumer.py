"""Receipt consumer: receipt file → CompletionService → delete, quarantine or keep.

Order is the whole point: the receipt is deleted only after the transaction
that consumed it is on disk. That commit is deferred (no fsync of its own);
the reaper deletes the receipt after the next fsync of the WAL (reaper.py). A
crash or power cut before that replays the receipt once; after it, a replay
returns `already_terminal` and cleans up. Deterministic rejections of a DB-known
attempt are recorded in the journal first, then the file is moved to
quarantine. Transient errors leave the file for the next pass. Receipt
contents are never logged.
"""

from __future__ import annotations

import asyncio
import enum
import logging

import msgspec

from .. import failpoints
from ..clock import now_ms
from ..db import attempts, errors, journal, rows
from ..db.interface import Database, Tx
from ..receipts.codec import Receipt, Rejected, decode
from ..receipts.store import ReceiptStore
from .completion import RETRY, CompletionService, Outcome, Result
from .reaper import Reaper

log = logging.getLogger("qledge.consumer")
ATTEMPT_MISMATCH = "RECEIPT_ATTEMPT_MISMATCH"


class Consumed(enum.StrEnum):
    APPLIED = "applied"
    ALREADY_TERMINAL = "already_terminal"
    QUARANTINED = "quarantined"
    MISSING = "missing"
    RETRY = "retry"


class Report(msgspec.Struct, kw_only=True):
    counts: dict[str, int] = {}

    def add(self, what: Consumed) -> None:
        self.counts[what.value] = self.counts.get(what.value, 0) + 1


class Consumer:
    def __init__(self, db: Database, receipts: ReceiptStore, completion: CompletionService,
                 reaper: Reaper) -> None:
        self.db = db
        self.receipts = receipts
        self.completion = completion
        self.reaper = reaper
        # Since start-up, for GET /metrics: receipts consumed into a result, and quarantined.
        self.consumed = 0
        self.quarantined = 0

    async def consume(self, attempt_id: str) -> Consumed:
        return (await self.consume_many([attempt_id]))[attempt_id]

    async def consume_many(self, attempt_ids: list[str]) -> dict[str, Consumed]:
        """Consume a batch in ONE deferred transaction, each receipt in its own savepoint."""
        out: dict[str, Consumed] = {}
        valid: list[Receipt] = []
        for attempt_id, data in zip(attempt_ids, await asyncio.to_thread(
                self._read_all, attempt_ids), strict=True):
            if isinstance(data, OSError):
                out[attempt_id] = Consumed.RETRY
                continue
            if data is None:
                out[attempt_id] = Consumed.MISSING
                continue
            decoded = data if isinstance(data, Rejected) else decode(data)
            if isinstance(decoded, Rejected):
                out[attempt_id] = await self.quarantine(attempt_id, decoded.reason.value)
            elif decoded.attempt_id != attempt_id:
                out[attempt_id] = await self.quarantine(attempt_id, ATTEMPT_MISMATCH)
            else:
                valid.append(decoded)
        if not valid:
            return out
        results: dict[str, Result] = {}
        # Before the transaction: every row it settles has settled_at_ms >= this,
        # so the supervisor never ages out a row whose file the reaper still holds.
        since = now_ms()

        async def batch(tx: Tx) -> None:
            for receipt in valid:
                try:
                    async with tx.savepoint():
                        results[receipt.attempt_id] = await self.completion.complete_in(
                            tx, receipt)
                except rows.Conflict:
                    results[receipt.attempt_id] = Result(outcome=Outcome.RETRY)
            # Consumed: the file is the reaper's to delete, the row needs no more
            # file work (docs/storage.md) — bookkeeping in the same commit.
            await journal.journal_settle(tx, _consumed(results), now_ms())
            failpoints.hit("consumer.before_commit")

        try:
            async with self.db.write(durable=False) as tx:
                # The whole batch on the database thread: one hand-off, not one per
                # statement of every receipt (docs/performance.md, backlog).
                await tx.inline(batch)
        except RETRY as exc:
            log.warning("completion batch of %d kept for retry: %s", len(valid),
                        type(exc).__name__)
            return {**out, **{r.attempt_id: Consumed.RETRY for r in valid}}
        failpoints.hit("consumer.after_commit")
        # Tagged with the latest commit, not only ours: an already_terminal result may
        # rest on an earlier deferred commit; any fsync after this one covers both.
        self.reaper.remove_after(self.db.commit_seq, _consumed(results), since)
        for attempt_id, result in results.items():
            if result.outcome is Outcome.APPLIED:
                self.consumed += 1
                out[attempt_id] = Consumed.APPLIED
            elif result.outcome is Outcome.ALREADY_TERMINAL:
                out[attempt_id] = Consumed.ALREADY_TERMINAL
            elif result.outcome is Outcome.REJECTED:
                out[attempt_id] = await self.quarantine(attempt_id, result.reason or "REJECTED")
            else:
                out[attempt_id] = Consumed.RETRY
        return out

    def _read_all(self, attempt_ids: list[str]) -> list[bytes | Rejected | OSError | None]:
        """The receipts of a batch, read in a thread (file I/O stays off the loop)."""
        out: list[bytes | Rejected | OSError | None] = []
        for attempt_id in attempt_ids:
            try:
                out.append(self.receipts.read(attempt_id))
            except OSError as exc:
                out.append(exc)
        return out

    async def quarantine(self, attempt_id: str, reason: str) -> Consumed:
        """Record the deterministic rejection first, then move the file (never read it again)."""
        try:
            async with self.db.write() as tx:
                known = await attempts.find_attempt(tx, attempt_id) is not None
                if known:
                    await journal.journal_quarantine(tx, attempt_id, reason, now_ms())
        except errors.Transient:
            return Consumed.RETRY
        if not known:
            # Not ours to move: the orphan audit (`qledge audit receipts`) handles it.
            return Consumed.RETRY
        try:
            ref, moved = await asyncio.to_thread(self.receipts.quarantine_once, attempt_id,
                                                 reason)
        except (OSError, ValueError) as exc:
            log.warning("quarantine move pending for attempt %s: %s", attempt_id,
                        type(exc).__name__)
            return Consumed.RETRY
        if moved:
            # Once per receipt: a second consumer of it (the exit watcher's fast path
            # and a supervision round read it at once) finds it moved already.
            self.quarantined += 1
            log.warning("receipt of attempt %s quarantined (%s) at %s", attempt_id, reason,
                        ref)
        return Consumed.QUARANTINED


def _consumed(results: dict[str, Result]) -> list[str]:
    return [a for a, r in results.items()
            if r.outcome in (Outcome.APPLIED, Outcome.ALREADY_TERMINAL)]
