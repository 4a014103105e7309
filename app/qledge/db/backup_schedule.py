"""The scheduled backup's task (backup/schedule_task.py): found by its fixed name and
label, the way the dependency queues are known (db/tasks.py INTERNAL)."""

from __future__ import annotations

from ..model import Task
from .interface import Tx
from .rows import task_from_row

NAME = "backup: scheduled"
LABELS_JSON = '["backup"]'


async def scheduled_task(tx: Tx) -> Task | None:
    row = await tx.one("SELECT * FROM tasks WHERE name = ? AND labels_json = ? AND hidden = 0"
                       " ORDER BY num LIMIT 1", (NAME, LABELS_JSON))
    return task_from_row(row) if row is not None else None
