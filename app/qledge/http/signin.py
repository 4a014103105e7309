"""/api/v1/auth/*: the panel's sign-in, sessions, password, TOTP and login log
(docs/api.md, "Signing in"). The rules are auth/'s; this decodes and encodes."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..db.signin import Session
from .auth import (
    COOKIE,
    SESSION_KEY,
    accounts_of,
    check_origin,
    clear_session_cookie,
    has_admin_token,
    set_session_cookie,
)
from .errors import Forbidden, decode_body, json_response
from .inputs import query_int


class LoginIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    password: str | None = None
    code: str | None = None
    token: str | None = None


class PasswordIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    new: str
    current: str | None = None


class CodeIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    code: str


class AdminTokenRequired(Forbidden):
    code = "ADMIN_TOKEN_REQUIRED"


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _current(request: Request) -> Session | None:
    session: Session | None = request.scope.get(SESSION_KEY)
    return session


async def state(request: Request) -> Response:
    accounts = accounts_of(request)
    st = await accounts.state()
    value = request.cookies.get(COOKIE)
    session = await accounts.session(value) if value else None
    return json_response({"password_set": st.password_set, "totp_enabled": st.totp_enabled,
                          "signed_in": session is not None,
                          "method": session.method if session else None})


async def login(request: Request) -> Response:
    # A browser's sign-in must come from this origin too (login CSRF); a client that
    # sends neither Origin nor Sec-Fetch-Site (curl, a script) is not a browser.
    if "origin" in request.headers or "sec-fetch-site" in request.headers:
        check_origin(request)
    body = decode_body(await request.body(), LoginIn)
    accounts = accounts_of(request)
    value, method = await accounts.sign_in(
        client=_client(request), user_agent=request.headers.get("user-agent", ""),
        password=body.password, code=body.code, token=body.token)
    st = await accounts.state()
    response = json_response({"method": method, "password_set": st.password_set,
                              "totp_enabled": st.totp_enabled})
    set_session_cookie(request, response, value, accounts.max_ms // 1000)
    return response


async def logout(request: Request) -> Response:
    value = request.cookies.get(COOKIE)
    if value:
        await accounts_of(request).sign_out(value)
    response = Response(status_code=204)
    clear_session_cookie(request, response)
    return response


async def logout_everywhere(request: Request) -> Response:
    ended = await accounts_of(request).sign_out_everywhere()
    response = json_response({"ended": ended})
    clear_session_cookie(request, response)
    return response


async def sessions(request: Request) -> Response:
    mine = _current(request)
    items = await accounts_of(request).sessions()
    return json_response({"items": [
        {"created_at_ms": s.created_at_ms, "last_seen_ms": s.last_seen_ms,
         "client": s.client, "agent": s.agent, "method": s.method,
         "current": mine is not None and s.id_hash == mine.id_hash} for s in items]})


async def logins(request: Request) -> Response:
    limit = query_int(request, "limit", 50, 1, 500)
    items = await accounts_of(request).logins(limit)
    return json_response({"items": items})


async def password(request: Request) -> Response:
    body = decode_body(await request.body(), PasswordIn)
    mine = _current(request)
    await accounts_of(request).set_password(body.new, current=body.current,
                                            keep_session=mine.id_hash if mine else "")
    return Response(status_code=204)


async def totp_begin(request: Request) -> Response:
    secret, uri = await accounts_of(request).totp_begin()
    return json_response({"secret": secret, "uri": uri})


async def totp_confirm(request: Request) -> Response:
    body = decode_body(await request.body(), CodeIn)
    codes = await accounts_of(request).totp_confirm(body.code)
    return json_response({"recovery_codes": codes})


async def totp_reset(request: Request) -> Response:
    if not has_admin_token(request):
        raise AdminTokenRequired("turning the second factor off needs the admin token"
                                 " (Authorization: Bearer), or `qledge passwd --reset-totp`")
    await accounts_of(request).totp_reset()
    return Response(status_code=204)


routes = [
    Route("/auth/state", state, methods=["GET"]),
    Route("/auth/login", login, methods=["POST"]),
    Route("/auth/logout", logout, methods=["POST"]),
    Route("/auth/logout-everywhere", logout_everywhere, methods=["POST"]),
    Route("/auth/sessions", sessions, methods=["GET"]),
    Route("/auth/logins", logins, methods=["GET"]),
    Route("/auth/password", password, methods=["POST"]),
    Route("/auth/totp", totp_begin, methods=["POST"]),
    Route("/auth/totp", totp_reset, methods=["DELETE"]),
    Route("/auth/totp/confirm", totp_confirm, methods=["POST"]),
]
