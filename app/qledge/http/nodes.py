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
from ..db import attempts, nodes
from ..node import Node, default_name, labels_of
from ..runtime.fleet import Fleet
from ..runtime.lifecycle import Runtime
from .errors import json_response


def _node(rt: Runtime) -> Node:
    # runtime.node is set by the lifecycle in fleet mode and on SQLite alike; before
    # it is wired, the settings describe this node the same way.
    node: Node | None = getattr(rt, "node", None)
    if node is not None:
        return node
    s = rt.settings
    name = s.node_name or default_name()
    return Node(name=name, labels=labels_of(name, s.node_labels), url=s.node_url,
                node_id=rt.node_id)


def _view(row: nodes.NodeRow) -> dict[str, Any]:
    live = row.state == "live"
    return {
        "name": row.name, "labels": list(row.labels), "url": row.url, "state": row.state,
        "epoch": row.epoch, "version": row.version,
        "heartbeat_age_ms": max(0, row.db_now_ms - row.heartbeat_at_ms),
        "lease_left_ms": max(0, row.lease_expires_at_ms - row.db_now_ms) if live else 0,
        "lease_expired": row.lease_expires_at_ms < row.db_now_ms,
        "clock_skew_ms": row.clock_skew_ms, "running_attempts": row.running,
    }


async def list_nodes(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    fleet: Fleet | None = getattr(rt, "fleet", None)
    me = _node(rt)
    if fleet is not None:
        async with fleet.db.read() as tx:
            rows = await nodes.list_nodes(tx)
        return json_response({"fleet": True, "self": me.name,
                              "nodes": [_view(r) for r in rows]})
    async with rt.db.read() as tx:
        running = await attempts.count_active_attempts(tx, rt.node_id)
    return json_response({"fleet": False, "self": me.name, "nodes": [{
        "name": me.name, "labels": list(me.labels), "url": me.url, "state": "live",
        "epoch": None, "version": __version__, "heartbeat_age_ms": None,
        "lease_left_ms": None, "lease_expired": False, "clock_skew_ms": None,
        "running_attempts": running}]})


routes = [Route("/nodes", list_nodes, methods=["GET"])]
