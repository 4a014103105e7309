"""The child runs of a `task … conc` run (docs/tasks.md)."""

from __future__ import annotations

import msgspec

from ..model import NewEvent, Run, RunStatus
from . import statuses as st
from .events import append_events
from .interface import Tx
from .rows import run_from_row
from .runs import get_run, notify_queued

_ACTIVE = st.active_run()
_json = msgspec.json.Encoder()


async def create_child(tx: Tx, run_id: str, parent: Run, conc_index: int,
                       now_ms: int) -> Run:
    await tx.execute(
        "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, parent_run_id,"
        " conc_index, placement_node, placement_labels_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # a child runs where its parent may
        (run_id, parent.task_id, parent.trigger.value, RunStatus.QUEUED.value, now_ms,
         parent.id, conc_index, parent.placement_node,
         _json.encode(parent.placement_labels).decode() if parent.placement_labels
         else None))
    await notify_queued(tx)
    run = await get_run(tx, run_id)
    await append_events(tx, run, [NewEvent(type="run.created", data={
        "trigger": parent.trigger.value, "parent_run_id": parent.id,
        "conc_index": conc_index})], now_ms)
    return await get_run(tx, run_id)


async def children(tx: Tx, parent_id: str) -> list[Run]:
    """By value position (bounded: a parent has at most taskform.MAX_CONC)."""
    rows = await tx.all(
        "SELECT * FROM runs WHERE parent_run_id = ? ORDER BY conc_index", (parent_id,))
    return [run_from_row(r) for r in rows]


async def has_active_child(tx: Tx, parent_id: str) -> bool:
    row = await tx.one(
        f"SELECT 1 FROM runs WHERE parent_run_id = ? AND {_ACTIVE} LIMIT 1",  # noqa: S608
        (parent_id,))
    return row is not None
