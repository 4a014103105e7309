"""Run B after A: chains between tasks (docs/tasks.md).

A task lists task ids in `on_success`, `on_failure` and `on_finish`. When a run
of it ends, `on_terminal` — a terminal listener, so inside the very transaction
that makes the upstream run terminal — creates one run (trigger `chain`) of
each listed task. A worker killed at any instant leaves either both (the
upstream result and its downstream runs) or neither, and the replayed result
creates them once: never lost, never doubled.

* `on_success`: the run `succeeded`; `on_failure`: `failed`, `timed_out`, `lost`
  or `blocked`; `on_finish`: any end, `cancelled` included (a cancelled run
  triggers only `on_finish`). A run that retries ends only after its last attempt.
* Each downstream task's overlap policy applies as for any run; a disabled or
  deleted task, or one whose policy skips, gets a `chain.skipped` event on the
  upstream run instead. Both runs' events name each other (`chain.triggered`
  on the upstream, `chain.triggered_by` on the downstream; ids and status only).
* Cycles across all three lists are refused when a task is saved (`check`).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import failpoints
from ..db import events, policies, tasks
from ..db.interface import TerminalListener, Tx
from ..model import CHAIN_FIELDS, FAILED_RUN, NewEvent, Run, RunStatus, Task, Trigger
from . import overlap

MAX_TARGETS = 20  # per list


class ChainRefused(Exception):
    """A chain list names an unknown task, or would close a cycle (HTTP 422)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def targets(task: Task, status: RunStatus) -> list[str]:
    """The downstream task ids for a run of `task` that ended `status`, in list order."""
    picked = list(task.on_finish)
    if status is RunStatus.SUCCEEDED:
        picked = task.on_success + picked
    elif status in FAILED_RUN:
        picked = task.on_failure + picked
    return list(dict.fromkeys(picked))


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False


async def check(tx: Tx, task: Task) -> None:
    """Inside the saving transaction: every listed task exists and no cycle forms."""
    edges = await policies.chain_edges(tx)
    edges[task.id] = {t for f in CHAIN_FIELDS for t in getattr(task, f)}
    for field in CHAIN_FIELDS:
        listed: list[str] = getattr(task, field)
        if len(listed) > MAX_TARGETS:
            raise ChainRefused(f"{field} lists {len(listed)} tasks; at most {MAX_TARGETS}",
                               field=field)
        known = await tasks.tasks_by_ids(tx, listed)
        for tid in listed:
            if tid not in known and tid != task.id:
                raise ChainRefused(f"{field}: no task {tid[:64]!r}", field=field)
            if _reaches(edges, tid, task.id):
                raise ChainRefused(f"{field}: running task {tid[:64]!r} after this one would"
                                   " form a cycle back to it", field=field)


def listener(wake: Callable[[], None], sweep: Callable[[], None]) -> TerminalListener:
    """The terminal listener for Database.on_terminal; `wake`/`sweep` run after commit."""

    def woken() -> None:
        failpoints.hit("chain.after_commit")  # drills: killed before the downstream starts
        wake()

    async def on_terminal(tx: Tx, old: Run, new: Run, now_ms: int) -> None:
        if new.parent_run_id is not None:
            return  # a `task … conc` child: its parent's end chains, once
        upstream = await tasks.tasks_by_ids(tx, [new.task_id])
        task = upstream.get(new.task_id)
        if task is None:
            return
        chosen = targets(task, new.status)
        if not chosen:
            return
        found = await tasks.tasks_by_ids(tx, chosen)
        replaced = False
        up_events: list[NewEvent] = []
        for tid in chosen:
            down = found.get(tid)
            skip = ("missing" if down is None else "disabled" if not down.enabled else None)
            run = None
            if down is not None and skip is None:
                made = await overlap.create_run(tx, down, Trigger.CHAIN, now_ms, first=[
                    NewEvent(type="chain.triggered_by", data={
                        "run_id": new.id, "task_id": task.id,
                        "status": new.status.value})])
                decision, run, skip = made.decision, made.run, made.decision.skip_reason
            if run is None or down is None:
                up_events.append(NewEvent(type="chain.skipped",
                                          data={"task_id": tid, "reason": skip}))
                continue
            replaced = replaced or bool(decision.replaced)
            up_events.append(NewEvent(type="chain.triggered",
                                      data={"run_id": run.id, "task_id": down.id}))
        await events.append_events(tx, new, up_events, now_ms)
        tx.on_commit(woken)
        if replaced:
            tx.on_commit(sweep)

    return on_terminal
