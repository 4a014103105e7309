"""SQL of the fleet's nodes (PostgreSQL only): register, heartbeat, takeover, reads.

The `nodes` row is a node's lease (docs/fleet.md, "Registration, lease, epoch").
Every time compared across nodes is the database's clock (`DB_NOW`), never a node's:
a Raspberry Pi without a real-time clock may boot with a wrong one. The node's own
clock enters only as the skew it shows against the database.

`epoch` is the fencing token: it grows when another machine registers under the name
and at every takeover, and from that commit on the heartbeat, claim and completion
of the old epoch find it changed. Stale attempts (an active attempt whose
`node_epoch` is below its owner's current epoch) are found through the running runs
(runs_active, as db/attempts.py pages them): they are few — a fleet's concurrency.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ..model import Attempt, AttemptStatus, Reason, RunStatus
from . import statuses as st
from .interface import Tx
from .rows import attempt_from_row

# The database's clock in ms (docs/fleet.md: times compared across nodes).
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"

_A_ACTIVE = st.active_attempt("a.status")
_R_RUNNING = st.is_("r.status", RunStatus.RUNNING)


class NodeRow(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    node_id: str
    incarnation: str
    epoch: int
    state: str
    labels: tuple[str, ...]
    url: str
    version: str
    clock_skew_ms: int
    heartbeat_at_ms: int
    lease_expires_at_ms: int
    registered_at_ms: int
    db_now_ms: int  # the database's clock when the row was read
    running: int = 0  # active attempts owned by this node (list_nodes only)


class Registered(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    # This node id's own earlier epoch, when it was taken over (or the row expired):
    # its launchers may still run and belong to attempts decided `lost`.
    taken_over_from: int | None = None
    # Another machine held the name until now (a misconfiguration the log names).
    displaced: str | None = None


_COLUMNS = ("name, node_id, incarnation, epoch, state, labels_json, url, version,"
            " clock_skew_ms, heartbeat_at_ms, lease_expires_at_ms, registered_at_ms")


def _row(r: Any, running: int = 0) -> NodeRow:
    get = r.__getitem__
    return NodeRow(
        name=get("name"), node_id=get("node_id"), incarnation=get("incarnation"),
        epoch=int(get("epoch")), state=get("state"),
        labels=tuple(json.loads(get("labels_json"))), url=get("url"), version=get("version"),
        clock_skew_ms=int(get("clock_skew_ms")), heartbeat_at_ms=int(get("heartbeat_at_ms")),
        lease_expires_at_ms=int(get("lease_expires_at_ms")),
        registered_at_ms=int(get("registered_at_ms")), db_now_ms=int(get("db_now_ms")),
        running=running)


async def register(tx: Tx, *, name: str, node_id: str, incarnation: str,
                   labels: tuple[str, ...], url: str, version: str, lease_ms: int,
                   local_ms: int) -> Registered:
    """Insert or take this node's row: the epoch is kept when the row is this node id's
    and still `live` (a worker restart within the lease recovers its attempts as
    today), else it grows by one (a takeover happened, or another machine had the
    name: that one is fenced at its next heartbeat)."""
    prev = await tx.one("SELECT node_id, epoch, state FROM nodes WHERE name = ? FOR UPDATE",
                        (name,))
    row = await tx.one(
        f"INSERT INTO nodes ({_COLUMNS})"  # noqa: S608 - fixed fragments only
        " SELECT :name, :node_id, :inc, 1, 'live', :labels, :url, :version,"
        "  :local_ms - c.now, c.now, c.now + :lease_ms, c.now"
        f" FROM (SELECT {DB_NOW} AS now) c"
        " ON CONFLICT (name) DO UPDATE SET"
        "  epoch = CASE WHEN nodes.node_id = EXCLUDED.node_id AND nodes.state = 'live'"
        "   THEN nodes.epoch ELSE nodes.epoch + 1 END,"
        "  registered_at_ms = CASE WHEN nodes.node_id = EXCLUDED.node_id"
        "   AND nodes.state = 'live' THEN nodes.registered_at_ms"
        "   ELSE EXCLUDED.registered_at_ms END,"
        "  node_id = EXCLUDED.node_id, incarnation = EXCLUDED.incarnation, state = 'live',"
        "  labels_json = EXCLUDED.labels_json, url = EXCLUDED.url,"
        "  version = EXCLUDED.version, clock_skew_ms = EXCLUDED.clock_skew_ms,"
        "  heartbeat_at_ms = EXCLUDED.heartbeat_at_ms,"
        "  lease_expires_at_ms = EXCLUDED.lease_expires_at_ms"
        " RETURNING epoch",
        {"name": name, "node_id": node_id, "inc": incarnation,
         "labels": json.dumps(list(labels)), "url": url, "version": version,
         "lease_ms": lease_ms, "local_ms": local_ms})
    assert row is not None
    epoch = int(row["epoch"])
    if prev is None:
        return Registered(epoch=epoch)
    if prev["node_id"] != node_id:
        return Registered(epoch=epoch, displaced=str(prev["node_id"]))
    if epoch != int(prev["epoch"]):
        # A takeover bumped the epoch once (state 'expired'): the attempts carry the one
        # before it.
        return Registered(epoch=epoch, taken_over_from=max(1, int(prev["epoch"]) - 1))
    return Registered(epoch=epoch)


async def heartbeat(tx: Tx, name: str, epoch: int, lease_ms: int,
                    local_ms: int) -> int | None:
    """Extend the lease while the row still carries `epoch` (even past its expiry, as
    long as nobody took it over). The skew (node clock − database clock) in ms, or
    None: fenced, the epoch moved on."""
    row = await tx.one(
        "UPDATE nodes SET lease_expires_at_ms = c.now + :lease_ms, heartbeat_at_ms = c.now,"  # noqa: S608 - fixed fragments only
        "  clock_skew_ms = :local_ms - c.now"
        f" FROM (SELECT {DB_NOW} AS now) c"
        " WHERE name = :name AND epoch = :epoch AND state = 'live'"
        " RETURNING clock_skew_ms",
        {"lease_ms": lease_ms, "local_ms": local_ms, "name": name, "epoch": epoch})
    return None if row is None else int(row["clock_skew_ms"])


async def expired_nodes(tx: Tx, except_name: str, limit: int) -> list[tuple[str, int]]:
    """(name, epoch) of live rows whose lease ran out by the database's clock."""
    rows = await tx.all(
        "SELECT name, epoch FROM nodes WHERE state = 'live'"  # noqa: S608 - fixed fragments only
        f" AND lease_expires_at_ms < {DB_NOW}"
        " AND name <> ? ORDER BY lease_expires_at_ms LIMIT ?", (except_name, limit))
    return [(str(r["name"]), int(r["epoch"])) for r in rows]


async def takeover(tx: Tx, name: str, epoch: int) -> int | None:
    """Fence an expired node: its epoch + 1 and state `expired`. The row is locked with
    SKIP LOCKED, so two nodes never both do it (the loser sees None, as does anyone
    after a heartbeat or a re-register got there first). The new epoch, or None."""
    locked = await tx.one(
        "SELECT epoch FROM nodes WHERE name = ? AND epoch = ? AND state = 'live'"  # noqa: S608 - fixed fragments only
        f" AND lease_expires_at_ms < {DB_NOW} FOR UPDATE SKIP LOCKED", (name, epoch))
    if locked is None:
        return None
    row = await tx.one(
        "UPDATE nodes SET epoch = epoch + 1, state = 'expired' WHERE name = ? AND epoch = ?"  # noqa: S608 - fixed fragments only
        f" AND lease_expires_at_ms < {DB_NOW} RETURNING epoch", (name, epoch))
    return None if row is None else int(row["epoch"])


async def stale_attempts(tx: Tx, limit: int) -> list[Attempt]:
    """Active attempts whose node epoch is below their owner's current one (or whose
    owner has no row), locked for this transaction; a page another node holds is
    skipped (SKIP LOCKED), so two nodes deciding at once decide each attempt once."""
    rows = await tx.all(
        "SELECT a.* FROM runs r JOIN run_attempts a ON a.run_id = r.id"  # noqa: S608
        # The owner's row: the newest registration of that node id (a machine renamed
        # keeps its id, and its old name's row stays behind).
        " LEFT JOIN LATERAL (SELECT epoch FROM nodes WHERE node_id = a.runtime_owner"
        "  ORDER BY registered_at_ms DESC LIMIT 1) n ON true"
        f" WHERE {_R_RUNNING} AND {_A_ACTIVE} AND a.node_epoch IS NOT NULL"
        " AND (n.epoch IS NULL OR a.node_epoch < n.epoch)"
        " ORDER BY a.id LIMIT ? FOR UPDATE OF a SKIP LOCKED", (limit,))
    return [attempt_from_row(r) for r in rows]


async def fenced_launchers(tx: Tx, node_id: str, from_epoch: int, below_epoch: int,
                           after_id: str, limit: int) -> list[Attempt]:
    """Attempts of this node's fenced epochs that may have a launcher: still active, or
    decided `lost` by the takeover (whose processes may still run) — with a recorded pid
    or without one (spawned within the identity grace: the caller finds its launcher).
    A walk of run_attempts in id order filtered by owner and epoch — no index leads
    there; it runs once per fencing, a rare event, and retention bounds the table."""
    rows = await tx.all(
        "SELECT a.* FROM run_attempts a WHERE a.runtime_owner = ?"  # noqa: S608
        " AND a.node_epoch >= ? AND a.node_epoch < ?"
        f" AND ({_A_ACTIVE} OR (a.status = ? AND a.reason_code = ?))"
        " AND a.id > ? ORDER BY a.id LIMIT ?",
        (node_id, from_epoch, below_epoch, AttemptStatus.LOST.value,
         Reason.NODE_LEASE_EXPIRED.value, after_id, limit))
    return [attempt_from_row(r) for r in rows]


async def record_fenced_identity(tx: Tx, attempt_id: str, *, pid: int, start_time: int,
                                 boot_id: str) -> bool:
    """The launcher identity of an attempt a takeover decided `lost` before its node
    wrote it (spawned within the identity grace): a fact about a process that runs on,
    kept so that the node's fencing and its operator find the launcher. The status and
    the run stay as decided; no event (the decision has its own). True: written now."""
    return await tx.execute(
        "UPDATE run_attempts SET pid = ?, proc_start_time = ?, boot_id = ?"
        " WHERE id = ? AND pid IS NULL AND status = ?",
        (pid, start_time, boot_id, attempt_id, AttemptStatus.LOST.value)) == 1


async def list_nodes(tx: Tx) -> list[NodeRow]:
    """Every node with its count of active attempts (for the API and the panel)."""
    counts = {str(r["owner"]): int(r["n"]) for r in await tx.all(
        "SELECT a.runtime_owner AS owner, count(*) AS n FROM runs r"  # noqa: S608
        f" JOIN run_attempts a ON a.run_id = r.id WHERE {_R_RUNNING} AND {_A_ACTIVE}"
        " GROUP BY a.runtime_owner")}
    rows = await tx.all(f"SELECT {_COLUMNS}, {DB_NOW} AS db_now_ms FROM nodes"  # noqa: S608
                        " ORDER BY name")
    return [_row(r, counts.get(str(r["node_id"]), 0)) for r in rows]


async def node_by_id(tx: Tx, node_id: str) -> NodeRow | None:
    """The row of the node that owns attempts as `node_id` (runtime_owner)."""
    row = await tx.one(f"SELECT {_COLUMNS}, {DB_NOW} AS db_now_ms FROM nodes"  # noqa: S608
                       " WHERE node_id = ? ORDER BY registered_at_ms DESC LIMIT 1", (node_id,))
    return None if row is None else _row(row)


async def node_by_name(tx: Tx, name: str) -> NodeRow | None:
    row = await tx.one(f"SELECT {_COLUMNS}, {DB_NOW} AS db_now_ms FROM nodes"  # noqa: S608
                       " WHERE name = ?", (name,))
    return None if row is None else _row(row)
