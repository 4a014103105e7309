"""GET /api/v1/nodes: the fleet's nodes, their lease and what runs where.

On PostgreSQL (fleet mode) every node's row, with ages and lease times measured by
the database's clock (a node's own clock may be wrong: its skew is shown). On the
embedded SQLite the answer is the one node (`fleet: false`, no lease, no epoch).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..db import attempts, fleet_leases, nodes
from ..runtime.lifecycle import Runtime
from .errors import json_response


def _view(row: nodes.NodeRow, leader: str | None) -> dict[str, Any]:
    live = row.state == "live"
    return {
        # This node holds the scheduler's lease (fires the ticks, sends notifications).
        "leader": row.name == leader,
        "name": row.name, "labels": list(row.labels), "url": row.url, "state": row.state,
        "epoch": row.epoch, "version": row.version,
        "heartbeat_age_ms": max(0, row.db_now_ms - row.heartbeat_at_ms),
        "lease_left_ms": max(0, row.lease_expires_at_ms - row.db_now_ms) if live else 0,
        "lease_expired": row.lease_expires_at_ms < row.db_now_ms,
        "clock_skew_ms": row.clock_skew_ms, "running_attempts": row.running,
    }


async def list_nodes(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    me = rt.node
    if me.fleet:
        async with rt.db.read() as tx:
            rows = await nodes.list_nodes(tx)
            lease = await fleet_leases.current(tx, fleet_leases.SCHEDULER)
        leader = None if lease is None or lease.expires_at_ms < (
            rows[0].db_now_ms if rows else 0) else lease.holder
        return json_response({"fleet": True, "self": me.name,
                              "items": [_view(r, leader) for r in rows]})
    async with rt.db.read() as tx:
        running = await attempts.count_active_attempts(tx, rt.node_id)
    return json_response({"fleet": False, "self": me.name, "items": [{
        "leader": True, "name": me.name, "labels": list(me.labels), "url": me.url, "state": "live",
        "epoch": None, "version": __version__, "heartbeat_age_ms": None,
        "lease_left_ms": None, "lease_expired": False, "clock_skew_ms": None,
        "running_attempts": running}]})


routes = [Route("/nodes", list_nodes, methods=["GET"])]
