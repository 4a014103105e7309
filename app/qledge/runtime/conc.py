"""`task … conc`: a parent run, one child run per selected value (docs/tasks.md).

The parent starts no process. In the transaction that would have prepared its
attempt it turns `running` and creates its children (`fan_out`, called by
launch/executor.py's spawn step 1, which knows the run's environment) — queued
runs of the same task, each dispatched, launched, receipted, recovered and timed
out like any other run. When a child turns terminal, the terminal listener (the
`Database.on_terminal` seam) checks its siblings in that same transaction and,
once none is active, finishes the parent: its result commits together with the
last child's, or not at all, so a worker killed at any point leaves either a
running parent with children to recover or a finished one — never a parent
whose result was invented or a child nobody tracks.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import ids, taskform, transitions
from ..db import conc_runs, runs
from ..db.interface import Tx
from ..model import TERMINAL_RUN, CancelReason, Run


async def fan_out(tx: Tx, parent: Run, form: taskform.TaskForm, env: Mapping[str, str],
                  now_ms: int) -> None:
    """In spawn step 1's transaction, instead of an attempt: the parent turns `running`
    with one queued child per value the form selects from `env` (TaskFormError: the
    selection is refused, nothing written; the caller fails it like any refused form)."""
    picks = taskform.conc_indexes(env.get(form.env_name or ""), form.selection)
    parent = await runs.apply(tx, parent, transitions.fan_out(parent, len(picks), now_ms),
                              now_ms)
    for index in picks:
        await conc_runs.create_child(tx, ids.uuid7(), parent, index, now_ms)


async def on_terminal(tx: Tx, old: Run, new: Run, now_ms: int) -> None:
    """Terminal listener: the last child to end finishes its parent, in its commit."""
    if new.parent_run_id is None:
        return
    if await conc_runs.has_active_child(tx, new.parent_run_id):
        return
    parent = await runs.get_run(tx, new.parent_run_id)
    if parent.status in TERMINAL_RUN:
        return
    children = await conc_runs.children(tx, parent.id)
    await runs.apply(tx, parent, transitions.children_done(parent, children, now_ms), now_ms)


async def cancel_children(tx: Tx, parent: Run, reason: CancelReason, now_ms: int) -> None:
    """A parent's cancel intent reaches every active child in the same transaction:
    queued ones end at once, running ones are signalled by the cancellation sweep."""
    for child in await conc_runs.children(tx, parent.id):
        if child.status in TERMINAL_RUN:
            continue
        tr = transitions.request_cancel(child, reason, now_ms)
        if tr is not None:
            child = await runs.apply(tx, child, tr, now_ms)
        await runs.end_if_queued(tx, child, now_ms)
