"""Runs of a script by its `task` command: the panel's debug Run and the `task` program.

Both run the task whose `command` is exactly the `task …` words, found or created
in one write transaction (operations.task_for_command, so two callers at once still
make one task): name `task <path>`, no schedule, overlap `allow`, the caller's
label (`debug` for the panel, `cli` for the program) when it is created. An ad-hoc
run without a task does not exist in qledge's model; this keeps every such run
tracked, logged and retained like any other (docs/scripts.md, docs/tasks.md).

The panel's task is *hidden* (one per script path, reused): the task lists, QingLong's
/open/crons and the panel's pickers skip it, so a debug run leaves no task behind in
the user's list; its runs are in Runs, and retention keeps the last DEBUG_KEEP_RUNS.
"""

from __future__ import annotations

import shlex

import msgspec

from ..model import Overlap, Task, Trigger
from ..runtime.lifecycle import Runtime
from ..tasks.writable import TaskFields
from . import tasks as operations

DEBUG_LABEL = "debug"
DEBUG_KEEP_RUNS = 10


def debug_command(path: str) -> str:
    """The command of the panel's Run: the script now, no delay, no arguments."""
    return shlex.join(["task", path, "now"])


async def run_command(rt: Runtime, command: str, path: str, label: str
                      ) -> tuple[Task, operations.Started]:
    """A tracked run (trigger `api`) of the task with exactly this command."""
    fields = TaskFields(name=f"task {path}"[:100], labels=[label], overlap=Overlap.ALLOW)
    if label == DEBUG_LABEL:
        fields = msgspec.structs.replace(fields, hidden=True, keep_runs=DEBUG_KEEP_RUNS)
    task = await operations.task_for_command(rt, command, fields)
    return task, await operations.start_run(rt, task.id, Trigger.API)
