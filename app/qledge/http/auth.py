"""Bearer-token authentication for /api/* (constant-time comparison)."""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from . import tickets
from .errors import Unauthorized, handle_api_error


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    return token.strip()


def require_admin(request: Request) -> None:
    token = bearer(request)
    expected: str = request.app.state.admin_token
    if not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("invalid token")


class AdminAuth:
    """ASGI middleware: every request under /api/ needs the admin bearer token
    (or, for GET /api/v1/runs/{id}/log/stream only, a valid stream ticket)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            request = Request(scope)
            try:
                # The live-log SSE route also accepts a single-use stream ticket
                # (EventSource cannot send headers; see http/tickets.py).
                if not tickets.admit_stream(request):
                    require_admin(request)
            except Unauthorized as exc:
                response = await handle_api_error(request, exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
