"""SQL behind the scrape-time gauges of GET /metrics (runtime/metrics.py)."""

from __future__ import annotations

from .connection import Tx


async def active_runs(tx: Tx) -> tuple[int, int]:
    """(queued, running), from the partial index of active runs."""
    row = await tx.one(
        "SELECT COALESCE(SUM(status = 'queued'), 0), COALESCE(SUM(status = 'running'), 0)"
        " FROM runs WHERE status = 'queued' OR status = 'running'")
    return (int(row[0]), int(row[1])) if row else (0, 0)
