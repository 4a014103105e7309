"""QingLong's dependencies calls under /open/dependencies (scope `dependencies`;
docs/qinglong-compat.md, docs/dependencies.md).

QingLong's shapes: integer ids (the rows' `num`), `name` is the spec, `type` 0 nodejs,
1 python3, 2 linux (refused: see docs/dependencies.md), `status` its numbers
(installing 0, installed 1, installFailed 2, removing 3, removed 4, removeFailed 5,
queued 6, cancelled 7). The work is the native operations': every change is a run.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...cron import from_ms, local_zone
from ...db import attempts, rows
from ...db import dependencies as deps
from ...dependencies.spec import MAX_SPECS, QINGLONG_TYPES, SpecError, package, qinglong_status
from ...launch import logs
from ...operations import dependencies as ops
from ...runtime.lifecycle import Runtime
from .. import inputs
from ..context import runtime_of
from ..errors import BadRequest, Missing, StateConflict
from .auth import scoped
from .wire import decode, ok

TYPE_NUMBER = {"node": 0, "python": 1}
TYPE_NAMES = {"nodejs": "node", "python3": "python", "linux": "linux"}


class DepIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    type: int
    remark: str | None = ""


class DepPut(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: int | str
    name: str
    type: int
    remark: str | None = None


def view(d: deps.Dependency) -> dict[str, Any]:
    def iso(ms: int) -> str:
        return from_ms(ms, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"

    return {"id": d.num, "name": d.spec, "type": TYPE_NUMBER[d.type],
            "status": qinglong_status(d.action, ops.derived_status(d)), "remark": d.remark,
            "timestamp": from_ms(d.updated_at_ms, local_zone()).strftime(
                "%a %b %d %Y %H:%M:%S GMT%z (%Z)"),
            "createdAt": iso(d.created_at_ms), "updatedAt": iso(d.updated_at_ms),
            "qledge_id": d.id, "run_id": d.last_run_id}


def _kind(number: int, field: str) -> str:
    kind = QINGLONG_TYPES.get(number)
    if kind is None:
        raise BadRequest("type must be 0 (nodejs), 1 (python3) or 2 (linux)", field=field)
    try:
        return ops.check_ecosystem(kind)
    except ops.Unavailable as exc:
        raise BadRequest(str(exc), field=field) from None


async def _ids(request: Request) -> list[str]:
    nums = inputs.id_list(decode(await request.body(), list[Any]), "ids", BadRequest)
    try:
        async with runtime_of(request).db.read() as tx:
            return await deps.ids_by_nums(tx, nums)
    except rows.NotFound:
        raise Missing("dependency not found") from None


async def _views(rt: Runtime, dep_ids: list[str]) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        return [view(d) for d in await deps.by_ids(tx, dep_ids)]


@scoped("dependencies")
async def deps_list(request: Request) -> Response:
    search = inputs.query_text(request, "searchValue", BadRequest)
    raw_type = inputs.query_text(request, "type", BadRequest)
    if raw_type and raw_type not in TYPE_NAMES:
        raise BadRequest("type must be nodejs, python3 or linux", field="type")
    async with runtime_of(request).db.read() as tx:
        found = await deps.list_all(tx, type_=TYPE_NAMES.get(raw_type), search=search)
    return ok([view(d) for d in found])


@scoped("dependencies")
async def deps_get(request: Request) -> Response:
    num = inputs.path_int(request, "num", "id", BadRequest)
    rt = runtime_of(request)
    try:
        async with rt.db.read() as tx:
            dep = (await deps.by_ids(tx, await deps.ids_by_nums(tx, [num])))[0]
            tried = await attempts.attempts_of_run(tx, dep.last_run_id) \
                if dep.last_run_id else []
    except rows.NotFound:
        raise Missing("dependency not found") from None
    text: list[str] = []
    if tried:
        data, _ = await rt.files.run(logs.tail, rt.settings.logs_path, tried[-1].log_path,
                                     rt.settings.log_read_limit)
        text = [data.decode("utf-8", "replace")]
    return ok({**view(dep), "log": text})


@scoped("dependencies")
async def deps_create(request: Request) -> Response:
    items = decode(await request.body(), list[DepIn])
    if not items or len(items) > MAX_SPECS:
        raise BadRequest(f"give 1 to {MAX_SPECS} dependencies", field="name")
    groups: dict[str, list[DepIn]] = {}
    for i, item in enumerate(items):
        kind = _kind(item.type, f"[{i}].type")
        try:
            package(kind, item.name)
        except SpecError as exc:
            raise BadRequest(str(exc), field=f"[{i}].name") from None
        if item.remark:
            inputs.text(item.remark, f"[{i}].remark", 1000, error=BadRequest)
        groups.setdefault(kind, []).append(item)
    rt = runtime_of(request)
    made: list[str] = []
    for kind, group in groups.items():
        remark = group[0].remark or None  # QingLong's panel sends one remark for all
        queued = await ops.add(rt, kind, [g.name for g in group], remark)
        made += [d.id for d in queued.items]
    return ok(await _views(rt, made))


@scoped("dependencies")
async def deps_update(request: Request) -> Response:
    body = decode(await request.body(), DepPut)
    num = inputs.id_list([body.id], "id", BadRequest)[0]
    kind = _kind(body.type, "type")
    rt = runtime_of(request)
    try:
        async with rt.db.read() as tx:
            dep_id = (await deps.ids_by_nums(tx, [num]))[0]
            dep = await deps.get(tx, dep_id)
        if dep.type != kind:
            raise BadRequest("type cannot change: add a new dependency", field="type")
        queued = await ops.change(rt, dep_id, body.name, body.remark)
    except rows.NotFound:
        raise Missing("dependency not found") from None
    except SpecError as exc:
        raise BadRequest(str(exc), field="name") from None
    except ops.StillInstalled as exc:
        raise StateConflict(str(exc)) from None
    return ok(view(queued.items[0]))


async def _act(request: Request, action: str) -> Response:
    dep_ids = await _ids(request)
    rt = runtime_of(request)
    try:
        await ops.act(rt, dep_ids, action)
    except ops.Unavailable as exc:
        raise BadRequest(str(exc), field="ids") from None
    return ok(await _views(rt, dep_ids))


@scoped("dependencies")
async def deps_remove(request: Request) -> Response:
    """Uninstall (also `/force`: qledge keeps the row, `removed` or failed; forget it
    with DELETE /api/v1/dependencies/{id})."""
    return await _act(request, "remove")


@scoped("dependencies")
async def deps_reinstall(request: Request) -> Response:
    return await _act(request, "install")


@scoped("dependencies")
async def deps_cancel(request: Request) -> Response:
    await ops.cancel(runtime_of(request), await _ids(request))
    return ok()


routes = [
    *(Route(p, deps_list, methods=["GET"]) for p in ("/dependencies", "/dependencies/")),
    *(Route(p, deps_create, methods=["POST"]) for p in ("/dependencies", "/dependencies/")),
    *(Route(p, deps_update, methods=["PUT"]) for p in ("/dependencies", "/dependencies/")),
    *(Route(p, deps_remove, methods=["DELETE"]) for p in ("/dependencies", "/dependencies/",
                                                         "/dependencies/force")),
    Route("/dependencies/reinstall", deps_reinstall, methods=["PUT"]),
    Route("/dependencies/cancel", deps_cancel, methods=["PUT"]),
    Route("/dependencies/{num:digits}", deps_get, methods=["GET"]),
]
