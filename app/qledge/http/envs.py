"""Environment variables (QingLong "envs"), native admin API: /api/v1/envs.

Enabled envs are injected into every task's environment (a task's own `env`
wins); several enabled envs with one name are joined with '&' like QingLong.
Values are returned here (this is the admin API) but never logged or put in
events.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids, operations
from ..db import envs
from ..envs.spec import validate_env
from . import inputs
from .context import runtime_of
from .errors import Invalid, Missing, decode_body, json_response

MAX_IMPORT = 1000

UNSET = msgspec.UNSET


class EnvIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    value: str
    remarks: str | None = ""
    enabled: bool = True


class EnvPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | msgspec.UnsetType = UNSET
    value: str | msgspec.UnsetType = UNSET
    remarks: str | msgspec.UnsetType | None = UNSET
    enabled: bool | msgspec.UnsetType = UNSET


class EnvsIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """An import: every item is created, or none (docs/api.md)."""
    items: list[EnvIn]


class BulkIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    action: Literal["enable", "disable", "delete"]
    ids: list[str]


class MoveIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    direction: Literal["up", "down"]


def env_view(env: envs.EnvVar) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(env)
    return body


def _env_id(request: Request) -> str:
    env_id: str = request.path_params["env_id"]
    if not ids.is_uuid7(env_id):
        raise Missing("env not found", params={"what": "env"})
    return env_id


async def list_(request: Request) -> Response:
    search = inputs.query_text(request, "search")
    async with runtime_of(request).db.read() as tx:
        found = await envs.list_envs(tx, search)
    return json_response({"items": [env_view(e) for e in found]})


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), EnvIn)
    fields = validate_env(msgspec.structs.asdict(body))
    (env,) = await operations.create_envs(runtime_of(request), [fields])
    return json_response(env_view(env), 201)


async def get(request: Request) -> Response:
    env_id = _env_id(request)
    async with runtime_of(request).db.read() as tx:
        env = await envs.get_env(tx, env_id)
    return json_response(env_view(env))


async def update(request: Request) -> Response:
    env_id = _env_id(request)
    patch = decode_body(await request.body(), EnvPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    env = await operations.update_env(runtime_of(request), env_id, validate_env(fields))
    return json_response(env_view(env))


async def delete(request: Request) -> Response:
    await operations.delete_envs(runtime_of(request), [_env_id(request)])
    return Response(status_code=204)


async def import_(request: Request) -> Response:
    body = decode_body(await request.body(), EnvsIn)
    if not body.items or len(body.items) > MAX_IMPORT:
        raise Invalid(f"send 1 to {MAX_IMPORT} items", field="items", code="COUNT_OUT_OF_RANGE",
                      params={"min": 1, "max": MAX_IMPORT})
    items = [validate_env(msgspec.structs.asdict(e), f"items[{i}].")
             for i, e in enumerate(body.items)]
    created = await operations.create_envs(runtime_of(request), items)
    return json_response({"items": [env_view(e) for e in created]}, 201)


async def bulk(request: Request) -> Response:
    """Enable, disable or delete several envs at once: all of them or none (NotFound)."""
    body = decode_body(await request.body(), BulkIn)
    if not body.ids or len(body.ids) > MAX_IMPORT or not all(map(ids.is_uuid7, body.ids)):
        raise Invalid(f"ids must be 1 to {MAX_IMPORT} env ids", field="ids",
                      code="COUNT_OUT_OF_RANGE",
                      params={"min": 1, "max": MAX_IMPORT})
    rt = runtime_of(request)
    if body.action == "delete":
        await operations.delete_envs(rt, body.ids)
    else:
        await operations.set_envs_enabled(rt, body.ids, body.action == "enable")
    return json_response({"action": body.action, "count": len(set(body.ids))})


async def move(request: Request) -> Response:
    env_id = _env_id(request)
    body = decode_body(await request.body(), MoveIn)
    env = await operations.move_env(runtime_of(request), env_id, body.direction == "up")
    return json_response(env_view(env))


routes = [
    Route("/envs", list_, methods=["GET"]),
    Route("/envs", create, methods=["POST"]),
    Route("/envs/import", import_, methods=["POST"]),
    Route("/envs/bulk", bulk, methods=["POST"]),
    Route("/envs/{env_id}/move", move, methods=["POST"]),
    Route("/envs/{env_id}", get, methods=["GET"]),
    Route("/envs/{env_id}", update, methods=["PUT", "PATCH"]),
    Route("/envs/{env_id}", delete, methods=["DELETE"]),
]
