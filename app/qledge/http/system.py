"""Health, readiness and /api/v1/system."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..runtime.lifecycle import Runtime
from .errors import json_response


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def healthz(request: Request) -> Response:
    return json_response({"status": "alive"})


async def readyz(request: Request) -> Response:
    rt = _rt(request)
    if rt.ready and rt.db.is_open:
        return json_response({"status": "ready"})
    return json_response({"status": "starting"}, 503)


async def system(request: Request) -> Response:
    rt = _rt(request)
    return json_response({"version": __version__, **await rt.report()})


health_routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
routes = [Route("/system", system, methods=["GET"])]
