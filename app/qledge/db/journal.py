"""SQL of the receipt journal: one row per attempt's receipt, from spawn until its
fate is settled and the row ages out (docs/storage.md)."""

from __future__ import annotations

import msgspec

from ..model import AttemptStatus
from . import statuses as st
from .connection import Tx

_A_ACTIVE = st.active_attempt("a.status")


class JournalRow(msgspec.Struct, frozen=True, kw_only=True):
    attempt_id: str
    state: str
    relative_path: str
    reason_code: str | None
    retention_since_ms: int | None
    attempt_status: AttemptStatus


async def journal_register(tx: Tx, attempt_id: str, receipt_path: str, now_ms: int) -> bool:
    """Idempotent: True when a row was created."""
    return await tx.execute(
        "INSERT OR IGNORE INTO receipt_journal (attempt_id, state, relative_path, created_at_ms,"
        " updated_at_ms) VALUES (?, 'pending', ?, ?, ?)",
        (attempt_id, receipt_path, now_ms, now_ms)) == 1


async def journal_quarantine(tx: Tx, attempt_id: str, reason: str, now_ms: int) -> None:
    await tx.execute(
        "UPDATE receipt_journal SET state = 'quarantined', reason_code = ?, updated_at_ms = ?,"
        " retention_since_ms = ?, settled_at_ms = NULL WHERE attempt_id = ?"
        " AND state = 'pending'", (reason, now_ms, now_ms, attempt_id))


async def journal_page(tx: Tx, after_id: str, limit: int) -> list[JournalRow]:
    """Rows that may still need file work: not settled (settled rows age out by
    `journal_age_out` alone, docs/storage.md)."""
    rows = await tx.all(
        "SELECT j.*, a.status AS attempt_status FROM receipt_journal j"
        " JOIN run_attempts a ON a.id = j.attempt_id WHERE j.attempt_id > ?"
        " AND j.settled_at_ms IS NULL ORDER BY j.attempt_id LIMIT ?", (after_id, limit))
    return [
        JournalRow(attempt_id=r["attempt_id"], state=r["state"],
                   relative_path=r["relative_path"], reason_code=r["reason_code"],
                   retention_since_ms=r["retention_since_ms"],
                   attempt_status=AttemptStatus(r["attempt_status"]))
        for r in rows
    ]


async def journal_mark_terminal(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Start the row's retention clock (the column holds 'terminal/quarantined since')."""
    await tx.execute(
        "UPDATE receipt_journal SET retention_since_ms = ? WHERE attempt_id = ?"
        " AND retention_since_ms IS NULL", (now_ms, attempt_id))


async def journal_reset_pending(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Quarantine purged while the attempt still runs: index its receipt again."""
    await tx.execute(
        "UPDATE receipt_journal SET state = 'pending', retention_since_ms = NULL,"
        " updated_at_ms = ? WHERE attempt_id = ?", (now_ms, attempt_id))


async def journal_delete(tx: Tx, attempt_id: str) -> None:
    await tx.execute("DELETE FROM receipt_journal WHERE attempt_id = ?", (attempt_id,))


async def journal_settle(tx: Tx, attempt_ids: list[str], now_ms: int) -> None:
    """These receipts' fate is settled with no file work left (consumed into their
    attempt's terminal state, or known never to come): the rows only age out now."""
    if attempt_ids:
        marks = ",".join("?" * len(attempt_ids))
        await tx.execute(
            f"UPDATE receipt_journal SET settled_at_ms = ? WHERE attempt_id IN ({marks})"  # noqa: S608
            " AND state = 'pending' AND settled_at_ms IS NULL", [now_ms, *attempt_ids])


async def journal_unsettle(tx: Tx, attempt_ids: list[str]) -> None:
    """A consumed receipt could not be deleted: back to the paged file checks."""
    if attempt_ids:
        marks = ",".join("?" * len(attempt_ids))
        await tx.execute(
            f"UPDATE receipt_journal SET settled_at_ms = NULL WHERE attempt_id IN ({marks})",  # noqa: S608
            attempt_ids)


async def journal_age_out(tx: Tx, settled_before_ms: int, limit: int) -> int:
    """Drop settled rows older than the cutoff, at most `limit`: one DELETE walking the
    primary key (oldest attempts first), whatever the backlog; no file is looked at.
    No index on purpose: the journal is small once it keeps up, an index costs WAL."""
    return await tx.execute(
        "DELETE FROM receipt_journal WHERE attempt_id IN (SELECT attempt_id"
        " FROM receipt_journal WHERE settled_at_ms <= ? AND state = 'pending'"
        " ORDER BY attempt_id LIMIT ?)", (settled_before_ms, limit))


async def journal_ended_page(tx: Tx, after_id: str, limit: int) -> list[str]:
    """Pending rows of terminal attempts, settled or not, by attempt id: the start-up
    look for their receipts (docs/recovery.md)."""
    rows = await tx.all(
        "SELECT j.attempt_id FROM receipt_journal j"  # noqa: S608
        " JOIN run_attempts a ON a.id = j.attempt_id"
        " WHERE j.attempt_id > ? AND j.state = 'pending'"
        f" AND NOT {_A_ACTIVE} ORDER BY j.attempt_id LIMIT ?",
        (after_id, limit))
    return [str(r["attempt_id"]) for r in rows]


async def journal_counts(tx: Tx) -> dict[str, int]:
    """active: awaiting a result; terminal: awaiting file checks, then ageing out;
    settled: ageing out, no file work left; quarantined: awaiting purge."""
    row = await tx.one(
        f"SELECT SUM({_A_ACTIVE}) AS active,"  # noqa: S608
        f" SUM(j.state = 'pending' AND NOT {_A_ACTIVE}"
        "     AND j.settled_at_ms IS NULL) AS terminal,"
        " SUM(j.settled_at_ms IS NOT NULL) AS settled,"
        " SUM(j.state = 'quarantined') AS quarantined"
        " FROM receipt_journal j JOIN run_attempts a ON a.id = j.attempt_id")
    if row is None:
        return {}
    return {k: int(row[k] or 0) for k in ("active", "terminal", "settled", "quarantined")}
