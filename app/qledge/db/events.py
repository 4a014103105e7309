"""SQL of run events: append in sequence, list, count."""

from __future__ import annotations

import msgspec

from ..model import Event, NewEvent, Run
from .connection import Tx

_json = msgspec.json.Encoder()


async def append_events(tx: Tx, run: Run, events: list[NewEvent], now_ms: int) -> None:
    """Append in order with the run's next sequence numbers (caller holds the write tx)."""
    if not events:
        return
    # Take the sequence inside this transaction: signal events append without a
    # version bump, so a Run read earlier may carry a stale event_seq.
    row = await tx.one("UPDATE runs SET event_seq = event_seq + ? WHERE id = ?"
                       " RETURNING event_seq", (len(events), run.id))
    last = int(row["event_seq"]) if row else run.event_seq + len(events)
    await insert_events(tx, run.id, last, events, now_ms)


async def insert_events(tx: Tx, run_id: str, last_seq: int, events: list[NewEvent],
                        now_ms: int) -> None:
    """One INSERT for the events numbered up to last_seq (one statement, one hand-off
    to the database thread, however many events). The caller has taken the numbers."""
    first = last_seq - len(events) + 1
    params: list[object] = []
    for i, ev in enumerate(events):
        params += [run_id, first + i, ev.type, now_ms, ev.attempt_id,
                   _json.encode(ev.data).decode()]
    rows = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(events))
    await tx.execute(
        "INSERT INTO run_events (run_id, seq, type, at_ms, attempt_id, data_json)"  # noqa: S608
        f" VALUES {rows}", params)


async def list_events(tx: Tx, run_id: str, after_seq: int = 0, limit: int = 500) -> list[Event]:
    rows = await tx.all(
        "SELECT * FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, after_seq, limit))
    return [
        Event(run_id=r["run_id"], seq=r["seq"], type=r["type"], at_ms=r["at_ms"],
              attempt_id=r["attempt_id"],
              data=msgspec.json.decode(r["data_json"], type=dict[str, str | int | None]))
        for r in rows
    ]


async def count_events(tx: Tx, run_id: str, event_type: str) -> int:
    row = await tx.one("SELECT COUNT(*) AS n FROM run_events WHERE run_id = ? AND type = ?",
                       (run_id, event_type))
    return int(row["n"]) if row else 0
