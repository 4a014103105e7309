"""create_app(settings): routes, middleware, lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from ..notify import rules as notify
from ..runtime.lifecycle import Runtime
from ..settings import Settings
from . import (
    apps,
    backup,
    dependencies,
    envs,
    imports,
    internal,
    logs_sse,
    metrics,
    nodes,
    notifications,
    panel,
    qinglong,
    qinglong_deps,
    qinglong_scripts,
    qinglong_subscriptions,
    runs,
    schedule,
    scripts,
    subscriptions,
    system,
    tasks,
    tickets,
)
from .auth import AdminAuth
from .errors import HANDLERS
from .guard import Guard


def create_app(settings: Settings, admin_token: str, *, boot_id: str | None = None
               ) -> Starlette:
    """`boot_id`: tests only (a simulated reboot), see `Runtime`."""
    runtime = Runtime(settings, boot_id=boot_id)
    runtime.notify_key = notify.script_key(admin_token)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    api = [*tasks.routes, *runs.routes, *logs_sse.routes, *system.routes, *envs.routes,
           *apps.routes, *schedule.routes, *tickets.routes, *scripts.routes,
           *subscriptions.routes, *notifications.routes, *dependencies.routes,
           *imports.routes, *nodes.routes, *backup.routes]
    app = Starlette(
        # /open/* (QingLong OpenAPI) is outside AdminAuth: it checks app tokens itself.
        # The operator panel (static files) at / and /assets/*.
        # /notify (a task's credential) and /metrics (admin token unless
        # metrics_public) check their callers themselves.
        # /internal/v1/* (fleet mode, node to node) checks the cluster credential itself.
        routes=[*system.health_routes, *notifications.public_routes, *metrics.routes,
                *internal.routes,
                *panel.routes(), Mount("/api/v1", routes=api),
                Mount("/open", routes=[*qinglong.routes, *qinglong_scripts.routes,
                                        *qinglong_subscriptions.routes,
                                        *qinglong_deps.routes])],
        # Guard first: the body limit and JSON for unhandled errors cover everything.
        middleware=[Middleware(Guard, max_body_bytes=settings.max_body_bytes,
                               wider={**scripts.body_ceilings(), **imports.body_ceilings()}),
                    Middleware(AdminAuth)],
        exception_handlers=dict(HANDLERS),
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.admin_token = admin_token
    app.state.stream_tickets = tickets.TicketStore()
    app.state.script_sends = {}
    return app
