"""QingLong's OpenAPI subset under /open/* (docs/qinglong-compat.md), as a mounted
application with QingLong's error shape — `{"code": <HTTP status>, "message": ...}`,
and 400 for bad input where the native API says 422 (`errors.qinglong_handlers`) —
so neither shape's code asks which path it serves.

Integer ids are the tasks' / envs' `num`; the native UUIDv7 ids are shown as
`qledge_id`. Authentication (auth.py): `Authorization: Bearer <token>` with a token
from GET /open/auth/token (scopes of its app), or the admin token (every scope).
"""

from __future__ import annotations

from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Router
from starlette.types import ASGIApp

from ..errors import qinglong_handlers
from . import auth, crons, dependencies, envs, scripts, subscriptions


def application() -> ASGIApp:
    """The routes under /open with their own exception handlers. A router, not a
    second Starlette: it answers for the same appliance, so `request.app` stays the
    native application (its state holds the runtime and the admin token)."""
    routes = [*auth.routes, *crons.routes, *envs.routes, *scripts.routes,
              *subscriptions.routes, *dependencies.routes]
    return ExceptionMiddleware(Router(routes=routes), handlers=qinglong_handlers())
