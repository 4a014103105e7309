"""The QingLong OpenAPI subset under /open/* (docs/qinglong-compat.md).

Same shapes as QingLong: `{"code": 200, "data": ...}` on success and
`{"code": <HTTP status>, "message": ...}` on errors (errors.handle_api_error).
Integer ids are the tasks' / envs' `num`; the native UUIDv7 ids are shown as
`qledge_id`. Authentication: `Authorization: Bearer <token>` with a token from
GET /open/auth/token (scopes of its app), or the admin token (every scope).
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import limits, operations
from ..apps.spec import digest, new_secret
from ..clock import now_ms
from ..cron import from_ms, local_zone
from ..db import apps, attempts, envs, rows, runs, tasks
from ..envs.spec import env_name, validate_env
from ..launch import logs
from ..model import ACTIVE_RUN, Overlap, Task, Trigger
from ..runtime.lifecycle import Runtime
from ..tasks import spec as task_spec
from ..tasks.writable import TaskFields
from . import _proxy, inputs
from . import tasks as native_tasks
from .context import runtime_of
from .errors import (
    BadRequest,
    Forbidden,
    Invalid,
    Missing,
    StateConflict,
    Unauthorized,
    decode_body,
    json_response,
)

TOKEN_TTL_S = 30 * 86400  # like QingLong
MAX_LIVE_TOKENS = 20  # per app; the oldest is revoked beyond this
MAX_LIST = limits.QL_MAX_LIST  # crons returned when no page/size is given
MAX_PAGE = limits.QL_MAX_PAGE
MAX_PAGE_SIZE = limits.QL_MAX_PAGE  # accepted; at most MAX_LIST are returned
T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


def ok(data: Any = msgspec.UNSET) -> Response:
    if data is msgspec.UNSET:
        return json_response({"code": 200})
    return json_response({"code": 200, "data": data})


def decode(data: bytes, kind: type[T]) -> T:
    """QingLong answers bad input with 400; the message names the field."""
    try:
        return decode_body(data, kind)
    except Invalid as exc:
        raise BadRequest(exc.message, field=exc.field) from exc


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


# -- helpers ---------------------------------------------------------------------------

def iso(ms: int) -> str:
    return from_ms(ms, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{ms % 1000:03d}Z"


def _timestamp(ms: int) -> str:
    """QingLong's `timestamp` is JavaScript's Date.toString() of the last save."""
    return from_ms(ms, local_zone()).strftime(
        "%a %b %d %Y %H:%M:%S GMT%z (%Z)")


def _id_list(raw: list[Any], field: str = "ids") -> list[int]:
    """QingLong (Joi.number()) also accepts numeric strings."""
    return inputs.id_list(raw, field, BadRequest)


def _path_id(request: Request) -> int:
    return inputs.path_int(request, "num", "id", BadRequest)


async def _ids_body(request: Request) -> list[int]:
    raw = decode(await request.body(), list[Any])
    return _id_list(raw)


def _unsupported(body: msgspec.Struct, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(body, name)
        if value not in (None, "", [], msgspec.UNSET):
            raise BadRequest(f"{name} is not supported by qledge", field=name)


# -- crons -------------------------------------------------------------------------------

STATUS_RUNNING, STATUS_IDLE, STATUS_DISABLED, STATUS_QUEUED = 0, 1, 2, 3
_UNSUPPORTED_CRON = ("sub_id", "task_before", "task_after", "log_name", "work_dir")


class CronIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    command: str
    schedule: str
    name: str | None = None
    labels: list[str] | None = None
    allow_multiple_instances: int | None = None
    sub_id: int | None = None
    extra_schedules: list[Any] | None = None
    task_before: str | None = None
    task_after: str | None = None
    log_name: str | None = None
    work_dir: str | None = None
    # qledge extension (QingLong clients neither send nor read it): where its runs go.
    qledge_placement: task_spec.PlacementIn | None = None


class CronPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: int | str
    command: str | None = None
    schedule: str | None = None
    name: str | None = None
    labels: list[str] | None = None
    allow_multiple_instances: int | None = None
    sub_id: int | None = None
    extra_schedules: list[Any] | None = None
    task_before: str | None = None
    task_after: str | None = None
    log_name: str | None = None
    work_dir: str | None = None
    qledge_placement: task_spec.PlacementIn | None = None  # None: unchanged


def cron_view(task: Task, summary: runs.RunSummary | None) -> dict[str, Any]:
    s = summary or runs.RunSummary()
    if s.running:
        status = STATUS_RUNNING
    elif s.queued:
        status = STATUS_QUEUED
    elif not task.enabled:
        status = STATUS_DISABLED
    else:
        status = STATUS_IDLE
    return {
        "id": task.num,
        "name": task.name,
        "command": task.command,
        "schedule": task.schedule,
        "timestamp": _timestamp(task.updated_at_ms),
        "saved": True,
        "status": status,
        "isSystem": 0,
        "pid": s.pid,
        "isDisabled": 0 if task.enabled else 1,
        "isPinned": 0,
        "log_path": s.log_path or "",
        "labels": task.labels,
        "last_running_time": round(s.last_duration_ms / 1000) if s.last_duration_ms else 0,
        "last_execution_time": s.last_started_at_ms // 1000 if s.last_started_at_ms else 0,
        "sub_id": None,
        "extra_schedules": [{"schedule": e} for e in task.extra_schedules] or None,
        "task_before": None,
        "task_after": None,
        "log_name": None,
        "allow_multiple_instances": 1 if task.overlap is Overlap.ALLOW else 0,
        "work_dir": None,
        "createdAt": iso(task.created_at_ms),
        "updatedAt": iso(task.updated_at_ms),
        # qledge extras (ignored by QingLong clients)
        "qledge_id": task.id,
        "timeout_s": task.timeout_s,
        "qledge_placement": native_tasks.placement_view(task.placement_node,
                                                        task.placement_labels),
    }


def _default_name(command: str) -> str:
    """The command's first line, as a name must be (no control characters)."""
    first = command.strip().splitlines()[0] if command.strip() else ""
    return inputs.without_controls(first).strip()[:limits.MAX_NAME] or "cron"


def _extra_schedules(items: list[Any]) -> list[str]:
    """QingLong's `[{"schedule": "..."}]` (plain strings accepted too)."""
    out = []
    for item in items:
        value = item.get("schedule") if isinstance(item, dict) else item
        if not isinstance(value, str) or not value.strip():
            raise BadRequest('extra_schedules must be a list of {"schedule": "<cron>"}',
                             field="extra_schedules")
        out.append(value)
    return out


def _task_fields(body: CronIn | CronPatch) -> TaskFields:
    fields: dict[str, Any] = {}
    for key in ("command", "schedule", "name", "labels"):
        value = getattr(body, key)
        if value is not None:
            fields[key] = value
    if body.allow_multiple_instances is not None:
        if body.allow_multiple_instances not in (0, 1):
            raise BadRequest("allow_multiple_instances must be 0 or 1",
                             field="allow_multiple_instances")
        # QingLong's 0 stops the running instance and starts the new one: `replace`
        # (through the fenced cancel); 1 runs them side by side.
        fields["overlap"] = "allow" if body.allow_multiple_instances else "replace"
    if body.extra_schedules is not None:
        fields["extra_schedules"] = _extra_schedules(body.extra_schedules)
    if body.qledge_placement is not None:
        fields["placement"] = body.qledge_placement
    if "schedule" in fields and not str(fields["schedule"]).strip():
        raise BadRequest("schedule must not be empty", field="schedule")
    return task_spec.validated(fields)


async def _views(rt: Runtime, found: list[Task]) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        summaries = await runs.run_summaries(tx, [t.id for t in found])
    return [cron_view(t, summaries.get(t.id)) for t in found]


@scoped("crons")
async def crons_list(request: Request) -> Response:
    rt = runtime_of(request)
    page = inputs.query_int(request, "page", 0, 0, MAX_PAGE, BadRequest)
    size = inputs.query_int(request, "size", 0, 0, MAX_PAGE_SIZE, BadRequest)
    offset, limit = 0, MAX_LIST
    if page and size:
        limit = min(size, MAX_LIST)
        offset = (page - 1) * size
    search = inputs.query_text(request, "searchValue", BadRequest).strip()
    async with rt.db.read() as tx:
        found, total = await tasks.search_tasks(tx, search, offset, limit)
    return ok({"data": await _views(rt, found), "total": total})


@scoped("crons")
async def crons_get(request: Request) -> Response:
    rt = runtime_of(request)
    async with rt.db.read() as tx:
        task = await tasks.get_task_by_num(tx, _path_id(request))
    return ok((await _views(rt, [task]))[0])


@scoped("crons")
async def crons_create(request: Request) -> Response:
    body = decode(await request.body(), CronIn)
    _unsupported(body, _UNSUPPORTED_CRON)
    fields = _task_fields(body)
    if fields.name is msgspec.UNSET:
        fields = msgspec.structs.replace(fields, name=_default_name(body.command))
    task = await operations.create_task(runtime_of(request), fields)
    return ok(cron_view(task, None))


@scoped("crons")
async def crons_update(request: Request) -> Response:
    rt = runtime_of(request)
    body = decode(await request.body(), CronPatch)
    _unsupported(body, _UNSUPPORTED_CRON)
    fields = _task_fields(body)
    (task,) = await _tasks_by_nums(rt, _id_list([body.id], "id"))
    task = await operations.update_task(rt, task.id, fields)
    return ok((await _views(rt, [task]))[0])


async def _tasks_by_nums(rt: Runtime, nums: list[int], *, missing_ok: bool = False
                         ) -> list[Task]:
    """The tasks of these QingLong ids; 404 naming the missing ones (then nothing is
    done), or without them when `missing_ok`."""
    found: list[Task] = []
    missing: list[int] = []
    async with rt.db.read() as tx:
        for num in nums:
            try:
                found.append(await tasks.get_task_by_num(tx, num))
            except rows.NotFound:
                missing.append(num)
    if missing and not missing_ok:
        raise Missing(f"cron {', '.join(map(str, missing))} not found")
    return found


@scoped("crons")
async def crons_delete(request: Request) -> Response:
    rt = runtime_of(request)
    # Deleting is idempotent: unknown ids are already gone.
    chosen = await _tasks_by_nums(rt, await _ids_body(request), missing_ok=True)
    try:
        await operations.delete_tasks(rt, [t.id for t in chosen])
    except operations.ActiveRun as exc:
        raise StateConflict(f"cron {exc.task.num} has an active run; stop it first") from exc
    return ok()


@scoped("crons")
async def crons_run(request: Request) -> Response:
    rt = runtime_of(request)
    for task in await _tasks_by_nums(rt, await _ids_body(request)):
        # concurrency: forbid and already queued/running: like QingLong, no error
        with contextlib.suppress(operations.ActiveRun):
            await operations.trigger(rt, task.id, Trigger.API)
    return ok()


@scoped("crons")
async def crons_stop(request: Request) -> Response:
    rt = runtime_of(request)
    for task in await _tasks_by_nums(rt, await _ids_body(request)):
        await operations.stop_task(rt, task.id)
    return ok()


async def _set_enabled(request: Request, enabled: bool) -> Response:
    rt = runtime_of(request)
    chosen = await _tasks_by_nums(rt, await _ids_body(request))
    await operations.set_tasks_enabled(rt, [t.id for t in chosen], enabled)
    return ok()


@scoped("crons")
async def crons_disable(request: Request) -> Response:
    return await _set_enabled(request, False)


@scoped("crons")
async def crons_enable(request: Request) -> Response:
    return await _set_enabled(request, True)


def _utf8_start(data: bytes) -> bytes:
    """Drop continuation bytes a tail cut may have left at the front."""
    cut = 0
    while cut < len(data) and cut < 3 and data[cut] & 0xC0 == 0x80:
        cut += 1
    return data[cut:]


@scoped("crons", "logs")
async def crons_log(request: Request) -> Response:
    rt = runtime_of(request)
    async with rt.db.read() as tx:
        task = await tasks.get_task_by_num(tx, _path_id(request))
    return await latest_log(rt, task.id)


async def latest_log(rt: Runtime, task_id: str | None) -> Response:
    """The latest run's log: its last `log_read_limit` bytes (1 MiB by default)."""
    async with rt.db.read() as tx:
        latest = (await runs.latest_runs_by_task(tx, [task_id])).get(task_id) \
            if task_id else None
        tried = await attempts.attempts_of_run(tx, latest.id) if latest else []
    if latest is None:
        return json_response({"code": 200, "data": "", "logStatus": "notFound"})
    active = latest.status in ACTIVE_RUN
    status = "running" if active else "completed"
    if not tried:
        return json_response({"code": 200, "data": "", "logStatus": status})
    peer = await _proxy.owner(rt, tried[-1])
    if peer is not None:
        # Fleet mode: the log is on the node that ran it; never an empty log that
        # looks complete when that node cannot answer.
        got = await _proxy.fetch_tail(rt, peer, tried[-1].id, rt.settings.log_read_limit)
        if got is None:
            return _proxy.unavailable(peer)
        data, offset = got
    else:
        data, offset = await rt.files.run(logs.tail, rt.settings.logs_path,
                                          tried[-1].log_path, rt.settings.log_read_limit)
    data = _utf8_start(data) if offset else data
    return json_response({"code": 200, "data": data.decode("utf-8", "replace"),
                          "logStatus": status})


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
        "timestamp": _timestamp(env.updated_at_ms),
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
        found = await envs.envs_by_nums(tx, [_path_id(request)])
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
        _unsupported(item, ("labels",))
        fields = {"name": item.name, "value": item.value, "remarks": item.remarks or ""}
        checked.append(_env_fields(fields, f"[{i}]." if len(items) > 1 else ""))
    created = await operations.create_envs(runtime_of(request), checked)
    return ok([env_view(e) for e in created])


@scoped("envs")
async def envs_update(request: Request) -> Response:
    body = decode(await request.body(), EnvPatch)
    _unsupported(body, ("labels",))
    num = _id_list([body.id], "id")[0]
    fields = _env_fields({k: getattr(body, k) for k in ("name", "value", "remarks")
                          if getattr(body, k) is not None})
    rt = runtime_of(request)
    (env_id,) = await _env_ids(rt, [num])
    return ok(env_view(await operations.update_env(rt, env_id, fields)))


@scoped("envs")
async def envs_delete(request: Request) -> Response:
    rt = runtime_of(request)
    env_ids = await _env_ids(rt, await _ids_body(request), missing_ok=True)
    await operations.delete_envs(rt, env_ids, missing_ok=True)  # unknown ids: nothing to do
    return ok()


async def _envs_enabled(request: Request, enabled: bool) -> Response:
    rt = runtime_of(request)
    env_ids = await _env_ids(rt, await _ids_body(request))
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
    nums = _id_list(body.ids)
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


def _both(path: str, endpoint: Handler, methods: list[str]) -> list[Route]:
    """QingLong clients call collections with and without a trailing slash."""
    return [Route(path, endpoint, methods=methods),
            Route(f"{path}/", endpoint, methods=methods)]


routes = [
    Route("/auth/token", auth_token, methods=["GET"]),
    *_both("/crons", crons_list, ["GET"]),
    *_both("/crons", crons_create, ["POST"]),
    *_both("/crons", crons_update, ["PUT"]),
    *_both("/crons", crons_delete, ["DELETE"]),
    Route("/crons/run", crons_run, methods=["PUT"]),
    Route("/crons/stop", crons_stop, methods=["PUT"]),
    Route("/crons/disable", crons_disable, methods=["PUT"]),
    Route("/crons/enable", crons_enable, methods=["PUT"]),
    Route("/crons/{num:digits}", crons_get, methods=["GET"]),
    Route("/crons/{num:digits}/log", crons_log, methods=["GET"]),
    *_both("/envs", envs_list, ["GET"]),
    *_both("/envs", envs_create, ["POST"]),
    *_both("/envs", envs_update, ["PUT"]),
    *_both("/envs", envs_delete, ["DELETE"]),
    Route("/envs/disable", envs_disable, methods=["PUT"]),
    Route("/envs/enable", envs_enable, methods=["PUT"]),
    Route("/envs/name", envs_rename, methods=["PUT"]),
    Route("/envs/{num:digits}", envs_get, methods=["GET"]),
]
