"""SQL of the receipt journal: one entry per attempt's receipt, from spawn until its
fate is settled and the entry ages out (docs/storage.md).

Since migration 0021 an entry is the `receipt_*` columns of its attempt's row
(`receipt_state` NULL: none); ageing out clears them. Every walk of the journal
spells `receipt_state IS NOT NULL`, the WHERE of the partial index attempts_journal
(SQLite uses a partial index only when the query implies it), and goes by attempt id.
"""

from __future__ import annotations

import msgspec

from ..model import AttemptStatus
from . import dialect
from . import statuses as st
from .interface import Tx

_A_ACTIVE = st.active_attempt("a.status")
# The WHERE of attempts_journal: an attempt that has a journal entry.
_ENTRY = "a.receipt_state IS NOT NULL"
_ROW = ("a.id AS attempt_id, a.receipt_state AS state, a.receipt_path AS relative_path,"
        " a.receipt_reason AS reason_code, a.receipt_since_ms AS retention_since_ms,"
        " a.status AS attempt_status")
# Ageing out: no entry leaves no receipt_* value behind (the table's CHECK).
_CLEAR = ("receipt_state = NULL, receipt_path = NULL, receipt_reason = NULL,"
          " receipt_created_at_ms = NULL, receipt_updated_at_ms = NULL,"
          " receipt_since_ms = NULL, receipt_settled_at_ms = NULL")


class JournalRow(msgspec.Struct, frozen=True, kw_only=True):
    attempt_id: str
    state: str
    relative_path: str
    reason_code: str | None
    retention_since_ms: int | None
    attempt_status: AttemptStatus


async def journal_register(tx: Tx, attempt_id: str, receipt_path: str, now_ms: int) -> bool:
    """Idempotent: True when an entry was created."""
    return await tx.execute(
        "UPDATE run_attempts SET receipt_state = 'pending', receipt_path = ?,"
        " receipt_created_at_ms = ?, receipt_updated_at_ms = ?"
        " WHERE id = ? AND receipt_state IS NULL",
        (receipt_path, now_ms, now_ms, attempt_id)) == 1


async def journal_quarantine(tx: Tx, attempt_id: str, reason: str, now_ms: int) -> None:
    await tx.execute(
        "UPDATE run_attempts SET receipt_state = 'quarantined', receipt_reason = ?,"
        " receipt_updated_at_ms = ?, receipt_since_ms = ?, receipt_settled_at_ms = NULL"
        " WHERE id = ? AND receipt_state = 'pending'", (reason, now_ms, now_ms, attempt_id))


def _owned(owner: str | None) -> tuple[str, tuple[str, ...]]:
    """In a fleet, a node's file work is on its own attempts' receipts only (the files
    are on its disk); None: every entry (the embedded SQLite, statements unchanged)."""
    return ("", ()) if owner is None else (" AND a.runtime_owner = ?", (owner,))


async def journal_page(tx: Tx, after_id: str, limit: int,
                       owner: str | None = None) -> list[JournalRow]:
    """Entries that may still need file work: not settled (settled entries age out by
    `journal_age_out` alone, docs/storage.md)."""
    mine, by = _owned(owner)
    rows = await tx.all(
        f"SELECT {_ROW} FROM run_attempts a WHERE {_ENTRY} AND a.id > ?"  # noqa: S608
        f" AND a.receipt_settled_at_ms IS NULL{mine} ORDER BY a.id LIMIT ?",
        (after_id, *by, limit))
    return [
        JournalRow(attempt_id=r["attempt_id"], state=r["state"],
                   relative_path=r["relative_path"], reason_code=r["reason_code"],
                   retention_since_ms=r["retention_since_ms"],
                   attempt_status=AttemptStatus(r["attempt_status"]))
        for r in rows
    ]


async def journal_mark_terminal(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Start the entry's retention clock ('terminal/quarantined since'). `runs.apply` does
    the same in the UPDATE that ends the attempt."""
    await tx.execute(
        "UPDATE run_attempts SET receipt_since_ms = ? WHERE id = ?"
        " AND receipt_state IS NOT NULL AND receipt_since_ms IS NULL", (now_ms, attempt_id))


async def journal_reset_pending(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Quarantine purged while the attempt still runs: index its receipt again."""
    await tx.execute(
        "UPDATE run_attempts SET receipt_state = 'pending', receipt_since_ms = NULL,"
        " receipt_updated_at_ms = ? WHERE id = ? AND receipt_state IS NOT NULL",
        (now_ms, attempt_id))


async def journal_delete(tx: Tx, attempt_id: str) -> None:
    await tx.execute(f"UPDATE run_attempts SET {_CLEAR} WHERE id = ?"  # noqa: S608
                     " AND receipt_state IS NOT NULL", (attempt_id,))


async def journal_settle(tx: Tx, attempt_ids: list[str], now_ms: int) -> None:
    """These receipts' fate is settled with no file work left (consumed into their
    attempt's terminal state, or known never to come): the entries only age out now."""
    if attempt_ids:
        in_ids = dialect.in_list(tx.dialect, "id", len(attempt_ids))
        await tx.execute(
            f"UPDATE run_attempts SET receipt_settled_at_ms = ? WHERE {in_ids}"  # noqa: S608
            " AND receipt_state = 'pending' AND receipt_settled_at_ms IS NULL",
            [now_ms, *dialect.in_params(tx.dialect, attempt_ids)])


async def journal_unsettle(tx: Tx, attempt_ids: list[str]) -> None:
    """A consumed receipt could not be deleted: back to the paged file checks."""
    if attempt_ids:
        in_ids = dialect.in_list(tx.dialect, "id", len(attempt_ids))
        await tx.execute(
            f"UPDATE run_attempts SET receipt_settled_at_ms = NULL WHERE {in_ids}"  # noqa: S608
            " AND receipt_settled_at_ms IS NOT NULL",
            dialect.in_params(tx.dialect, attempt_ids))


async def journal_age_out(tx: Tx, settled_before_ms: int, limit: int) -> int:
    """Clear settled entries older than the cutoff, at most `limit`: one UPDATE walking
    attempts_journal (oldest attempts first), whatever the backlog; no file is looked at.
    No index on the settling time on purpose: the journal is small once it keeps up,
    an index costs WAL."""
    return await tx.execute(
        f"UPDATE run_attempts SET {_CLEAR} WHERE id IN (SELECT a.id"  # noqa: S608
        f" FROM run_attempts a WHERE {_ENTRY} AND a.receipt_settled_at_ms <= ?"
        " AND a.receipt_state = 'pending' ORDER BY a.id LIMIT ?)", (settled_before_ms, limit))


# Spawn step 1 ages at most this many entries, looking at most at the journal's oldest
# SPAWN_AGE_WINDOW: a bounded walk however long the journal grows (the supervisor's
# backstop takes a head stuck on unsettled entries).
SPAWN_AGE_LIMIT = 8
SPAWN_AGE_WINDOW = 64


async def journal_age_in_spawn(tx: Tx, settled_before_ms: int | None) -> int:
    """Spawn step 1's share of the ageing (None: none): settled entries due by the
    cutoff go in a durable commit that happens anyway, whose recent pages (the newest
    attempt rows, the attempts_journal leaf) they mostly sit on (docs/storage.md)."""
    if settled_before_ms is None:
        return 0
    return await tx.execute(
        f"UPDATE run_attempts SET {_CLEAR} WHERE id IN (SELECT id FROM (SELECT a.id,"  # noqa: S608
        " a.receipt_state AS state, a.receipt_settled_at_ms AS settled"
        f" FROM run_attempts a WHERE {_ENTRY} ORDER BY a.id LIMIT ?)"
        f"{dialect.derived(tx.dialect, 'head')}"
        " WHERE settled <= ? AND state = 'pending' LIMIT ?)",
        (SPAWN_AGE_WINDOW, settled_before_ms, SPAWN_AGE_LIMIT))


async def journal_due(tx: Tx, settled_before_ms: int, limit: int) -> int:
    """How many settled entries the cutoff makes due, counted up to `limit`."""
    row = await tx.one(
        f"SELECT COUNT(*) AS n FROM (SELECT 1 FROM run_attempts a WHERE {_ENTRY}"  # noqa: S608
        " AND a.receipt_settled_at_ms <= ? AND a.receipt_state = 'pending' LIMIT ?)"
        f"{dialect.derived(tx.dialect, 'due')}", (settled_before_ms, limit))
    return int(row["n"]) if row else 0


async def journal_ended_page(tx: Tx, after_id: str, limit: int,
                             owner: str | None = None) -> list[str]:
    """Pending entries of terminal attempts, settled or not, by attempt id: the start-up
    look for their receipts (docs/recovery.md)."""
    mine, by = _owned(owner)
    rows = await tx.all(
        f"SELECT a.id FROM run_attempts a WHERE {_ENTRY}"  # noqa: S608
        " AND a.id > ? AND a.receipt_state = 'pending'"
        f" AND NOT {_A_ACTIVE}{mine} ORDER BY a.id LIMIT ?",
        (after_id, *by, limit))
    return [str(r["id"]) for r in rows]


async def journal_counts(tx: Tx, owner: str | None = None) -> dict[str, int]:
    """active: awaiting a result; terminal: awaiting file checks, then ageing out;
    settled: ageing out, no file work left; quarantined: awaiting purge."""
    mine, by = _owned(owner)
    row = await tx.one(
        f"SELECT SUM(CASE WHEN {_A_ACTIVE} THEN 1 ELSE 0 END) AS active,"  # noqa: S608
        f" SUM(CASE WHEN a.receipt_state = 'pending' AND NOT {_A_ACTIVE}"
        "     AND a.receipt_settled_at_ms IS NULL THEN 1 ELSE 0 END) AS terminal,"
        " SUM(CASE WHEN a.receipt_settled_at_ms IS NOT NULL THEN 1 ELSE 0 END) AS settled,"
        " SUM(CASE WHEN a.receipt_state = 'quarantined' THEN 1 ELSE 0 END) AS quarantined"
        f" FROM run_attempts a WHERE {_ENTRY}{mine}", by)
    if row is None:
        return {}
    return {k: int(row[k] or 0) for k in ("active", "terminal", "settled", "quarantined")}
