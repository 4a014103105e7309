"""Launcher identities held in memory until they are worth a commit (issue 24).

Spawn step 4 records the launcher's identity (pid, start time, boot id). Most cron
tasks on an edge box are short, and for them that commit is a third write of the same
B-tree pages (run, attempt) a few milliseconds before the result's commit writes them
again. So the identity waits here, in the worker's memory, for the profile's
`identity_grace_s`: a launcher that exits within it has its identity written in the
commit of its result (one commit instead of two); one still running after it gets the
commit of its own, as before. Anything that signals by the identity — a cancel, a
deadline, shutdown — records the pending ones first (`Cancellation.record_first`).

What a worker killed within the grace leaves behind is what a kill between step 1 and
step 4 always left: the attempt `preparing` under a `running` run; start-up recovery
consumes its receipt or adopts the launcher by its unique attempt id in /proc
(docs/recovery.md). No signal is ever sent by an identity that is not recorded.
"""

from __future__ import annotations

import msgspec

from .. import transitions
from ..db import nodes, runs
from ..db.interface import Tx
from ..model import TERMINAL_RUN, Attempt, AttemptStatus, Run


class Unrecorded(msgspec.Struct, frozen=True, kw_only=True):
    attempt_id: str
    pid: int
    start_time: int
    boot_id: str
    spawned_at_ms: int
    deadline_at_ms: int | None = None


class Identities:
    """The identities captured but not yet committed, by attempt id."""

    def __init__(self) -> None:
        self._pending: dict[str, Unrecorded] = {}

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, ident: Unrecorded) -> None:
        self._pending[ident.attempt_id] = ident

    def get(self, attempt_id: str) -> Unrecorded | None:
        return self._pending.get(attempt_id)

    def pending(self, attempt_ids: list[str] | None = None) -> list[Unrecorded]:
        if attempt_ids is None:
            return list(self._pending.values())
        return [self._pending[a] for a in attempt_ids if a in self._pending]

    def due(self, spawned_by_ms: int) -> list[str]:
        """The pending attempts spawned at or before `spawned_by_ms`: their grace is over."""
        return [u.attempt_id for u in self._pending.values() if u.spawned_at_ms <= spawned_by_ms]

    def expired(self, now_ms: int) -> list[str]:
        """The pending attempts whose deadline has passed (a deadline check signals them)."""
        return [u.attempt_id for u in self._pending.values()
                if u.deadline_at_ms is not None and u.deadline_at_ms <= now_ms]

    def forget_on_commit(self, tx: Tx, attempt_id: str) -> None:
        """Once the transaction that wrote the identity commits, memory need not hold it
        (kept if only the savepoint around it rolled back: then it was not written)."""
        undone = False

        def undo() -> None:
            nonlocal undone
            undone = True

        def done() -> None:
            if not undone:
                self.forget(attempt_id)

        tx.on_rollback(undo)
        tx.on_commit(done)

    def forget(self, attempt_id: str) -> None:
        self._pending.pop(attempt_id, None)

    async def record_fenced_in(self, tx: Tx, attempt: Attempt) -> bool:
        """The identity of an attempt another node's takeover decided `lost` before this
        worker wrote it (fleet mode, spawned within the grace) written in the caller's
        transaction: the launcher runs on all the same, and the fenced node, its
        operator and a late receipt must find it. True: written (memory lets go on
        commit)."""
        ident = self._pending.get(attempt.id)
        if (ident is None or attempt.status is not AttemptStatus.LOST or attempt.pid is not None
                or attempt.node_epoch is None):
            return False
        if not await nodes.record_fenced_identity(tx, attempt.id, pid=ident.pid,
                                                  start_time=ident.start_time,
                                                  boot_id=ident.boot_id):
            return False
        self.forget_on_commit(tx, attempt.id)
        return True

    async def record_in(self, tx: Tx, run: Run, attempt: Attempt) -> tuple[Run, Attempt]:
        """The attempt's identity written in the caller's transaction, if it is still
        pending and the attempt still `preparing`; else both as they are.

        Times are the spawn's: the attempt started then, not when it was written."""
        ident = self._pending.get(attempt.id)
        if ident is None or attempt.status is not AttemptStatus.PREPARING:
            return run, attempt
        started = (transitions.orphan_started if run.status in TERMINAL_RUN
                   else transitions.attempt_started)
        tr = started(run, attempt, pid=ident.pid, start_time=ident.start_time,
                     boot_id=ident.boot_id, now_ms=ident.spawned_at_ms)
        run = await runs.apply(tx, run, tr, ident.spawned_at_ms)
        assert tr.attempt is not None
        self.forget_on_commit(tx, attempt.id)
        return run, tr.attempt
