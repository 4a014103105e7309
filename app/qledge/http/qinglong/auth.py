"""Who may call /open/*: a bearer token from GET /open/auth/token (its app's scopes) or
the admin token (every scope); `scoped` guards each endpoint."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import operations
from ...apps.spec import digest, new_secret
from ...clock import now_ms
from ...db import apps
from .. import inputs
from ..context import runtime_of
from ..errors import (
    BadRequest,
    Forbidden,
    Unauthorized,
    json_response,
)
from .wire import Handler

TOKEN_TTL_S = 30 * 86400  # like QingLong
MAX_LIVE_TOKENS = 20  # per app; the oldest is revoked beyond this

# -- authentication ------------------------------------------------------------------

async def authorize(request: Request, scopes: tuple[str, ...]) -> None:
    """401 without a valid, unexpired token; 403 when its app lacks every one of `scopes`."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    admin: str = request.app.state.admin_token
    if hmac.compare_digest(token.encode(), admin.encode()):
        return
    async with runtime_of(request).db.read() as tx:
        grant = await apps.token_grant(tx, digest(token))
    if grant is None:
        raise Unauthorized("invalid token")
    if grant.expires_at_ms <= now_ms():
        raise Unauthorized("token expired")
    if not any(s in grant.scopes for s in scopes):
        raise Forbidden(f"this app has no {scopes[0]!r} scope")


def scoped(*scopes: str) -> Callable[[Handler], Handler]:
    def wrap(fn: Handler) -> Handler:
        async def handler(request: Request) -> Response:
            await authorize(request, scopes)
            return await fn(request)
        handler.__name__ = fn.__name__
        return handler
    return wrap


async def auth_token(request: Request) -> Response:
    client_id = inputs.query_text(request, "client_id", BadRequest)
    secret = inputs.query_text(request, "client_secret", BadRequest)
    if not client_id:
        raise BadRequest("client_id is required", field="client_id")
    if not secret:
        raise BadRequest("client_secret is required", field="client_secret")
    now = now_ms()
    expiration = now // 1000 + TOKEN_TTL_S
    token = new_secret()
    try:
        await operations.issue_app_token(
            runtime_of(request), client_id=client_id, secret_hash=digest(secret),
            token_hash=digest(token), expires_at_ms=expiration * 1000, now=now,
            keep=MAX_LIVE_TOKENS)
    except operations.WrongCredentials:
        raise BadRequest("client_id or client_secret is wrong") from None
    return json_response(
        {"code": 200, "data": {"token": token, "token_type": "Bearer",
                               "expiration": expiration}},
        headers={"Cache-Control": "no-store"})



routes = [
    Route("/auth/token", auth_token, methods=["GET"]),
]
