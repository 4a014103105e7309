"""QingLong's /open/envs: global envs by their `num` (docs/qinglong-compat.md)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import limits, operations
from ...db import envs
from ...envs.spec import env_name, validate_env
from ...runtime.lifecycle import Runtime
from .. import inputs
from ..context import runtime_of
from ..errors import (
    BadRequest,
    Missing,
)
from .auth import scoped
from .wire import both, decode, id_list, ids_body, iso, ok, path_id, timestamp, unsupported

# -- envs ----------------------------------------------------------------------------------

class EnvIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    value: str
    remarks: str | None = ""
    labels: list[str] | None = None


class EnvPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: int | str
    name: str | None = None
    value: str | None = None
    remarks: str | None = None
    labels: list[str] | None = None


def env_view(env: envs.EnvVar) -> dict[str, Any]:
    return {
        "id": env.num,
        "name": env.name,
        "value": env.value,
        "remarks": env.remarks,
        "status": 0 if env.enabled else 1,
        "position": env.position,
        "timestamp": timestamp(env.updated_at_ms),
        "isPinned": 0,
        "labels": [],
        "createdAt": iso(env.created_at_ms),
        "updatedAt": iso(env.updated_at_ms),
        "qledge_id": env.id,
    }


def _env_fields(fields: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    return validate_env(fields, prefix)  # a FieldError answers 400 here (http/errors.py)


@scoped("envs")
async def envs_list(request: Request) -> Response:
    search = inputs.query_text(request, "searchValue", BadRequest).strip()
    async with runtime_of(request).db.read() as tx:
        found = await envs.list_envs(tx, search)
    return ok([env_view(e) for e in found])


@scoped("envs")
async def envs_get(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        found = await envs.envs_by_nums(tx, [path_id(request)])
    if not found:
        raise Missing("env not found")
    return ok(env_view(found[0]))


@scoped("envs")
async def envs_create(request: Request) -> Response:
    items = decode(await request.body(), list[EnvIn])
    if not items:
        raise BadRequest("body must be a non-empty array of {name, value, remarks}")
    if len(items) > limits.MAX_IDS:
        raise BadRequest(f"{len(items)} envs in one request; at most {limits.MAX_IDS}")
    checked = []
    for i, item in enumerate(items):
        unsupported(item, ("labels",))
        fields = {"name": item.name, "value": item.value, "remarks": item.remarks or ""}
        checked.append(_env_fields(fields, f"[{i}]." if len(items) > 1 else ""))
    created = await operations.create_envs(runtime_of(request), checked)
    return ok([env_view(e) for e in created])


@scoped("envs")
async def envs_update(request: Request) -> Response:
    body = decode(await request.body(), EnvPatch)
    unsupported(body, ("labels",))
    num = id_list([body.id], "id")[0]
    fields = _env_fields({k: getattr(body, k) for k in ("name", "value", "remarks")
                          if getattr(body, k) is not None})
    rt = runtime_of(request)
    (env_id,) = await _env_ids(rt, [num])
    return ok(env_view(await operations.update_env(rt, env_id, fields)))


@scoped("envs")
async def envs_delete(request: Request) -> Response:
    rt = runtime_of(request)
    env_ids = await _env_ids(rt, await ids_body(request), missing_ok=True)
    await operations.delete_envs(rt, env_ids, missing_ok=True)  # unknown ids: nothing to do
    return ok()


async def _envs_enabled(request: Request, enabled: bool) -> Response:
    rt = runtime_of(request)
    env_ids = await _env_ids(rt, await ids_body(request))
    await operations.set_envs_enabled(rt, env_ids, enabled)
    return ok()


async def _env_ids(rt: Runtime, nums: list[int], *, missing_ok: bool = False) -> list[str]:
    """The envs of these QingLong ids; 404 naming the unknown ones unless `missing_ok`."""
    async with rt.db.read() as tx:
        found = {e.num: e.id for e in await envs.envs_by_nums(tx, nums)}
    missing = [n for n in nums if n not in found]
    if missing and not missing_ok:
        raise Missing(f"env {', '.join(map(str, missing))} not found")
    return [found[n] for n in nums if n in found]


class EnvRename(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    ids: list[Any]
    name: str


@scoped("envs")
async def envs_rename(request: Request) -> Response:
    """QingLong's PUT /envs/name: give every listed env one name (back/api/env.ts)."""
    body = decode(await request.body(), EnvRename)
    nums = id_list(body.ids)
    name = env_name(body.name, "name")
    rt = runtime_of(request)
    await operations.rename_envs(rt, await _env_ids(rt, nums), name)
    return ok()


@scoped("envs")
async def envs_disable(request: Request) -> Response:
    return await _envs_enabled(request, False)


@scoped("envs")
async def envs_enable(request: Request) -> Response:
    return await _envs_enabled(request, True)



routes = [
    *both("/envs", envs_list, ["GET"]),
    *both("/envs", envs_create, ["POST"]),
    *both("/envs", envs_update, ["PUT"]),
    *both("/envs", envs_delete, ["DELETE"]),
    Route("/envs/disable", envs_disable, methods=["PUT"]),
    Route("/envs/enable", envs_enable, methods=["PUT"]),
    Route("/envs/name", envs_rename, methods=["PUT"]),
    Route("/envs/{num:digits}", envs_get, methods=["GET"]),
]
