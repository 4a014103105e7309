"""GET /metrics: the Prometheus text format (docs/metrics.md).

The admin token is required unless the operator opts into `metrics_public`
(unauthenticated scraping on a trusted local network).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..runtime.lifecycle import Runtime
from .auth import require_admin


async def metrics(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    if not rt.settings.metrics_public:
        require_admin(request)
    from prometheus_client import CONTENT_TYPE_LATEST  # loaded at the first scrape

    return Response(await rt.metrics.render(rt.live_metrics()), media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]
