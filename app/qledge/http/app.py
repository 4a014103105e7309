"""create_app(settings): routes, middleware, lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from ..auth import Accounts
from ..db import notifications as notify_q
from ..db.interface import Tx
from ..notifications import rules as notify
from ..notifications import words
from ..runtime.lifecycle import Runtime
from ..settings import Settings
from . import (
    apps,
    backup,
    backup_encrypted,
    backup_schedule,
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
    restore,
    runs,
    schedule,
    scripts,
    signin,
    subscriptions,
    system,
    task_lists,
    tasks,
    tickets,
)
from .auth import AdminAuth
from .errors import HANDLERS, render_qinglong
from .guard import Guard


def create_app(settings: Settings, admin_token: str, *, boot_id: str | None = None
               ) -> Starlette:
    """`boot_id`: tests only (a simulated reboot), see `Runtime`."""
    runtime = Runtime(settings, notify_key=notify.script_key(admin_token), boot_id=boot_id)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    api = [*tasks.routes, *task_lists.routes, *runs.routes, *logs_sse.routes, *system.routes,
           *envs.routes, *apps.routes, *schedule.routes, *tickets.routes, *scripts.routes,
           *subscriptions.routes, *notifications.routes, *dependencies.routes,
           *imports.routes, *nodes.routes, *signin.routes, *backup.routes,
           *restore.routes, *backup_schedule.routes, *backup_encrypted.routes]
    app = Starlette(
        # /open/* (QingLong OpenAPI) is outside AdminAuth: it checks app tokens itself.
        # The operator panel (static files) at / and /assets/*.
        # /notify and /backup/scheduled (a task's credential) and /metrics (admin token unless
        # metrics_public) check their callers themselves.
        # /internal/v1/* (fleet mode, node to node) checks the cluster credential itself.
        routes=[*system.health_routes, *notifications.public_routes, *metrics.routes,
                *backup_schedule.public_routes,
                *internal.routes,
                *panel.routes(), Mount("/api/v1", routes=api),
                Mount("/open", app=qinglong.application())],
        # Guard first: the body limit and JSON for unhandled errors cover everything.
        middleware=[Middleware(Guard, max_body_bytes=settings.max_body_bytes,
                               wider={**scripts.body_ceilings(), **imports.body_ceilings(),
                                      **restore.body_ceilings()},
                               shapes={"/open": render_qinglong}),
                    Middleware(AdminAuth)],
        exception_handlers=dict(HANDLERS),
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.admin_token = admin_token
    app.state.stream_tickets = tickets.TicketStore()
    app.state.script_sends = {}

    async def signin_message(tx: Tx, client: str, agent: str, method: str) -> None:
        lang = words.lang((await notify_q.settings(tx)).language)
        await runtime.notifier.enqueue(
            tx, kind="signin", title=words.text(lang, "signin"),
            body=words.text(lang, "signin_body", client, agent, method))

    app.state.accounts = Accounts(
        runtime.db, admin_token, idle_ms=settings.session_idle_s * 1000,
        max_ms=settings.session_max_s * 1000,
        notify=signin_message if settings.signin_notify else None)
    app.state.trust_forwarded_proto = settings.trust_forwarded_proto
    return app
