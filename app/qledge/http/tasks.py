"""Tasks API: /api/v1/tasks."""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, ids
from ..clock import now_ms
from ..db import store
from ..model import Task
from ..runtime.lifecycle import Runtime
from .errors import Invalid, StateConflict, decode_body, json_response

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UNSET = msgspec.UNSET


class TaskIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    command: str
    schedule: str | None = None
    timeout_s: int | None = None
    env: dict[str, str] = {}
    enabled: bool = True
    concurrency: Literal["forbid", "allow"] = "forbid"
    labels: list[str] = []
    keep_runs: int | None = None  # retention override; None = settings, 0 = no limit
    keep_days: int | None = None


class TaskPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | msgspec.UnsetType = UNSET
    command: str | msgspec.UnsetType = UNSET
    schedule: str | msgspec.UnsetType | None = UNSET
    timeout_s: int | msgspec.UnsetType | None = UNSET
    env: dict[str, str] | msgspec.UnsetType = UNSET
    enabled: bool | msgspec.UnsetType = UNSET
    concurrency: Literal["forbid", "allow"] | msgspec.UnsetType = UNSET
    labels: list[str] | msgspec.UnsetType = UNSET
    keep_runs: int | msgspec.UnsetType | None = UNSET
    keep_days: int | msgspec.UnsetType | None = UNSET


def validated(fields: dict[str, Any]) -> dict[str, Any]:
    """Field checks beyond types; each error names its field."""
    out = dict(fields)
    if "name" in out:
        name = out["name"].strip()
        if not name or len(name) > 200:
            raise Invalid("name must be 1-200 characters", field="name")
        out["name"] = name
    if "command" in out:
        if not out["command"].strip():
            raise Invalid("command must not be empty", field="command")
        if len(out["command"]) > 65536 or "\x00" in out["command"]:
            raise Invalid("command too long or contains NUL", field="command")
    if out.get("schedule") is not None:
        try:
            out["schedule"] = cron.validate(out["schedule"])
        except cron.CronError as exc:
            raise Invalid(f"invalid cron schedule: {exc}", field="schedule") from exc
    if out.get("timeout_s") is not None and not 0 < out["timeout_s"] <= 366 * 86400:
        raise Invalid("timeout_s must be a positive number of seconds", field="timeout_s")
    for key, value in (out.get("env") or {}).items():
        if not _ENV_NAME.match(key) or len(key) > 256:
            raise Invalid(f"env name {key!r} is not a shell identifier", field="env")
        if "\x00" in value or len(value) > 65536:
            raise Invalid(f"env value of {key} contains NUL or is too long", field="env")
    for label in out.get("labels") or []:
        if not label.strip() or len(label) > 100:
            raise Invalid("labels must be 1-100 characters", field="labels")
    if out.get("keep_runs") is not None and not 0 <= out["keep_runs"] <= 1_000_000:
        raise Invalid("keep_runs must be 0 (no limit) to 1000000", field="keep_runs")
    if out.get("keep_days") is not None and not 0 <= out["keep_days"] <= 36_500:
        raise Invalid("keep_days must be 0 (no limit) to 36500", field="keep_days")
    return out


def task_view(task: Task) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(task)
    body["next_fire_at_ms"] = None
    if task.schedule and task.enabled:
        body["next_fire_at_ms"] = cron.first_due_after(task.schedule, now_ms())
    return body


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), TaskIn)
    fields = validated(msgspec.structs.asdict(body))
    async with _rt(request).db.write() as tx:
        task = await store.create_task(tx, ids.uuid7(), fields, now_ms())
    _rt(request).scheduler.wake()
    return json_response(task_view(task), 201)


async def list_(request: Request) -> Response:
    try:
        after = int(request.query_params.get("after", "0"))
        limit = min(max(int(request.query_params.get("limit", "100")), 1), 500)
    except ValueError as exc:
        raise Invalid("after and limit must be integers", field="limit") from exc
    async with _rt(request).db.read() as tx:
        tasks = await store.list_tasks(tx, after_num=after, limit=limit)
    items = [task_view(t) for t in tasks]
    nxt = tasks[-1].num if len(tasks) == limit else None
    return json_response({"items": items, "next_after": nxt})


async def get(request: Request) -> Response:
    async with _rt(request).db.read() as tx:
        task = await store.get_task(tx, request.path_params["task_id"])
    return json_response(task_view(task))


async def update(request: Request) -> Response:
    patch = decode_body(await request.body(), TaskPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    fields = validated(fields)
    async with _rt(request).db.write() as tx:
        task = await store.update_task(tx, request.path_params["task_id"], fields, now_ms())
    _rt(request).scheduler.wake()
    return json_response(task_view(task))


async def delete(request: Request) -> Response:
    rt = _rt(request)
    task_id = request.path_params["task_id"]
    async with rt.db.write() as tx:
        active = await store.active_run_of_task(tx, task_id)
        if active is not None:
            raise StateConflict("task has an active run; cancel it first",
                                extra={"active_run_id": active.id})
        logs = await store.delete_task(tx, task_id, now_ms())
    await rt.remove_logs(logs)
    rt.scheduler.wake()
    return Response(status_code=204)


routes = [
    Route("/tasks", create, methods=["POST"]),
    Route("/tasks", list_, methods=["GET"]),
    Route("/tasks/{task_id}", get, methods=["GET"]),
    Route("/tasks/{task_id}", update, methods=["PUT", "PATCH"]),
    Route("/tasks/{task_id}", delete, methods=["DELETE"]),
]
