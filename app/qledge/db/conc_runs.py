"""The child runs of a `task … conc` run (docs/tasks.md)."""

from __future__ import annotations

from ..model import NewEvent, Run, RunStatus
from . import statuses as st
from . import store
from .connection import Tx

_ACTIVE = st.active_run()


async def create_child(tx: Tx, run_id: str, parent: Run, conc_index: int,
                       now_ms: int) -> Run:
    await tx.execute(
        "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, parent_run_id,"
        " conc_index) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, parent.task_id, parent.trigger.value, RunStatus.QUEUED.value, now_ms,
         parent.id, conc_index))
    run = await store.get_run(tx, run_id)
    await store.append_events(tx, run, [NewEvent(type="run.created", data={
        "trigger": parent.trigger.value, "parent_run_id": parent.id,
        "conc_index": conc_index})], now_ms)
    return await store.get_run(tx, run_id)


async def children(tx: Tx, parent_id: str) -> list[Run]:
    """By value position (bounded: a parent has at most taskform.MAX_CONC)."""
    rows = await tx.all(
        "SELECT * FROM runs WHERE parent_run_id = ? ORDER BY conc_index", (parent_id,))
    return [store.run_from_row(r) for r in rows]


async def has_active_child(tx: Tx, parent_id: str) -> bool:
    row = await tx.one(
        f"SELECT 1 FROM runs WHERE parent_run_id = ? AND {_ACTIVE} LIMIT 1",  # noqa: S608
        (parent_id,))
    return row is not None
