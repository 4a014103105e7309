"""Runs of a script by its `task` command: the panel's debug Run and the `task` program.

Both run the task whose `command` is exactly the `task …` words, found or created
here in one write transaction (so two callers at once still make one task): name
`task <path>`, no schedule, overlap `allow`, the caller's label (`debug` for the
panel, `cli` for the program) when it is created. An ad-hoc run without a task does
not exist in qledge's model; this keeps every such run tracked, logged and retained
like any other (docs/scripts.md, docs/tasks.md).
"""

from __future__ import annotations

import shlex

from .. import ids
from ..clock import now_ms
from ..db import tasks
from ..launch import environment
from ..model import Task, Trigger
from . import operations
from .lifecycle import Runtime

DEBUG_LABEL = "debug"


def debug_command(path: str) -> str:
    """The command of the panel's Run: the script now, no delay, no arguments."""
    return shlex.join(["task", path, "now"])


async def find_or_create(rt: Runtime, command: str, path: str, label: str) -> Task:
    async with rt.db.write() as tx:
        found = await tasks.task_by_command(tx, command)
        if found is not None:
            return found
        task = await tasks.create_task(tx, ids.uuid7(), {
            "name": f"task {path}"[:100], "command": command, "labels": [label],
            "overlap": "allow"}, now_ms())
        await environment.verify(tx, rt.settings.work_path, task)
    return task


async def run_command(rt: Runtime, command: str, path: str, label: str
                      ) -> tuple[Task, operations.Started]:
    """A tracked run (trigger `api`) of the task with exactly this command."""
    task = await find_or_create(rt, command, path, label)
    return task, await operations.start_run(rt, task.id, Trigger.API)
