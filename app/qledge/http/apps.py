"""OpenAPI apps (QingLong's "应用设置"), native admin API: /api/v1/apps.

An app is a client_id/client_secret pair with scopes; a client trades the pair
for a Bearer token at GET /open/auth/token. The secret is shown once, at
creation; only its SHA-256 is stored (it is 32 random bytes, so a plain hash
is enough) and it is compared in constant time. Deleting an app revokes its
tokens. What an app may be is apps/spec.py's.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids, operations
from ..apps.spec import (  # noqa: F401  (RUNS_CODE, SCOPES: read here by the tests)
    RUNS_CODE,
    SCOPES,
    SCOPES_RUN_CODE,
    digest,
    new_client_id,
    new_secret,
    validated,
)
from ..clock import now_ms
from ..db import apps
from .context import runtime_of
from .errors import Missing, StateConflict, decode_body, json_response


class AppIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    scopes: list[str]


def app_view(app: apps.App) -> dict[str, Any]:
    return {"id": app.id, "name": app.name, "client_id": app.client_id, "scopes": app.scopes,
            "created_at_ms": app.created_at_ms, "live_tokens": app.live_tokens}


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), AppIn)
    name, scopes = validated(body.name, body.scopes)
    secret = new_secret()
    try:
        app = await operations.create_app(runtime_of(request), name=name, client_id=new_client_id(),
                                          secret_hash=digest(secret), scopes=scopes)
    except operations.NameTaken:
        raise StateConflict(f"an app named {name!r} exists", field="name",
                            code="NAME_TAKEN") from None
    # The only time the secret leaves the appliance.
    return json_response({**app_view(app), "client_secret": secret,
                          "warnings": scope_warnings(scopes)}, 201,
                         headers={"Cache-Control": "no-store"})


def scope_warnings(scopes: list[str]) -> list[dict[str, Any]]:
    """What the granted scopes really allow, said when they are granted: a client
    given one of these holds what a task holds, not a narrow API right. `code` lets a
    UI say it in its own language; `message` is the English."""
    granted = [s for s in RUNS_CODE if s in scopes]
    if not granted:
        return []
    return [{"code": SCOPES_RUN_CODE, "scopes": granted,
             "message": (f"the {', '.join(granted)} scope{'s' if len(granted) > 1 else ''}"
                         " amount to running any code as the task user, which reads every"
                         " env value (global and each task's own); give this app's"
                         " credentials only to a client you would trust with the scripts"
                         " folder (docs/security.md)")}]


async def list_(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        found = await apps.list_apps(tx, now_ms())
    return json_response({"items": [app_view(a) for a in found]})


def _app_id(request: Request) -> str:
    app_id: str = request.path_params["app_id"]
    if not ids.is_uuid7(app_id):
        raise Missing("app not found", params={"what": "app"})
    return app_id


async def get(request: Request) -> Response:
    app_id = _app_id(request)
    async with runtime_of(request).db.read() as tx:
        app = await apps.get_app(tx, app_id, now_ms())
    return json_response(app_view(app))


async def delete(request: Request) -> Response:
    await operations.delete_app(runtime_of(request), _app_id(request))
    return Response(status_code=204)


routes = [
    Route("/apps", create, methods=["POST"]),
    Route("/apps", list_, methods=["GET"]),
    Route("/apps/{app_id}", get, methods=["GET"]),
    Route("/apps/{app_id}", delete, methods=["DELETE"]),
]
