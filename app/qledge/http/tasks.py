"""Tasks API: /api/v1/tasks."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, limits, operations
from ..clock import now_ms
from ..db import tasks
from ..model import DEFAULT_RETRY_ON, Task
from ..tasks.spec import PlacementIn, validated
from . import inputs
from .context import runtime_of
from .errors import decode_body, json_response

UNSET = msgspec.UNSET
_Overlap = Literal["skip", "queue", "replace", "allow"]


class TaskIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    command: str
    schedule: str | None = None
    timeout_s: int | None = None
    env: dict[str, str] = {}
    enabled: bool = True
    concurrency: Literal["forbid", "allow"] | None = None  # the old spelling of overlap
    overlap: _Overlap | None = None  # default skip
    labels: list[str] = []
    keep_runs: int | None = None  # retention override; None = settings, 0 = no limit
    keep_days: int | None = None
    keep_background: bool = False  # leave background processes running at the end
    retries: int = 0
    retry_delay_s: int = 10
    retry_on: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_RETRY_ON))
    on_success: list[str] = []  # task ids to run after this one (docs/tasks.md)
    on_failure: list[str] = []
    on_finish: list[str] = []
    extra_schedules: list[str] = []  # more cron expressions (QingLong extra_schedules)
    tz: str | None = None  # IANA zone the schedules tick in; None = the container's TZ
    placement: PlacementIn | None = None  # None: any node


class TaskPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | msgspec.UnsetType = UNSET
    command: str | msgspec.UnsetType = UNSET
    schedule: str | msgspec.UnsetType | None = UNSET
    timeout_s: int | msgspec.UnsetType | None = UNSET
    env: dict[str, str] | msgspec.UnsetType = UNSET
    enabled: bool | msgspec.UnsetType = UNSET
    concurrency: Literal["forbid", "allow"] | msgspec.UnsetType = UNSET
    overlap: _Overlap | msgspec.UnsetType = UNSET
    labels: list[str] | msgspec.UnsetType = UNSET
    keep_runs: int | msgspec.UnsetType | None = UNSET
    keep_days: int | msgspec.UnsetType | None = UNSET
    keep_background: bool | msgspec.UnsetType = UNSET
    retries: int | msgspec.UnsetType = UNSET
    retry_delay_s: int | msgspec.UnsetType = UNSET
    retry_on: list[str] | msgspec.UnsetType = UNSET
    on_success: list[str] | msgspec.UnsetType = UNSET
    on_failure: list[str] | msgspec.UnsetType = UNSET
    on_finish: list[str] | msgspec.UnsetType = UNSET
    extra_schedules: list[str] | msgspec.UnsetType = UNSET
    tz: str | msgspec.UnsetType | None = UNSET
    placement: PlacementIn | msgspec.UnsetType | None = UNSET


def placement_view(placement_node: str | None, labels: list[str]) -> dict[str, Any]:
    return {"node": placement_node, "labels": list(labels)}


def task_view(task: Task) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(task)
    body["placement"] = placement_view(body.pop("placement_node", None),
                                       body.pop("placement_labels", []))
    body["next_fire_at_ms"] = None
    if task.schedules and task.enabled:
        body["next_fire_at_ms"] = cron.first_due_after_any(task.schedules, now_ms(), task.tz,
                                                           task.updated_at_ms)
    return body


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), TaskIn)
    task = await operations.create_task(runtime_of(request),
                                        validated(msgspec.structs.asdict(body)))
    return json_response(task_view(task), 201)


async def list_(request: Request) -> Response:
    after = inputs.query_int(request, "after", 0, 0, limits.INT64_MAX)
    limit = inputs.query_int(request, "limit", limits.TASKS_PAGE.default, 1,
                             limits.TASKS_PAGE.most)
    async with runtime_of(request).db.read() as tx:
        page = await tasks.list_tasks(
            tx, after_num=after, limit=limit,
            hidden=inputs.query_int(request, "hidden", 0, 0, 1) == 1,
            internal=inputs.query_int(request, "internal", 1, 0, 1) == 1)
    items = [task_view(t) for t in page]
    nxt = page[-1].num if len(page) == limit else None
    return json_response({"items": items, "next_after": nxt})


async def get(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        task = await tasks.get_task(tx, request.path_params["task_id"])
    return json_response(task_view(task))


async def update(request: Request) -> Response:
    patch = decode_body(await request.body(), TaskPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    task = await operations.update_task(runtime_of(request), request.path_params["task_id"],
                                        validated(fields))
    return json_response(task_view(task))


async def delete(request: Request) -> Response:
    await operations.delete_tasks(runtime_of(request), [request.path_params["task_id"]])
    return Response(status_code=204)


routes = [
    Route("/tasks", create, methods=["POST"]),
    Route("/tasks", list_, methods=["GET"]),
    Route("/tasks/{task_id}", get, methods=["GET"]),
    Route("/tasks/{task_id}", update, methods=["PUT", "PATCH"]),
    Route("/tasks/{task_id}", delete, methods=["DELETE"]),
]
