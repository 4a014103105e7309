"""Subscriptions, native admin API: /api/v1/subscriptions (docs/subscriptions.md).

The credential (`secret`) is write-only: answers say `has_secret`, never the value,
and no error message echoes it. `alias` and `type` are fixed at creation (the alias
is the folder the pull owns, and the tasks' commands name it).
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids
from ..db import rows
from ..db import subscriptions as subs
from ..operations import subscriptions as ops
from ..subscriptions.spec import DEFAULT_EXTENSIONS, Caps, validate
from .context import runtime_of
from .errors import Invalid, Missing, StateConflict, decode_body, json_response

UNSET = msgspec.UNSET


class SubscriptionIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    type: str
    url: str
    alias: str
    branch: str | None = None
    schedule: str | None = None
    default_schedule: str | None = None
    whitelist: str = ""
    blacklist: str = ""
    dependences: str = ""
    extensions: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_EXTENSIONS))
    auto_add: bool = True
    auto_delete: bool = True
    vanished: str = "delete"
    sub_before: str = ""
    sub_after: str = ""
    enabled: bool = True
    username: str | None = None
    secret: str | None = None
    caps: Caps = msgspec.field(default_factory=Caps)


class SubscriptionPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | msgspec.UnsetType = UNSET
    url: str | msgspec.UnsetType = UNSET
    branch: str | msgspec.UnsetType | None = UNSET
    schedule: str | msgspec.UnsetType | None = UNSET
    default_schedule: str | msgspec.UnsetType | None = UNSET
    whitelist: str | msgspec.UnsetType = UNSET
    blacklist: str | msgspec.UnsetType = UNSET
    dependences: str | msgspec.UnsetType = UNSET
    extensions: list[str] | msgspec.UnsetType = UNSET
    auto_add: bool | msgspec.UnsetType = UNSET
    auto_delete: bool | msgspec.UnsetType = UNSET
    vanished: str | msgspec.UnsetType = UNSET
    sub_before: str | msgspec.UnsetType = UNSET
    sub_after: str | msgspec.UnsetType = UNSET
    enabled: bool | msgspec.UnsetType = UNSET
    username: str | msgspec.UnsetType | None = UNSET
    secret: str | msgspec.UnsetType | None = UNSET
    caps: Caps | msgspec.UnsetType = UNSET


def view(sub: subs.Subscription) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(sub)
    body.pop("sync_run_id", None)
    body["sync_pending"] = sub.sync_run_id is not None
    return body


def _sub_id(request: Request) -> str:
    sub_id: str = request.path_params["sub_id"]
    if not ids.is_uuid7(sub_id):
        raise Missing("subscription not found", params={"what": "subscription"})
    return sub_id


async def list_(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        items = await subs.list_all(tx)
    return json_response({"items": [view(s) for s in items]})


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), SubscriptionIn)
    fields = validate(msgspec.structs.asdict(body))
    try:
        sub = await ops.create(runtime_of(request), fields)
    except ops.AliasTaken as exc:
        raise Invalid(str(exc), field="alias", code="ALIAS_TAKEN") from None
    return json_response(view(sub), 201)


async def get(request: Request) -> Response:
    sub_id = _sub_id(request)
    try:
        async with runtime_of(request).db.read() as tx:
            sub = await subs.get(tx, sub_id)
    except rows.NotFound:
        raise Missing("subscription not found", params={"what": "subscription"}) from None
    return json_response(view(sub))


async def update(request: Request) -> Response:
    sub_id = _sub_id(request)
    patch = decode_body(await request.body(), SubscriptionPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    try:
        sub = await ops.update(runtime_of(request), sub_id, validate(fields))
    except rows.NotFound:
        raise Missing("subscription not found", params={"what": "subscription"}) from None
    return json_response(view(sub))


async def delete(request: Request) -> Response:
    try:
        await ops.delete(runtime_of(request), _sub_id(request))
    except rows.NotFound:
        raise Missing("subscription not found", params={"what": "subscription"}) from None
    return Response(status_code=204)


async def pull(request: Request) -> Response:
    try:
        run = await ops.pull_now(runtime_of(request), _sub_id(request))
    except rows.NotFound:
        raise Missing("subscription not found", params={"what": "subscription"}) from None
    except ops.PullBusy as exc:
        raise StateConflict(str(exc), code="PULL_BUSY") from None
    return json_response({"run_id": run.id, "status": str(run.status)}, 202)


routes = [
    Route("/subscriptions", list_, methods=["GET"]),
    Route("/subscriptions", create, methods=["POST"]),
    Route("/subscriptions/{sub_id}", get, methods=["GET"]),
    Route("/subscriptions/{sub_id}", update, methods=["PUT", "PATCH"]),
    Route("/subscriptions/{sub_id}", delete, methods=["DELETE"]),
    Route("/subscriptions/{sub_id}/pull", pull, methods=["POST"]),
]
