"""SQL behind the scrape-time gauges of GET /metrics (runtime/metrics.py)."""

from __future__ import annotations

from ..model import RunStatus
from . import statuses as st
from .interface import Tx

_QUEUED = st.is_("status", RunStatus.QUEUED)
_RUNNING = st.is_("status", RunStatus.RUNNING)


async def active_runs(tx: Tx) -> tuple[int, int]:
    """(queued, running), from the partial index of active runs."""
    row = await tx.one(
        f"SELECT COALESCE(SUM(CASE WHEN {_QUEUED} THEN 1 ELSE 0 END), 0),"  # noqa: S608
        f" COALESCE(SUM(CASE WHEN {_RUNNING} THEN 1 ELSE 0 END), 0)"
        f" FROM runs WHERE {st.active_run()}")
    return (int(row[0]), int(row[1])) if row else (0, 0)
