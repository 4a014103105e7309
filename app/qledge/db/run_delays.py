"""The not-before time of queued runs (QingLong's random delay, docs/tasks.md)."""

from __future__ import annotations

from ..model import RunStatus
from . import statuses as st
from .connection import Tx

_QUEUED = st.is_("status", RunStatus.QUEUED)


async def set_not_before(tx: Tx, run_id: str, at_ms: int) -> None:
    """In the transaction that created the queued run (no version bump: nobody
    has seen the run yet)."""
    await tx.execute("UPDATE runs SET not_before_ms = ? WHERE id = ?", (at_ms, run_id))


async def next_not_before(tx: Tx, after_ms: int) -> int | None:
    """The earliest not-before time of a queued run still in the future."""
    row = await tx.one(
        f"SELECT MIN(not_before_ms) AS t FROM runs WHERE {_QUEUED}"  # noqa: S608
        " AND not_before_ms > ?", (after_ms,))
    return int(row["t"]) if row and row["t"] is not None else None
