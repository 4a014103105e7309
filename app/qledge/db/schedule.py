"""SQL of the scheduler's state: the scheduled tasks and each one's last consumed due time."""

from __future__ import annotations

from ..model import Task
from . import dialect
from .interface import Tx
from .rows import task_from_row


async def scheduled_tasks(tx: Tx) -> list[tuple[Task, int | None]]:
    """Every enabled task with a schedule, with the last due time already consumed."""
    rows = await tx.all(
        "SELECT t.*, s.last_due_ms AS _last_due_ms FROM tasks t"
        " LEFT JOIN task_schedule_state s ON s.task_id = t.id"
        " WHERE t.enabled = 1 AND (t.schedule IS NOT NULL OR t.extra_schedules_json != '[]')"
        " ORDER BY t.num")
    return [(task_from_row(r), r["_last_due_ms"]) for r in rows]


async def last_due(tx: Tx, task_id: str) -> int | None:
    row = await tx.one("SELECT last_due_ms FROM task_schedule_state WHERE task_id = ?",
                       (task_id,))
    return int(row["last_due_ms"]) if row else None


async def lock_cursor(tx: Tx, task_id: str) -> int | None:
    """`last_due`, re-read inside a tick's write transaction so that it holds.

    SQLite: its single writer already serializes every tick of the appliance: a plain
    read. On PostgreSQL (READ COMMITTED) two nodes could both read the old cursor and
    both fire, so the row is locked FOR UPDATE — inserted first if missing, or a
    second node would find no row to wait on. The placeholder cursor 0 means what no
    row means (`_since` takes the task's last change, always later). A second node
    waits for the first one's commit, then reads the cursor it moved."""
    if tx.dialect != dialect.POSTGRESQL:
        return await last_due(tx, task_id)
    await tx.execute("INSERT INTO task_schedule_state (task_id, last_due_ms, updated_at_ms)"
                     " VALUES (?, 0, 0) ON CONFLICT (task_id) DO NOTHING", (task_id,))
    row = await tx.one("SELECT last_due_ms FROM task_schedule_state WHERE task_id = ?"
                       " FOR UPDATE", (task_id,))
    return int(row["last_due_ms"]) if row else None


async def record_due(tx: Tx, task_id: str, due_ms: int, now_ms: int) -> None:
    await tx.execute(
        "INSERT INTO task_schedule_state (task_id, last_due_ms, updated_at_ms) VALUES (?, ?, ?)"
        " ON CONFLICT (task_id) DO UPDATE SET last_due_ms = excluded.last_due_ms,"
        " updated_at_ms = excluded.updated_at_ms", (task_id, due_ms, now_ms))
