"""Operations on tasks and their runs: create, update, enable/disable, delete,
trigger, cancel, stop (the package's docstring says what an operation is)."""

from __future__ import annotations

import contextlib

import msgspec

from .. import failpoints, ids
from ..clock import now_ms
from ..db import dependencies as deps
from ..db import rows, runs, tasks
from ..db import subscriptions as subs
from ..db.interface import Tx
from ..failpoints import STEP1_DEFERRED
from ..launch import environment
from ..limits import SWEEP_BATCH
from ..model import CancelReason, Run, RunStatus, Task, Trigger
from ..runtime import chains, overlap
from ..runtime.cancellation import RunTerminal
from ..runtime.lifecycle import Runtime
from ..tasks.writable import TaskFields, changed_from, given


class ActiveRun(Exception):
    """Refused: the task has an active (queued or running) run; `reason` says which
    rule refused (`active_run`, or `queued_run` for overlap `queue`)."""

    def __init__(self, message: str, *, task: Task, run_id: str,
                 reason: str = "active_run") -> None:
        super().__init__(message)
        self.task = task
        self.run_id = run_id
        self.reason = reason


class SystemTask(Exception):
    """Refused: this task is the system's (a subscription's pull, a dependency queue),
    and its command and env are not editable — its launch gets a credential, which an
    edited command would print (docs/subscriptions.md, docs/dependencies.md)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


# -- tasks ---------------------------------------------------------------------------

async def _refuse_system_edit(tx: Tx, task_id: str, fields: TaskFields) -> None:
    current = await tasks.get_task(tx, task_id)
    changed = [k for k in ("command", "env") if k in given(changed_from(current, fields))]
    if not changed:
        return
    sub = await subs.by_pull_task(tx, task_id)
    owner = f"subscription {sub.name!r}'s pull" if sub is not None else None
    if owner is None and (eco := await deps.is_queue_task(tx, task_id)) is not None:
        owner = f"the {eco} dependency queue"
    if owner is not None:
        raise SystemTask(f"this task is {owner}: its {changed[0]} cannot be changed (edit "
                         "the subscription or the dependencies instead)", field=changed[0])


async def create_task(rt: Runtime, fields: TaskFields) -> Task:
    """A new task (fields validated by the caller); its environment must fit execve."""
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), fields, now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
        await chains.check(tx, task)
    rt.scheduler.wake()
    return task


async def task_for_command(rt: Runtime, command: str, fields: TaskFields) -> Task:
    """The oldest task whose command is exactly `command`, else a new one made of
    `fields` — in one transaction, so two callers at once make one task."""
    async with rt.db.write() as tx:
        found = await tasks.task_by_command(tx, command, fields.hidden is True)
        if found is not None:
            return found
        task = await tasks.create_task(
            tx, ids.uuid7(), msgspec.structs.replace(fields, command=command), now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
        await chains.check(tx, task)
    rt.scheduler.wake()
    return task


async def update_task(rt: Runtime, task_id: str, fields: TaskFields) -> Task:
    async with rt.db.write() as tx:
        await _refuse_system_edit(tx, task_id, fields)
        task = await tasks.update_task(tx, task_id, fields, now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
        await chains.check(tx, task)
    rt.scheduler.wake()
    return task


async def set_tasks_enabled(rt: Runtime, task_ids: list[str], enabled: bool) -> None:
    """Enable or disable these tasks in one transaction; unchanged ones keep their version."""
    async with rt.db.write() as tx:
        for task_id in task_ids:
            current = await tasks.get_task(tx, task_id)
            if current.enabled != enabled:
                await tasks.update_task(tx, task_id, TaskFields(enabled=enabled), now_ms())
    rt.scheduler.wake()


async def delete_tasks(rt: Runtime, task_ids: list[str]) -> None:
    """Delete these tasks with their runs, all or none: ActiveRun when one has an active
    run. Their log files are queued for deletion in the same transaction and unlinked
    after the commit; the scheduler forgets their schedules at once."""
    now = now_ms()
    paths: list[str] = []
    async with rt.db.write() as tx:
        for task_id in task_ids:
            active = await runs.active_run_of_task(tx, task_id)
            if active is not None:
                task = await tasks.get_task(tx, task_id)
                raise ActiveRun("task has an active run; cancel it first", task=task,
                                run_id=active.id)
            paths += await tasks.delete_task(tx, task_id, now)
    await rt.remove_logs(paths)
    rt.scheduler.wake()


# -- runs ------------------------------------------------------------------------------

async def trigger(rt: Runtime, task_id: str, how: Trigger) -> Run:
    """Queue a run as the task's overlap policy allows (see start_run)."""
    return (await start_run(rt, task_id, how)).run


class Started(msgspec.Struct, frozen=True, kw_only=True):
    run: Run
    outcome: str  # "started": spawn step 1 is in its commit; "queued": it waits
    replaced: list[str] = []  # runs cancelled for it (overlap `replace`)


async def start_run(rt: Runtime, task_id: str, how: Trigger) -> Started:
    """Create a run under the task's overlap policy (runtime/overlap.py): ActiveRun
    when the policy skips it; `replace` commits the cancel intents of the active runs
    in the same transaction and has their drivers signal them after it.

    The same durable commit also does spawn step 1 when a slot is free (see
    dispatcher.admit_new): the run then reads `running`, the launch follows.
    """
    now = now_ms()
    async with rt.db.write(durable=not failpoints.armed(STEP1_DEFERRED)) as tx:
        task = await tasks.get_task(tx, task_id)
        created = await overlap.create_run(tx, task, how, now)
        decision, run = created.decision, created.run
        if run is None:
            assert decision.blocking is not None  # the policy's reason for skipping
            waiting = decision.skip_reason == "queued_run"
            raise ActiveRun(
                "task already has a run waiting (overlap: queue)" if waiting
                else f"task already has an active run (overlap: {task.overlap.value})",
                task=task, run_id=decision.blocking.id, reason=decision.skip_reason or "")
        prepared = await rt.dispatcher.admit_new(tx, run, task)
    if decision.replaced:
        await rt.cancellation.sweep(SWEEP_BATCH)
    if prepared is not None:
        rt.dispatcher.launch_soon(prepared)
    else:
        rt.kick()
    return Started(run=prepared.run if prepared is not None else run,
                   outcome="started" if prepared is not None else "queued",
                   replaced=decision.replaced)


async def cancel_run(rt: Runtime, run_id: str, reason: CancelReason = CancelReason.USER
                     ) -> RunStatus:
    """Commit the cancel intent (docs/contract.md §7); RunTerminal if the run ended."""
    return await rt.cancellation.request(run_id, reason)


async def stop_task(rt: Runtime, task_id: str) -> None:
    """Cancel every active run of the task; one that ends meanwhile is fine."""
    async with rt.db.read() as tx:
        active = await runs.active_runs_of_task(tx, task_id)
    for run in active:
        with contextlib.suppress(RunTerminal, rows.Conflict):
            await cancel_run(rt, run.id)
