"""Health, readiness and /api/v1/system."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..db import errors as storage
from ..runtime.lifecycle import Runtime
from .context import runtime_of
from .errors import RETRY_AFTER_S, json_response

PROBE_TIMEOUT_S = 2.0


async def healthz(request: Request) -> Response:
    return json_response({"status": "alive"})


async def readyz(request: Request) -> Response:
    rt = runtime_of(request)
    if not (rt.ready and rt.db.is_open):
        return json_response({"status": "starting"}, 503)
    if rt.fleet is not None and not rt.fleet.ready:
        # Fenced, or no heartbeat within the lease: this node claims nothing now.
        return json_response({"status": "fenced" if rt.node.fenced else "no_lease"}, 503)
    if rt.node.fleet and not await _reachable(rt):
        return json_response({"status": "database_unavailable"}, 503,
                             {"Retry-After": str(RETRY_AFTER_S)})
    return json_response({"status": "ready"})


async def _reachable(rt: Runtime) -> bool:
    """Fleet mode: the shared database answers now (a node without it serves no API).
    Bounded: a server behind a dead route would otherwise hold the probe for minutes."""
    try:
        await asyncio.wait_for(rt.db.ping(), PROBE_TIMEOUT_S)
    except TimeoutError:
        return False
    except storage.StorageError:
        return False
    return True


async def system(request: Request) -> Response:
    rt = runtime_of(request)
    return json_response({"version": __version__, **await rt.report()})


health_routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
routes = [Route("/system", system, methods=["GET"])]
