"""SQL of the fleet's singleton leases (`fleet_leases`, PostgreSQL only).

One row per duty ('scheduler'): the holder node, its incarnation (one worker
process), an epoch that grows at every change of holder, and an expiry. Every
time here is the database's clock (docs/fleet.md, "The scheduler leader"):
a Raspberry Pi without a real-time clock must not decide who leads.

Unlike a session advisory lock, a lease runs out by itself: a SIGSTOPped leader
keeps its TCP session (its kernel still answers keepalives) but not its lease.
"""

from __future__ import annotations

import msgspec

from .interface import Tx

# The database clock in ms, evaluated per statement call (clock_timestamp, not the
# transaction's start time: a transaction that waited on a lock sees the real now).
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
SCHEDULER = "scheduler"


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    holder: str
    epoch: int
    expires_at_ms: int  # database clock


async def acquire(tx: Tx, name: str, holder: str, incarnation: str,
                  ttl_ms: int) -> Lease | None:
    """Take the lease (free, or expired: epoch + 1) or renew it (held by this holder
    and incarnation: same epoch); None while someone else holds it unexpired.

    One statement: ON CONFLICT … DO UPDATE locks the row, so two nodes racing for an
    expired lease are serialized and the second re-checks the WHERE against the
    first's fresh expiry (it finds it held and gets no row). A new incarnation of the
    same node waits for its predecessor's lease to run out like any other node: that
    predecessor may be frozen, not dead."""
    row = await tx.one(
        "INSERT INTO fleet_leases AS l (name, holder, holder_incarnation, epoch,"  # noqa: S608
        f" expires_at_ms) VALUES (?, ?, ?, 1, {DB_NOW} + ?)"
        " ON CONFLICT (name) DO UPDATE SET"
        " epoch = CASE WHEN l.holder = excluded.holder"
        "  AND l.holder_incarnation = excluded.holder_incarnation"
        "  THEN l.epoch ELSE l.epoch + 1 END,"
        " holder = excluded.holder, holder_incarnation = excluded.holder_incarnation,"
        " expires_at_ms = excluded.expires_at_ms"
        " WHERE (l.holder = excluded.holder"
        "  AND l.holder_incarnation = excluded.holder_incarnation)"
        f" OR l.expires_at_ms <= {DB_NOW}"
        " RETURNING holder, epoch, expires_at_ms",
        (name, holder, incarnation, ttl_ms))
    if row is None:
        return None
    return Lease(name=name, holder=str(row["holder"]), epoch=int(row["epoch"]),
                 expires_at_ms=int(row["expires_at_ms"]))


async def holds_in(tx: Tx, name: str, holder: str, epoch: int) -> bool:
    """The fencing check inside a duty's own transaction: the row still names this
    holder at this epoch and has not expired. FOR SHARE keeps it so until the
    transaction ends: a takeover (an UPDATE of the row) waits for this commit, so
    nothing this transaction writes can land after another holder's first act."""
    row = await tx.one(
        "SELECT 1 FROM fleet_leases WHERE name = ? AND holder = ? AND epoch = ?"  # noqa: S608
        f" AND expires_at_ms > {DB_NOW} FOR SHARE", (name, holder, epoch))
    return row is not None


async def release(tx: Tx, name: str, holder: str, incarnation: str) -> bool:
    """Give the lease up at a clean stop: expired now, so the next node takes it at its
    next renewal instead of after the TTL (the epoch still grows when it does)."""
    n = await tx.execute(
        f"UPDATE fleet_leases SET expires_at_ms = {DB_NOW} - 1"  # noqa: S608
        " WHERE name = ? AND holder = ? AND holder_incarnation = ?",
        (name, holder, incarnation))
    return n > 0


async def current(tx: Tx, name: str) -> Lease | None:
    """The lease row as it is (the panel, tests)."""
    row = await tx.one("SELECT holder, epoch, expires_at_ms FROM fleet_leases WHERE name = ?",
                       (name,))
    if row is None:
        return None
    return Lease(name=name, holder=str(row["holder"]), epoch=int(row["epoch"]),
                 expires_at_ms=int(row["expires_at_ms"]))
