"""QingLong's /open/crons: tasks by their `num` (docs/qinglong-compat.md)."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import limits, operations
from ...db import attempts, rows, runs, tasks
from ...launch import logs
from ...model import ACTIVE_RUN, Overlap, Task, Trigger
from ...runtime.lifecycle import Runtime
from ...tasks import spec as task_spec
from ...tasks.writable import TaskFields
from .. import _proxy, inputs
from .. import tasks as native_tasks
from ..context import runtime_of
from ..errors import (
    BadRequest,
    Missing,
    StateConflict,
    json_response,
)
from .auth import scoped
from .wire import both, decode, id_list, ids_body, iso, ok, path_id, timestamp, unsupported

MAX_LIST = limits.QL_MAX_LIST  # crons returned when no page/size is given
MAX_PAGE = limits.QL_MAX_PAGE
MAX_PAGE_SIZE = limits.QL_MAX_PAGE  # accepted; at most MAX_LIST are returned

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
        "timestamp": timestamp(task.updated_at_ms),
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
        task = await tasks.get_task_by_num(tx, path_id(request))
    return ok((await _views(rt, [task]))[0])


@scoped("crons")
async def crons_create(request: Request) -> Response:
    body = decode(await request.body(), CronIn)
    unsupported(body, _UNSUPPORTED_CRON)
    fields = _task_fields(body)
    if fields.name is msgspec.UNSET:
        fields = msgspec.structs.replace(fields, name=_default_name(body.command))
    task = await operations.create_task(runtime_of(request), fields)
    return ok(cron_view(task, None))


@scoped("crons")
async def crons_update(request: Request) -> Response:
    rt = runtime_of(request)
    body = decode(await request.body(), CronPatch)
    unsupported(body, _UNSUPPORTED_CRON)
    fields = _task_fields(body)
    (task,) = await _tasks_by_nums(rt, id_list([body.id], "id"))
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
    chosen = await _tasks_by_nums(rt, await ids_body(request), missing_ok=True)
    try:
        await operations.delete_tasks(rt, [t.id for t in chosen])
    except operations.ActiveRun as exc:
        raise StateConflict(f"cron {exc.task.num} has an active run; stop it first") from exc
    return ok()


@scoped("crons")
async def crons_run(request: Request) -> Response:
    rt = runtime_of(request)
    for task in await _tasks_by_nums(rt, await ids_body(request)):
        # concurrency: forbid and already queued/running: like QingLong, no error
        with contextlib.suppress(operations.ActiveRun):
            await operations.trigger(rt, task.id, Trigger.API)
    return ok()


@scoped("crons")
async def crons_stop(request: Request) -> Response:
    rt = runtime_of(request)
    for task in await _tasks_by_nums(rt, await ids_body(request)):
        await operations.stop_task(rt, task.id)
    return ok()


async def _set_enabled(request: Request, enabled: bool) -> Response:
    rt = runtime_of(request)
    chosen = await _tasks_by_nums(rt, await ids_body(request))
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
        task = await tasks.get_task_by_num(tx, path_id(request))
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



routes = [
    *both("/crons", crons_list, ["GET"]),
    *both("/crons", crons_create, ["POST"]),
    *both("/crons", crons_update, ["PUT"]),
    *both("/crons", crons_delete, ["DELETE"]),
    Route("/crons/run", crons_run, methods=["PUT"]),
    Route("/crons/stop", crons_stop, methods=["PUT"]),
    Route("/crons/disable", crons_disable, methods=["PUT"]),
    Route("/crons/enable", crons_enable, methods=["PUT"]),
    Route("/crons/{num:digits}", crons_get, methods=["GET"]),
    Route("/crons/{num:digits}/log", crons_log, methods=["GET"]),
]
