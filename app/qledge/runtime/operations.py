"""Operations on tasks, runs and envs: the one home both APIs, the benches and the
drills call (docs/architecture.md).

Each operation opens its transaction, makes the checks that belong to the change
(an active run, the kernel's environment limits), and does the follow-ups after
the commit (waking the scheduler or the dispatcher, unlinking deleted logs). The
HTTP layer decodes a request and validates its fields (`http/inputs.py`), calls
one of these, and encodes the answer; nothing here knows about HTTP. Errors are
named exceptions, mapped to responses in `http/errors.py`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .. import ids
from ..clock import now_ms
from ..db import envs, rows, runs, tasks
from ..launch import environment
from ..model import CancelReason, Concurrency, Run, RunStatus, Task, Trigger
from .cancellation import RunTerminal
from .lifecycle import Runtime


class ActiveRun(Exception):
    """Refused: the task has an active (queued or running) run."""

    def __init__(self, message: str, *, task: Task, run_id: str) -> None:
        super().__init__(message)
        self.task = task
        self.run_id = run_id


# -- tasks ---------------------------------------------------------------------------

async def create_task(rt: Runtime, fields: dict[str, Any]) -> Task:
    """A new task (fields validated by the caller); its environment must fit execve."""
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), fields, now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
    rt.scheduler.wake()
    return task


async def update_task(rt: Runtime, task_id: str, fields: dict[str, Any]) -> Task:
    async with rt.db.write() as tx:
        task = await tasks.update_task(tx, task_id, fields, now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
    rt.scheduler.wake()
    return task


async def set_tasks_enabled(rt: Runtime, task_ids: list[str], enabled: bool) -> None:
    """Enable or disable these tasks in one transaction; unchanged ones keep their version."""
    async with rt.db.write() as tx:
        for task_id in task_ids:
            current = await tasks.get_task(tx, task_id)
            if current.enabled != enabled:
                await tasks.update_task(tx, task_id, {"enabled": enabled}, now_ms())
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
    """Queue a run; ActiveRun for a `forbid` task with an active run.

    The same durable commit also does spawn step 1 when a slot is free (see
    dispatcher.admit_new): the answer still says `queued`, the launch follows.
    """
    async with rt.db.write() as tx:
        task = await tasks.get_task(tx, task_id)
        if task.concurrency is Concurrency.FORBID:
            active = await runs.active_run_of_task(tx, task.id)
            if active is not None:
                raise ActiveRun("task already has an active run (concurrency: forbid)",
                                task=task, run_id=active.id)
        run = await runs.create_run(tx, ids.uuid7(), task.id, how, now_ms())
        prepared = await rt.dispatcher.admit_new(tx, run, task)
    if prepared is not None:
        rt.dispatcher.launch_soon(prepared)
    else:
        rt.kick()
    return run


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


# -- envs ------------------------------------------------------------------------------

async def create_envs(rt: Runtime, items: list[dict[str, Any]]) -> list[envs.EnvVar]:
    """New envs in one transaction; every task's environment must still fit execve."""
    async with rt.db.write() as tx:
        created = [await envs.create_env(tx, ids.uuid7(), fields, now_ms())
                   for fields in items]
        await environment.verify(tx, rt.settings.work_path)
    return created


async def update_env(rt: Runtime, env_id: str, fields: dict[str, Any]) -> envs.EnvVar:
    async with rt.db.write() as tx:
        env = await envs.update_env(tx, env_id, fields, now_ms())
        await environment.verify(tx, rt.settings.work_path)
    return env


async def set_envs_enabled(rt: Runtime, env_ids: list[str], enabled: bool) -> None:
    """All or nothing: NotFound when one of them is gone."""
    async with rt.db.write() as tx:
        await envs.require_envs(tx, env_ids)
        await envs.set_envs_enabled(tx, env_ids, enabled, now_ms())
        if enabled:
            await environment.verify(tx, rt.settings.work_path)


async def rename_envs(rt: Runtime, env_ids: list[str], name: str) -> None:
    """Give every listed env one name (QingLong's PUT /envs/name)."""
    async with rt.db.write() as tx:
        await envs.require_envs(tx, env_ids)
        await envs.rename_envs(tx, env_ids, name, now_ms())
        await environment.verify(tx, rt.settings.work_path)


async def delete_envs(rt: Runtime, env_ids: list[str], *, missing_ok: bool = False) -> None:
    """Delete these envs; NotFound for an unknown one unless `missing_ok`."""
    async with rt.db.write() as tx:
        if not missing_ok:
            await envs.require_envs(tx, env_ids)
        await envs.delete_envs(tx, env_ids)
