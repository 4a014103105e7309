"""SQL of the cancellation leases (fencing epochs)."""

from __future__ import annotations

import msgspec

from ..model import Attempt, AttemptStatus, RunStatus
from . import dialect
from . import statuses as st
from .interface import Tx
from .rows import ATTEMPT_SELECT, attempt_from_row

_A_RUNNING = st.is_("a.status", AttemptStatus.RUNNING)
_R_RUNNING = st.is_("r.status", RunStatus.RUNNING)
# Running attempts through their running runs (migration 0022: no index of active
# attempts; an active attempt's run is always `running` — an older version's orphans
# are the start-up's, db/attempts.orphan_attempts).
_THROUGH_ACTIVE_RUNS = {
    d: f"SELECT a.* FROM runs r {dialect.ordered_join(d)} run_attempts a"  # noqa: S608
       f" ON a.run_id = r.id WHERE {_R_RUNNING}"
    for d in (dialect.SQLITE, dialect.POSTGRESQL)}


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    attempt_id: str
    holder: str
    epoch: int
    expires_at_ms: int


async def acquire(tx: Tx, attempt_id: str, holder: str, now_ms: int, ttl_ms: int) -> Lease | None:
    """Take, renew or take over (when expired, with epoch + 1); None if another holds it."""
    row = await tx.one("SELECT holder, epoch, expires_at_ms FROM cancel_leases"
                       " WHERE attempt_id = ?", (attempt_id,))
    expires = now_ms + ttl_ms
    if row is None:
        await tx.execute("INSERT INTO cancel_leases (attempt_id, holder, epoch, expires_at_ms)"
                         " VALUES (?, ?, 1, ?)", (attempt_id, holder, expires))
        return Lease(attempt_id=attempt_id, holder=holder, epoch=1, expires_at_ms=expires)
    epoch = int(row["epoch"])
    if row["holder"] != holder:
        if int(row["expires_at_ms"]) > now_ms:
            return None
        epoch += 1
    await tx.execute("UPDATE cancel_leases SET holder = ?, epoch = ?, expires_at_ms = ?"
                     " WHERE attempt_id = ?", (holder, epoch, expires, attempt_id))
    return Lease(attempt_id=attempt_id, holder=holder, epoch=epoch, expires_at_ms=expires)


async def holds(tx: Tx, lease: Lease, now_ms: int) -> bool:
    """The fencing check: the row still carries this holder's epoch and is unexpired."""
    row = await tx.one("SELECT holder, epoch, expires_at_ms FROM cancel_leases"
                       " WHERE attempt_id = ?", (lease.attempt_id,))
    return (row is not None and row["holder"] == lease.holder and int(row["epoch"]) == lease.epoch
            and int(row["expires_at_ms"]) > now_ms)


async def record_signal(tx: Tx, attempt_id: str, column: str, now_ms: int) -> None:
    assert column in ("term_sent_at_ms", "kill_sent_at_ms")
    await tx.execute(f"UPDATE cancel_leases SET {column} = ? WHERE attempt_id = ?",  # noqa: S608
                     (now_ms, attempt_id))


async def cancelling_attempts(tx: Tx, owner: str, limit: int) -> list[Attempt]:
    """Running attempts of this node whose run has a committed cancel intent."""
    rows = await tx.all(
        f"{_THROUGH_ACTIVE_RUNS[tx.dialect]} AND r.cancel_reason IS NOT NULL"
        f" AND a.runtime_owner = ? AND {_A_RUNNING} ORDER BY a.id LIMIT ?", (owner, limit))
    return [attempt_from_row(r) for r in rows]


async def cancelling_orphans(tx: Tx, owner: str, limit: int) -> list[Attempt]:
    """`cancelling_attempts` of runs not `running`: an older version's orphans, adopted
    by start-up recovery. A walk of run_attempts, read by the start-up sweep only."""
    rows = await tx.all(
        f"{ATTEMPT_SELECT} JOIN runs r ON r.id = a.run_id WHERE a.runtime_owner = ?"
        f" AND {_A_RUNNING} AND r.cancel_reason IS NOT NULL"
        f" AND NOT {_R_RUNNING} ORDER BY a.id LIMIT ?", (owner, limit))
    return [attempt_from_row(r) for r in rows]


