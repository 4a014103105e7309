"""Who may call /api/*: the admin bearer token (constant-time comparison), a stream
ticket on the live-log route, or the panel's session cookie — which, on a request that
changes something, must also come from the panel's own origin (CSRF, docs/security.md)."""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth import Accounts
from . import tickets
from .errors import ApiError, Forbidden, Unauthorized, render

COOKIE = "qledge_session"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Reachable without a credential: what the sign-in page needs.
PUBLIC = frozenset({"/api/v1/auth/state", "/api/v1/auth/login"})
SESSION_KEY = "qledge.session"  # the scope key of the session a cookie request came with


class CrossOrigin(Forbidden):
    code = "CSRF_REFUSED"


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)",
                           code="TOKEN_MISSING")
    return token.strip()


def require_admin(request: Request) -> None:
    token = bearer(request)
    expected: str = request.app.state.admin_token
    if not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("invalid token", code="TOKEN_INVALID")


def has_admin_token(request: Request) -> bool:
    try:
        require_admin(request)
    except Unauthorized:
        return False
    return True


def accounts_of(request: Request) -> Accounts:
    accounts: Accounts = request.app.state.accounts
    return accounts


def from_own_origin(request: Request) -> bool:
    """The browser says this request comes from a page of this origin:
    `Sec-Fetch-Site: same-origin`, or else an `Origin` whose host is this `Host`.
    Neither header (not a browser, or a very old one) counts as foreign."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return False
    return urlsplit(origin).netloc == request.headers.get("host", "")


def check_origin(request: Request) -> None:
    if not from_own_origin(request):
        raise CrossOrigin("refused: a request authenticated by the session cookie must"
                          " come from the panel's own origin (Origin / Sec-Fetch-Site)")


def tls(request: Request) -> bool:
    """Served over TLS: directly, or through a proxy trusted to say so."""
    if request.url.scheme == "https":
        return True
    trusted: bool = request.app.state.trust_forwarded_proto
    proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return trusted and proto == "https"


def set_session_cookie(request: Request, response: Response, value: str,
                       max_age_s: int) -> None:
    response.set_cookie(COOKIE, value, max_age=max_age_s, path="/", httponly=True,
                        samesite="strict", secure=tls(request))


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                           secure=tls(request))


async def _admit(request: Request) -> None:
    if request.scope["path"] in PUBLIC:
        return
    # The live-log SSE route also accepts a single-use stream ticket
    # (EventSource cannot send headers; see http/tickets.py).
    if tickets.admit_stream(request):
        return
    value = request.cookies.get(COOKIE)
    if "authorization" in request.headers or not value:
        require_admin(request)
        return
    session = await accounts_of(request).session(value)
    if session is None:
        raise Unauthorized("the session has ended: sign in again", code="SESSION_ENDED")
    if request.method not in SAFE_METHODS:
        check_origin(request)
    request.scope[SESSION_KEY] = session  # the scope is this request's own


class AdminAuth:
    """ASGI middleware: every request under /api/ needs the admin bearer token, a live
    session cookie (same-origin for a change), or, for GET /api/v1/runs/{id}/log/stream
    only, a valid stream ticket."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            request = Request(scope)
            try:
                await _admit(request)
            except ApiError as exc:
                response = render(exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
