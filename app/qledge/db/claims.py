"""SQL of the claim: what a node's write transaction takes before it prepares an attempt
of a queued run, and why a queued run waits for its placement.

On the embedded SQLite every write is `BEGIN IMMEDIATE` on the one writer, so these
are no-ops there (the single writer already serializes the claim, the overlap
decision and the attempt's insert; the one node has no lease). On PostgreSQL several
nodes write at once under READ COMMITTED (docs/fleet.md, "The claim"; SQLite's
single writer serializes them):

* the run's row lock `FOR UPDATE SKIP LOCKED`: two nodes never prepare the same run,
  and neither waits on the other's row;
* an advisory transaction lock per task for a non-`allow` overlap: the decision "may
  a run of this task start / be created" is taken by one transaction at a time
  fleet-wide;
* the node's lease row `FOR SHARE` at its epoch with an unexpired lease: a node whose
  epoch was taken over (or whose lease ran out) inserts no attempt, and a takeover's
  `UPDATE nodes` waits for this commit, so the takeover then sees the attempt and
  fences it with the rest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..model import Run, RunStatus
from ..node import Node, allows
from . import dialect
from . import statuses as st
from .interface import Tx

# The database's clock in ms: leases are compared against one clock, not the nodes'.
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
_QUEUED = st.is_("status", RunStatus.QUEUED)


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """Why a queued run waits for its placement (the run API's `waiting`)."""

    reason: str  # PLACEMENT_NODE_DOWN | PLACEMENT_NO_NODE | PLACEMENT_NO_LABEL
    node: str | None = None
    labels: list[str] = []


async def lock_queued(tx: Tx, run_id: str) -> bool:
    """Lock the run for this transaction if it is still queued and no other node holds
    it; False: skip it (claimed, ended, or being claimed elsewhere)."""
    if tx.dialect != dialect.POSTGRESQL:
        return True
    row = await tx.one(
        f"SELECT id FROM runs WHERE id = ? AND {_QUEUED} FOR UPDATE SKIP LOCKED",  # noqa: S608
        (run_id,))
    return row is not None


async def serialize_task(tx: Tx, task_id: str) -> None:
    """Overlap decisions of one task, one transaction at a time across the fleet (held
    until commit or rollback)."""
    if tx.dialect == dialect.POSTGRESQL:
        await tx.one("SELECT pg_advisory_xact_lock(hashtext('qledge.task:' || ?))",
                     (task_id,))


async def holds_lease(tx: Tx, node: Node) -> bool:
    """May this node insert an attempt now: its row at its epoch, the lease unexpired
    by the database clock. The one node of SQLite has no lease."""
    if tx.dialect != dialect.POSTGRESQL:
        return True
    if node.epoch is None:
        return False  # not registered (yet): nothing is claimed without a lease
    row = await tx.one(
        "SELECT 1 FROM nodes WHERE name = ? AND epoch = ? AND state = 'live'"  # noqa: S608
        f" AND lease_expires_at_ms > {DB_NOW} FOR SHARE", (node.name, node.epoch))
    return row is not None


def placed_queued(run: Run) -> bool:
    """A queued run with a placement: the ones `waiting` may explain."""
    return run.status is RunStatus.QUEUED and (
        run.placement_node is not None or bool(run.placement_labels))


async def known_nodes(tx: Tx, here: Node) -> list[tuple[str, list[str], bool]]:
    """(name, labels, live) of every node placement could use: on PostgreSQL the
    `nodes` table (live: state live, lease unexpired by the database clock); on SQLite
    the one node is the fleet."""
    if tx.dialect != dialect.POSTGRESQL:
        return [(here.name, list(here.labels), not here.fenced)]
    rows: list[Any] = await tx.all(
        "SELECT name, labels_json, state = 'live' AND lease_expires_at_ms >"  # noqa: S608
        f" {DB_NOW} AS live FROM nodes ORDER BY name")
    return [(r["name"], msgspec.json.decode(r["labels_json"], type=list[str]),
             bool(r["live"])) for r in rows]


def judge(run: Run, nodes: list[tuple[str, list[str], bool]]) -> Waiting | None:
    """Why no live node can take this queued run, or None (no placement, or a live
    node may take it), over (name, labels, live) of every known node."""
    if not placed_queued(run):
        return None
    if run.placement_node is not None:
        named = [n for n in nodes if n[0] == run.placement_node]
        if not named:
            return Waiting(reason="PLACEMENT_NO_NODE", node=run.placement_node)
        name, labels, live = named[0]
        if not live:
            return Waiting(reason="PLACEMENT_NODE_DOWN", node=name)
        missing = [label for label in run.placement_labels if label not in labels]
        if missing:
            return Waiting(reason="PLACEMENT_NO_LABEL", node=name, labels=missing)
        return None
    probe = Node(name="", labels=())
    for name, labels, live in nodes:
        probe.name, probe.labels = name, tuple(labels)
        if live and allows(probe, None, run.placement_labels):
            return None
    return Waiting(reason="PLACEMENT_NO_LABEL", labels=list(run.placement_labels))
