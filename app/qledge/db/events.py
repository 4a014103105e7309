"""SQL of run events: append in sequence, list, count.

Events live in their run's row (`runs.event_log`, db/_event_log.py, migration 0020);
runs from before that keep their earlier events as rows of `run_events`, numbered
up to `runs.event_base`, and read back unchanged.
"""

from __future__ import annotations

import msgspec

from ..model import Event, NewEvent, Run
from . import _event_log, dialect
from .interface import Row, Tx

# The fragment of a run UPDATE that appends encoded events (parameter: their bytes)
# and takes their numbers (`event_seq` then names the last one), per dialect (the
# blob append: dialect.append_blob). SET expressions read the row as it was, so
# event_base keeps the count from before.
APPEND_SET: dict[dialect.Dialect, str] = {
    d: f"event_base = COALESCE(event_base, event_seq),"
       f" event_log = {dialect.append_blob(d, 'event_log')}"
    for d in (dialect.SQLITE, dialect.POSTGRESQL)}
_APPEND = {d: f"UPDATE runs SET event_seq = event_seq + ?, {s} WHERE id = ?"  # noqa: S608
           for d, s in APPEND_SET.items()}


def encode(run: Run, events: list[NewEvent], now_ms: int,
           attempt_nos: dict[str, int] | None = None) -> bytes:
    """The bytes `APPEND_SET` appends for these events of `run`."""
    return _event_log.encode(events, run.created_at_ms, now_ms, attempt_nos or {})


async def append_events(tx: Tx, run: Run, events: list[NewEvent], now_ms: int,
                        attempt_nos: dict[str, int] | None = None) -> None:
    """Append in order with the run's next sequence numbers (caller holds the write tx).
    `attempt_nos`: numbers of attempts named by the events, when the caller knows them
    (an attempt is then one byte in the log instead of sixteen)."""
    if not events:
        return
    # The numbers are taken inside this transaction, from the row: signal events append
    # without a version bump, so a Run read earlier may carry a stale event_seq.
    await tx.execute(
        _APPEND[tx.dialect], (len(events), encode(run, events, now_ms, attempt_nos), run.id))


async def _attempt_ids(tx: Tx, run_id: str) -> dict[int, str]:
    rows = await tx.all("SELECT attempt_no, id FROM run_attempts WHERE run_id = ?", (run_id,))
    return {int(r["attempt_no"]): str(r["id"]) for r in rows}


async def _logged(tx: Tx, row: Row) -> list[Event]:
    """The events in the run row's log, numbered."""
    base = row["event_base"]
    if base is None or not row["event_log"]:
        return []
    return _event_log.decode(row["id"], bytes(row["event_log"]), int(row["event_seq"]) - base,
                             int(base) + 1, int(row["created_at_ms"]),
                             await _attempt_ids(tx, row["id"]))


def _base(row: Row) -> int:
    return int(row["event_seq"] if row["event_base"] is None else row["event_base"])


_RUN_LOG = "SELECT id, event_seq, event_base, event_log, created_at_ms FROM runs WHERE id = ?"


async def list_events(tx: Tx, run_id: str, after_seq: int = 0, limit: int = 500) -> list[Event]:
    run = await tx.one(_RUN_LOG, (run_id,))
    if run is None:
        return []
    out: list[Event] = []
    base = _base(run)
    if after_seq < base:
        rows = await tx.all(
            "SELECT * FROM run_events WHERE run_id = ? AND seq > ? AND seq <= ?"
            " ORDER BY seq LIMIT ?", (run_id, after_seq, base, limit))
        out = [
            Event(run_id=r["run_id"], seq=r["seq"], type=r["type"], at_ms=r["at_ms"],
                  attempt_id=r["attempt_id"],
                  data=msgspec.json.decode(r["data_json"], type=dict[str, str | int | None]))
            for r in rows
        ]
    if len(out) < limit and run["event_seq"] > max(after_seq, base):
        out += [e for e in await _logged(tx, run) if e.seq > after_seq][:limit - len(out)]
    return out


async def count_events(tx: Tx, run_id: str, event_type: str) -> int:
    run = await tx.one(_RUN_LOG, (run_id,))
    if run is None:
        return 0
    row = await tx.one("SELECT COUNT(*) AS n FROM run_events WHERE run_id = ? AND type = ?"
                       " AND seq <= ?", (run_id, event_type, _base(run)))
    legacy = int(row["n"]) if row else 0
    return legacy + sum(e.type == event_type for e in await _logged(tx, run))


async def last_event_type(tx: Tx, run_id: str) -> str | None:
    """The type of the run's latest event (None: no event, or no run)."""
    run = await tx.one(_RUN_LOG, (run_id,))
    if run is None or not run["event_seq"]:
        return None
    if run["event_seq"] > _base(run):
        return (await _logged(tx, run))[-1].type
    row = await tx.one("SELECT type FROM run_events WHERE run_id = ? AND seq = ?",
                       (run_id, run["event_seq"]))
    return str(row["type"]) if row else None
