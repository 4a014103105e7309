"""The other nodes of the fleet as a log reader sees them (PostgreSQL only: `nodes`).

Liveness is the lease on the database clock (docs/fleet.md, "Registration,
lease, epoch"): a node whose `lease_expires_at_ms` is past is down, whatever its `state`
column says yet, because the takeover that flips the state may not have run.
"""

from __future__ import annotations

import msgspec

from .interface import Tx

DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


class Peer(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    url: str
    state: str  # live | expired | left
    alive: bool  # state live and its lease not expired on the database clock
    heartbeat_at_ms: int | None  # None: no row for it (it left)


async def owner(tx: Tx, node_id: str) -> Peer | None:
    """The node whose `node_id` this is (an attempt's `runtime_owner`), if registered."""
    row = await tx.one(
        "SELECT name, url, state, heartbeat_at_ms,"  # noqa: S608 (a constant fragment)
        f" (state = 'live' AND lease_expires_at_ms > {DB_NOW}) AS alive"
        " FROM nodes WHERE node_id = ? ORDER BY heartbeat_at_ms DESC LIMIT 1", (node_id,))
    if row is None:
        return None
    return Peer(name=str(row["name"]), url=str(row["url"]), state=str(row["state"]),
                alive=bool(row["alive"]), heartbeat_at_ms=int(row["heartbeat_at_ms"]))


async def known(tx: Tx, name: str) -> bool:
    """Is `name` a registered node (any state: a fenced node may still read logs)?"""
    return await tx.one("SELECT 1 FROM nodes WHERE name = ?", (name,)) is not None
