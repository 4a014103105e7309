"""Dependencies, native admin API: /api/v1/dependencies (docs/dependencies.md).

Adding, reinstalling, removing and rebuilding answer 202 with the run that does it:
its live log is the run's (`/api/v1/runs/{id}/log/stream`). A package's `status` is
derived from that run; `installed_version` is read from the folder.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids
from ..db import dependencies as deps
from ..db import rows
from ..dependencies.spec import MAX_SPECS, SpecError, package
from ..operations import dependencies as ops
from ..runtime.lifecycle import Runtime
from . import inputs
from .context import runtime_of
from .errors import Invalid, Missing, StateConflict, decode_body, json_response

MAX_REMARK = 1000


class AddIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    type: str
    specs: list[str]
    remark: str | None = None


class IdsIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    ids: list[str]


class TypeIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    type: str


async def views(rt: Runtime, items: list[deps.Dependency]) -> list[dict[str, Any]]:
    found = await ops.installed_versions(rt, items)
    return [{"id": d.id, "num": d.num, "type": d.type, "name": d.name, "spec": d.spec,
             "action": d.action, "status": ops.derived_status(d), "remark": d.remark,
             "last_run_id": d.last_run_id, "run_status": d.run_status,
             "installed_version": found.get(d.id), "created_at_ms": d.created_at_ms,
             "updated_at_ms": d.updated_at_ms} for d in items]


def checked_specs(eco: str, specs: list[str], field: str = "specs") -> list[str]:
    """The specs, or 422 naming the first refused one (and why)."""
    if not specs:
        raise Invalid("specs must name at least one package", field=field, code="NO_PACKAGES")
    if len(specs) > MAX_SPECS:
        raise Invalid(f"at most {MAX_SPECS} packages per request", field=field,
                      code="TOO_MANY", params={"max": MAX_SPECS})
    try:
        kind = ops.check_ecosystem(eco)
    except ops.Unavailable as exc:
        raise Invalid(str(exc), field="type", code="ECOSYSTEM_UNAVAILABLE") from None
    for i, spec in enumerate(specs):
        try:
            package(kind, spec)
        except SpecError as exc:
            raise Invalid(str(exc), field=f"{field}[{i}]", code="BAD_PACKAGE_SPEC") from None
    return specs


def _ids(raw: list[str]) -> list[str]:
    if not raw or len(raw) > 1000:
        raise Invalid("ids must list 1 to 1000 dependency ids", field="ids",
                      code="COUNT_OUT_OF_RANGE", params={"min": 1, "max": 1000})
    for dep_id in raw:
        if not ids.is_uuid7(dep_id):
            raise Missing("dependency not found", params={"what": "dependency"})
    return raw


async def list_(request: Request) -> Response:
    rt = runtime_of(request)
    kind = inputs.query_text(request, "type")
    search = inputs.query_text(request, "search")
    async with rt.db.read() as tx:
        items = await deps.list_all(tx, type_=kind or None, search=search)
    return json_response({"items": await views(rt, items),
                          "environments": await ops.environments(rt),
                          "mirrors": ops.mirrors(rt)})


async def add(request: Request) -> Response:
    body = decode_body(await request.body(), AddIn)
    specs = checked_specs(body.type, body.specs)
    remark = None if body.remark is None else inputs.text(body.remark, "remark", MAX_REMARK)
    rt = runtime_of(request)
    queued = await ops.add(rt, body.type, specs, remark)
    return json_response({"items": await views(rt, queued.items),
                          "run_id": queued.run_ids[0]}, 202)


async def get(request: Request) -> Response:
    dep_id: str = request.path_params["dep_id"]
    if not ids.is_uuid7(dep_id):
        raise Missing("dependency not found", params={"what": "dependency"})
    rt = runtime_of(request)
    try:
        async with rt.db.read() as tx:
            dep = await deps.get(tx, dep_id)
    except rows.NotFound:
        raise Missing("dependency not found", params={"what": "dependency"}) from None
    return json_response((await views(rt, [dep]))[0])


async def _act(request: Request, action: str) -> Response:
    body = decode_body(await request.body(), IdsIn)
    rt = runtime_of(request)
    try:
        queued = await ops.act(rt, _ids(body.ids), action)
    except rows.NotFound:
        raise Missing("dependency not found", params={"what": "dependency"}) from None
    except ops.Unavailable as exc:
        raise Invalid(str(exc), field="ids", code="ECOSYSTEM_UNAVAILABLE") from None
    return json_response({"items": await views(rt, queued.items),
                          "run_ids": queued.run_ids}, 202)


async def reinstall(request: Request) -> Response:
    return await _act(request, "install")


async def remove(request: Request) -> Response:
    return await _act(request, "remove")


async def rebuild(request: Request) -> Response:
    body = decode_body(await request.body(), TypeIn)
    try:
        run_id = await ops.rebuild(runtime_of(request), body.type)
    except ops.Unavailable as exc:
        raise Invalid(str(exc), field="type", code="ECOSYSTEM_UNAVAILABLE") from None
    return json_response({"run_id": run_id}, 202)


async def forget(request: Request) -> Response:
    dep_id: str = request.path_params["dep_id"]
    try:
        await ops.forget(runtime_of(request), _ids([dep_id]))
    except rows.NotFound:
        raise Missing("dependency not found", params={"what": "dependency"}) from None
    except ops.StillInstalled as exc:
        raise StateConflict(str(exc), code="DEPENDENCY_IN_USE") from None
    return Response(status_code=204)


routes = [
    Route("/dependencies", list_, methods=["GET"]),
    Route("/dependencies", add, methods=["POST"]),
    Route("/dependencies/reinstall", reinstall, methods=["POST"]),
    Route("/dependencies/remove", remove, methods=["POST"]),
    Route("/dependencies/rebuild", rebuild, methods=["POST"]),
    Route("/dependencies/{dep_id}", get, methods=["GET"]),
    Route("/dependencies/{dep_id}", forget, methods=["DELETE"]),
]
