"""Queued runs → spawned attempts, within the profile's max-concurrent-attempts.

Two doors, one admission rule (checked inside the write transaction that
prepares the attempt, so they cannot both take the last slot): the loop below
for runs that waited, and `admit_new` for a run created just now — its
creator's transaction also does spawn step 1 when a slot is free and no older
run waits, so a run that starts at once costs one durable commit, not two.

Both doors take only runs whose placement this node satisfies (`node.allows`; the
loop's page is filtered in SQL), and a fenced node takes none. On PostgreSQL the
claim adds what SQLite's single writer gave for free (db/claims.py): the task's
overlap lock, the run's row lock (SKIP LOCKED), and the node's lease at its epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from .. import failpoints
from ..clock import now_ms
from ..db import attempts, claims, errors, rows, runs, tasks
from ..db.interface import Database, Tx
from ..failpoints import STEP1_DEFERRED
from ..launch.executor import LocalExecutor, Prepared, SpawnResult
from ..model import Overlap, Reason, Run, Task
from ..node import Node, allows
from ..transitions import InvalidTransition
from . import overlap
from .loop import settle

log = logging.getLogger("qledge.dispatcher")

# Not this run's fault: the database (the round is retried), or the run moved under
# us. Anything else raised while preparing one run is that run's (dispatch_once).
_NOT_THE_RUNS: tuple[type[Exception], ...] = (
    *errors.Transient, rows.Conflict, rows.NotFound, InvalidTransition)


async def _no_hold() -> str | None:
    return None


class Dispatcher:
    """Woken by triggers and by finished attempts; sleeps otherwise (no polling)."""

    def __init__(self, db: Database, executor: LocalExecutor, node_id: str, limit: int,
                 on_spawned: Callable[[SpawnResult], None],
                 may_spawn: Callable[[], Awaitable[str | None]] = _no_hold,
                 node: Node | None = None) -> None:
        self.db = db
        # The runtime's one Node (mutated in place by runtime/fleet.py: epoch, fenced);
        # without one, a node of no name and no labels (runs without placement only).
        self.node = node if node is not None else Node(name="", labels=())
        self.executor = executor
        self.node_id = node_id
        self.limit = limit
        self.on_spawned = on_spawned
        self.may_spawn = may_spawn  # a reason to hold queued runs (e.g. disk pressure)
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._launching: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        self._wake.set()

    def _wake_at(self, at_ms: int | None) -> None:
        """Wake the loop at a queued run's not-before time (the earliest one known;
        a later or stale one only costs a round that finds nothing to start)."""
        if at_ms is None or (self._timer_at is not None and self._timer_at <= at_ms):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at_ms
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, (at_ms - now_ms()) / 1000) + 0.005, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = self._timer_at = None
        self.wake()

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name="dispatcher")
        self.wake()

    async def stop(self) -> None:
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # Step 1 committed: let them finish starting (bounded by the identity
        # commit) rather than leave `preparing` attempts for recovery to judge.
        await settle(self._launching, 10.0)

    async def _loop(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatch round failed; will retry on the next wake-up")
                await asyncio.sleep(1.0)
                self._wake.set()

    async def admit_new(self, tx: Tx, run: Run, task: Task) -> Prepared | None:
        """Spawn step 1 for a run created in the caller's write transaction, if a
        slot is free and no older run is queued (a new run never overtakes one
        that waits)."""
        if self._stopping or self._task is None or await self.may_spawn() is not None:
            return None
        if not self._may_take(run) or not await self._slot_free(tx):
            return None
        await self._serialize(tx, task)
        if not await overlap.may_start(tx, task, run):
            return None
        oldest = await runs.queued_runs(tx, 1, now_ms(), self.node)
        if not oldest or oldest[0].id != run.id:
            return None
        if not await claims.holds_lease(tx, self.node):
            return None
        try:
            async with tx.savepoint():
                return await self.executor.prepare_in(tx, run, task)
        except _NOT_THE_RUNS:
            raise
        except Exception as exc:
            # This run only: it stays queued in the creator's commit (a tick is
            # consumed, a trigger answers), and the dispatch loop refuses it.
            log.error("run %s could not be prepared with its creation (%s); the dispatch"
                      " loop decides it", run.id, type(exc).__name__)
            self.wake()
            return None

    def _may_take(self, run: Run) -> bool:
        return not self.node.fenced and allows(
            self.node, run.placement_node, run.placement_labels)

    @staticmethod
    async def _serialize(tx: Tx, task: Task) -> None:
        """The overlap decision of a non-`allow` task, one node at a time (PostgreSQL)."""
        if task.overlap is not Overlap.ALLOW:
            await claims.serialize_task(tx, task.id)

    async def _slot_free(self, tx: Tx) -> bool:
        """The admission rule of both doors, read inside the preparing transaction."""
        return await attempts.count_active_attempts(tx, self.node_id) < self.limit

    def launch_soon(self, prepared: Prepared) -> None:
        """After the commit of admit_new's transaction: steps 2-4 in the background."""
        task = asyncio.create_task(self._launch(prepared), name=f"launch:{prepared.run.id}")
        self._launching.add(task)
        task.add_done_callback(self._launching.discard)

    async def _launch(self, prepared: Prepared) -> None:
        await self._launched(prepared)

    async def _launched(self, prepared: Prepared) -> bool:
        """Steps 2-4; True when a process was spawned and is watched now."""
        try:
            result = await self.executor.launch(prepared)
        except Exception:
            log.exception("launch of attempt %s failed; recovery will judge it",
                          prepared.attempt.id)
            return False
        if result is None:
            return False
        self.on_spawned(result)  # synchronously after launch(): no unwatched gap
        return True

    async def _refuse(self, run: Run, exc: Exception) -> None:
        """A run whose spawn step 1 raised ends `failed` (SPAWN_PREPARE_FAILED) in a
        transaction of its own; the round goes on with the next run either way."""
        log.error("run %s could not be prepared (%s): it ends %s", run.id,
                  type(exc).__name__, Reason.SPAWN_PREPARE_FAILED.value)
        try:
            async with self.db.write() as tx:
                await runs.fail_if_queued(tx, run, Reason.SPAWN_PREPARE_FAILED, now_ms())
        except Exception:
            log.exception("run %s: could not record its refusal; retried next round", run.id)

    async def dispatch_once(self) -> int:
        if await self.may_spawn() is not None:
            return 0
        if self.node.fenced:
            return 0  # until runtime/fleet.py registers the node again
        async with self.db.read() as tx:
            queued = await runs.queued_runs(tx, self.limit * 2, now_ms(), self.node)
            self._wake_at(await runs.next_not_before(tx, now_ms()))
        started = 0
        fanned = self.executor.fanned_out
        for run in queued:
            if self._stopping or self.node.fenced:
                break
            try:
                go_on, prepared = await self._prepare_one(run)
            except _NOT_THE_RUNS:
                raise
            except Exception as exc:
                # One bad run (a stored value that overflows, say) must not stop the
                # round and every run queued behind it: it ends with a reason code.
                await self._refuse(run, exc)
                continue
            if not go_on:
                return started  # no free slot (a finished attempt wakes us), or fenced
            if prepared is not None and await self._launched(prepared):
                started += 1
        if len(queued) == self.limit * 2 or self.executor.fanned_out != fanned:
            self.wake()  # more may be waiting behind this page, or new child runs
        return started

    async def _prepare_one(self, run: Run) -> tuple[bool, Prepared | None]:
        """Spawn step 1 for one queued run in its own transaction: (go on with the
        round?, its prepared attempt or None). No free slot, or the lease gone: stop."""
        async with self.db.write(durable=not failpoints.armed(STEP1_DEFERRED)) as tx:
            if not await self._slot_free(tx):
                return False, None
            task = await tasks.get_task(tx, run.task_id)
            # The task's lock before the run's: a creator deciding `replace` holds
            # the first and then writes runs of the task; the other order could
            # deadlock with it. SKIP LOCKED never waits, so this order cannot.
            await self._serialize(tx, task)
            if not await claims.lock_queued(tx, run.id):
                return True, None  # another node has it (or it moved on)
            if not await overlap.may_start(tx, task, run):
                return True, None  # behind a run of its task (overlap queue/replace)
            if not await claims.holds_lease(tx, self.node):
                return False, None  # fenced or lease lapsed: nothing is spawned
            return True, await self.executor.prepare_in(tx, run)
