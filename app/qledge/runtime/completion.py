"""CompletionService: the one door through which every result becomes a fact.

The live path (the worker sees its launcher exit) and every recovery path hand
receipts here. In one transaction it validates the receipt against the
attempt, returns `already_terminal` without a new event for a finished
attempt, lets a committed cancel intent decide, and appends the attempt and
run terminal events in order with CAS on the run version.

In a fleet (PostgreSQL) the attempt also carries the epoch of its owner's lease: a
receipt from an epoch a takeover has ended is refused (COMPLETION_STALE_EPOCH) and
recorded beside the attempt, never applied (docs/fleet.md, "Fencing").
"""

from __future__ import annotations

import enum

import msgspec

from .. import failpoints, transitions
from ..clock import now_ms
from ..db import attempts, epochs, errors, journal, rows, runs
from ..db.interface import Database, Tx
from ..launch.executor import EXECUTOR_TYPE
from ..launch.unrecorded import Identities
from ..model import ACTIVE_ATTEMPT, TERMINAL_RUN, Attempt, AttemptStatus, Reason, Run
from ..receipts.codec import Receipt, token_matches

# Kept for a later attempt: a lost compare-and-set or a transient storage error (the
# consumer's batches too).
RETRY: tuple[type[Exception], ...] = (rows.Conflict, *errors.Transient)


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    ALREADY_TERMINAL = "already_terminal"
    REJECTED = "rejected"
    RETRY = "retry"


class Rejection(enum.StrEnum):
    UNKNOWN_ATTEMPT = "COMPLETION_UNKNOWN_ATTEMPT"
    RUN_MISMATCH = "COMPLETION_RUN_MISMATCH"
    FOREIGN_OWNER = "COMPLETION_FOREIGN_OWNER"
    WRONG_EXECUTOR = "COMPLETION_WRONG_EXECUTOR"
    BAD_TOKEN = "COMPLETION_BAD_TOKEN"  # noqa: S105 - a reason code, not a secret
    BAD_SEQUENCE = "COMPLETION_BAD_SEQUENCE"
    STALE_EPOCH = "COMPLETION_STALE_EPOCH"


class Result(msgspec.Struct, frozen=True, kw_only=True):
    outcome: Outcome
    reason: str | None = None
    status: str | None = None


def _rejected(reason: Rejection) -> Result:
    return Result(outcome=Outcome.REJECTED, reason=reason.value)


class CompletionService:
    def __init__(self, db: Database, node_id: str,
                 identities: Identities | None = None) -> None:
        self.db = db
        self.node_id = node_id
        # Launcher identities still in memory (launch/unrecorded.py): a result of such
        # an attempt writes its identity first, in the same commit.
        self.identities = identities if identities is not None else Identities()

    async def complete(self, receipt: Receipt) -> Result:
        try:
            async with self.db.write() as tx:
                result = await self.complete_in(tx, receipt)
                failpoints.hit("completion.before_commit")
            return result
        except RETRY as exc:
            return Result(outcome=Outcome.RETRY, reason=type(exc).__name__)

    async def complete_in(self, tx: Tx, receipt: Receipt) -> Result:
        """The checks and the transition inside the caller's transaction (batched consumers)."""
        attempt = await attempts.find_attempt(tx, receipt.attempt_id)
        if attempt is None:
            return _rejected(Rejection.UNKNOWN_ATTEMPT)
        if attempt.run_id != receipt.run_id:
            return _rejected(Rejection.RUN_MISMATCH)
        if attempt.runtime_owner != self.node_id:
            return _rejected(Rejection.FOREIGN_OWNER)
        if attempt.executor_type != EXECUTOR_TYPE:
            return _rejected(Rejection.WRONG_EXECUTOR)
        if not token_matches(receipt.token, attempt.callback_token_hash):
            return _rejected(Rejection.BAD_TOKEN)
        if attempt.status not in ACTIVE_ATTEMPT:
            # A replay of the receipt that already decided (or one that lost the
            # race to a cancel/lost decision): no second terminal event.
            if receipt.callback_sequence > attempt.callback_sequence:
                return _rejected(Rejection.BAD_SEQUENCE)
            # Decided without a receipt (no exit code: `lost` by a takeover) under an
            # epoch that has moved: this receipt is late, kept as such. One that was
            # applied is a replay, whatever the epoch is now.
            if attempt.exit_code is None and await self._stale(tx, attempt):
                return await self._late(tx, attempt, receipt)
            return Result(outcome=Outcome.ALREADY_TERMINAL, status=attempt.status.value)
        if receipt.callback_sequence != attempt.callback_sequence:
            return _rejected(Rejection.BAD_SEQUENCE)
        if await self._stale(tx, attempt):
            # A takeover committed and its pages have not decided this attempt yet:
            # the decision is theirs (`lost`, NODE_LEASE_EXPIRED), not this receipt's.
            return await self._late(tx, attempt, receipt)
        # A run already terminal with this attempt still active is an orphan (a cancel
        # that raced the spawn in an earlier version): the receipt settles the attempt
        # alone, the run keeps its result (transitions._finish).
        run = await runs.get_run(tx, attempt.run_id)
        run, attempt = await self.identities.record_in(tx, run, attempt)
        if attempt.started_at_ms is None:
            # No identity ever recorded (a worker killed within the identity grace):
            # the receipt says when the command started.
            tr0 = transitions.started_by_receipt(run, attempt,
                                                 started_at_ms=receipt.started_at_ms)
            run = await runs.apply(tx, run, tr0, now_ms())
            assert tr0.attempt is not None
            attempt = tr0.attempt
        log_bytes = None if receipt.log_bytes is msgspec.UNSET else receipt.log_bytes
        leftovers = 0 if receipt.leftover_processes is msgspec.UNSET else receipt.leftover_processes
        tr = transitions.complete(
            run, attempt, exit_code=receipt.exit_code, finished_at_ms=receipt.finished_at_ms,
            log_bytes=log_bytes, leftover_processes=leftovers)
        new = await runs.apply(tx, run, tr, now_ms())  # `queued` again for a retry
        return Result(outcome=Outcome.APPLIED, status=_status(run, new, tr))

    @staticmethod
    async def _stale(tx: Tx, attempt: Attempt) -> bool:
        """Fleet mode only (SQLite attempts carry no epoch): the owner's lease epoch is no
        longer the attempt's, or the owner has no row. Read FOR SHARE (db/epochs.py), so
        a takeover cannot commit between this check and the commit that relies on it."""
        if attempt.node_epoch is None:
            return False
        return await epochs.current_epoch(tx, attempt.runtime_owner) != attempt.node_epoch

    async def _late(self, tx: Tx, attempt: Attempt, receipt: Receipt) -> Result:
        """Refused, and recorded in the caller's transaction, which commits it: the
        rejection is a returned result, not an exception, so no savepoint rolls back.
        The consumer then quarantines the file like any deterministic rejection."""
        run = await runs.get_run(tx, attempt.run_id)
        # Spawned within the identity grace, then decided `lost` by a takeover before this
        # worker wrote the identity: written with the late facts, in this commit. Left to
        # the grace timer (launch/executor.py `record`), a launcher stopped at the fence
        # right after a thaw could report before the timer fires, and the late receipt
        # would stand without its process.
        await self.identities.record_fenced_in(tx, attempt)
        await attempts.record_late_receipt(
            tx, run, attempt, exit_code=receipt.exit_code,
            finished_at_ms=receipt.finished_at_ms, now_ms=now_ms())
        return _rejected(Rejection.STALE_EPOCH)

    async def without_receipt(
        self, attempt_id: str, reason: Reason, status: AttemptStatus = AttemptStatus.LOST,
        *, seen: AttemptStatus | None = None, settled: bool = False,
    ) -> Result:
        """The process is gone and no receipt will come: `lost`, or the intent's result.

        `settled`: the caller saw the launcher exit and its receipt absent after the
        publish grace, so no receipt can appear any more: the journal row needs no
        file checks, only ageing (docs/storage.md)."""
        try:
            async with self.db.write() as tx:
                attempt = await attempts.get_attempt(tx, attempt_id)
                if attempt.status not in ACTIVE_ATTEMPT:
                    return Result(outcome=Outcome.ALREADY_TERMINAL, status=attempt.status.value)
                if seen is not None and attempt.status is not seen:
                    # It moved since the caller looked (e.g. preparing -> running):
                    # the caller's evidence is stale, so decide nothing.
                    return Result(outcome=Outcome.RETRY, reason="ATTEMPT_CHANGED")
                run = await runs.get_run(tx, attempt.run_id)
                # A launcher that ran without a receipt ran all the same: its identity
                # first, so a committed intent decides as for any running attempt.
                run, attempt = await self.identities.record_in(tx, run, attempt)
                # An orphan (its run already ended) is settled alone, `lost` with
                # RECOVERY_RUN_ALREADY_ENDED when it never got an identity.
                tr = transitions.without_receipt(run, attempt, reason, now_ms(), status=status)
                new = await runs.apply(tx, run, tr, now_ms())
                if settled:
                    await journal.journal_settle(tx, [attempt_id], now_ms())
                return Result(outcome=Outcome.APPLIED, status=_status(run, new, tr))
        except RETRY as exc:
            return Result(outcome=Outcome.RETRY, reason=type(exc).__name__)


def _status(old: Run, new: Run, tr: transitions.Transition) -> str:
    """What was decided: the run's new status, or an orphan attempt's own."""
    if old.status in TERMINAL_RUN and tr.attempt is not None:
        return tr.attempt.status.value
    return new.status.value
