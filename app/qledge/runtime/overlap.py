"""The overlap policy: what a new run of a task does while one of it is active.

One decision for every door that creates runs — a manual/API trigger
(operations.start_run), a cron or @boot tick (scheduler.fire, fire_boot) and a
chain (chains.listener) — made inside the transaction that would create the run,
and one way to create it under that decision (`create_run`, docs/tasks.md):

* `skip`: no new run while one is active (queued or running); the caller
  answers 409 or records a `schedule.skipped` event on the active run.
* `queue`: the new run waits behind the running one; at most one waits —
  a second is skipped like `skip`.
* `replace`: the active runs get a committed `policy` cancel intent in this
  same transaction (a queued one ends at once); the cancellation drivers then
  signal them through the usual fenced path, so a late receipt of a replaced run
  cannot overwrite its cancellation (transitions._intent_wins). The new run
  waits until their attempts are gone.
* `allow`: side by side, bounded by the global limit (callers keep their own
  no-pile-up rule for ticks).

The dispatcher's side of `queue`/`replace`: a run of a non-`allow` task never
gets an attempt while another run of that task has one (`may_start`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .. import ids, transitions
from ..db import attempts, claims, events, runs
from ..db.interface import Tx
from ..model import CancelReason, NewEvent, Overlap, Run, RunStatus, Task, Trigger
from . import conc


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    skip_reason: str | None = None  # "active_run" | "queued_run": no new run
    blocking: Run | None = None  # the run that made it skip
    replaced: list[str] = []  # runs given a cancel intent for the new one


async def decide(tx: Tx, task: Task, now_ms: int) -> Decision:
    """Commit what the policy needs before a new run of `task` is created (replace:
    the cancel intents) and say whether to create it. `allow` is not decided here."""
    if task.overlap is Overlap.ALLOW:
        return Decision()
    # Fleet-wide, one creator or claimer of this task at a time (PostgreSQL; a no-op
    # under SQLite's single writer): two nodes never both see "no active run".
    await claims.serialize_task(tx, task.id)
    # A `task … conc` parent stands for its children (runtime/conc.py): they are not
    # separate runs of the task here.
    active = [r for r in await runs.active_runs_of_task(tx, task.id)
              if r.parent_run_id is None]
    if not active:
        return Decision()
    if task.overlap is Overlap.SKIP:
        return Decision(skip_reason="active_run", blocking=active[0])
    if task.overlap is Overlap.QUEUE:
        waiting = [r for r in active if r.status is RunStatus.QUEUED]
        if waiting:
            return Decision(skip_reason="queued_run", blocking=waiting[0])
        return Decision()
    replaced = []
    for run in active:
        tr = transitions.request_cancel(run, CancelReason.POLICY, now_ms)
        if tr is not None:
            run = await runs.apply(tx, run, tr, now_ms)
            await conc.cancel_children(tx, run, CancelReason.POLICY, now_ms)
            run = await runs.get_run(tx, run.id)
        run = await runs.end_if_queued(tx, run, now_ms)
        replaced.append(run.id)
    return Decision(replaced=replaced)


async def record_replaced(tx: Tx, run: Run, decision: Decision, now_ms: int) -> None:
    """Both sides name each other in their events (ids only): the new run `run.replaces`,
    each replaced one `run.replaced_by`."""
    if not decision.replaced:
        return
    await events.append_events(tx, run, [
        NewEvent(type="run.replaces", data={"run_id": rid}) for rid in decision.replaced],
        now_ms)
    for rid in decision.replaced:
        old = await runs.get_run(tx, rid)
        await events.append_events(
            tx, old, [NewEvent(type="run.replaced_by", data={"run_id": run.id})], now_ms)


class Created(msgspec.Struct, frozen=True, kw_only=True):
    run: Run | None  # None: the policy skipped it (decision.blocking is why)
    decision: Decision


async def create_run(tx: Tx, task: Task, how: Trigger, now_ms: int, *,
                     decision: Decision | None = None, first: Sequence[NewEvent] = (),
                     not_before_ms: int | None = None) -> Created:
    """Create a run of `task` under its overlap policy, inside the caller's transaction.

    `decision` given: the caller decided already (a tick of an `allow` task has its own
    no-pile-up rule). The new run's `first` events precede its `run.replaces` ones, so
    each door keeps the event order it has always written.
    """
    if decision is None:
        decision = await decide(tx, task, now_ms)
    if decision.blocking is not None:
        return Created(run=None, decision=decision)
    run = await runs.create_run(tx, ids.uuid7(), task.id, how, now_ms,
                                not_before_ms=not_before_ms)
    if first:
        await events.append_events(tx, run, list(first), now_ms)
    await record_replaced(tx, run, decision, now_ms)
    return Created(run=run, decision=decision)


async def may_start(tx: Tx, task: Task, run: Run) -> bool:
    """A run of a non-`allow` task waits while another run of the task has an attempt
    (a `conc` child never: its siblings run side by side, its parent decided overlap)."""
    return (task.overlap is Overlap.ALLOW or run.parent_run_id is not None
            or not await attempts.task_has_running_attempt(tx, task.id))
