"""Tasks API: /api/v1/tasks."""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, node, operations, taskform
from ..clock import now_ms
from ..db import tasks
from ..model import DEFAULT_RETRY_ON, RETRYABLE, Reason, Task
from ..runtime.lifecycle import Runtime
from . import inputs
from .errors import ApiError, Invalid, decode_body, json_response

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UNSET = msgspec.UNSET
_Overlap = Literal["skip", "queue", "replace", "allow"]
MAX_RETRIES = 10
MAX_RETRY_DELAY_S = 86400
MAX_EXTRA_SCHEDULES = 20


class PlacementIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Where a task's runs may execute (docs/fleet.md): a node by name, labels a node
    must all carry, both, or neither (any node)."""

    node: str | None = None
    labels: list[str] = []


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


# A `task` form refused for its words alone can never start: refused at save, with the
# code a run would end with (the path's checks need the scripts folder: at spawn).
_REFUSED_AT_SAVE = frozenset({Reason.TASK_BAD_SYNTAX, Reason.TASK_BAD_OPTION,
                              Reason.TASK_BAD_SELECTION})


def _task_form(command: str, error: type[ApiError]) -> None:
    if not taskform.is_task_form(command):
        return
    try:
        taskform.parse(command)
    except taskform.TaskFormError as exc:
        if exc.reason in _REFUSED_AT_SAVE:
            raise error(f"{exc.reason.value}: {exc.message}", field="command") from None


def validated(fields: dict[str, Any], error: type[ApiError] = Invalid) -> dict[str, Any]:
    """Field checks beyond types (limits: docs/api.md); each error names its field."""
    out = dict(fields)
    if "name" in out:
        name = inputs.text(out["name"].strip(), "name", inputs.MAX_NAME, error=error)
        if not name:
            raise error(f"name must be 1-{inputs.MAX_NAME} characters", field="name")
        out["name"] = name
    if "command" in out:
        if not out["command"].strip():
            raise error("command must not be empty", field="command")
        inputs.utf8_bytes(out["command"], "command", inputs.MAX_COMMAND_BYTES, error)
        _task_form(out["command"], error)
    if out.get("schedule") is not None:
        schedule = inputs.text(out["schedule"], "schedule", inputs.MAX_SCHEDULE, lines=True,
                               error=error)
        try:
            out["schedule"] = cron.validate(schedule)
        except cron.CronError as exc:
            raise error(f"invalid cron schedule: {exc}", field="schedule") from exc
    if "extra_schedules" in out:
        out["extra_schedules"] = _extra_schedules(out["extra_schedules"], error)
    if out.get("tz") is not None:
        tz = inputs.text(out["tz"], "tz", 64, error=error)
        try:
            cron.zone(tz)
        except cron.CronError as exc:
            raise error(str(exc), field="tz") from exc
    if out.get("timeout_s") is not None:
        inputs.bounded(out["timeout_s"], "timeout_s", 1, 366 * 86400, error)
    env = out.get("env") or {}
    if len(env) > inputs.MAX_TASK_ENV:
        raise error(f"env holds {len(env)} variables; at most {inputs.MAX_TASK_ENV}",
                    field="env")
    for key, value in env.items():
        if not _ENV_NAME.match(key) or len(key) > inputs.MAX_ENV_NAME:
            raise error(f"env name {key[:64]!r} is not a shell identifier"
                        f" (at most {inputs.MAX_ENV_NAME} characters)", field="env")
        inputs.utf8_bytes(value, "env", inputs.MAX_ENV_VALUE_BYTES, error,
                          what=f"env value of {key}")
    labels = out.get("labels") or []
    if len(labels) > inputs.MAX_LABELS:
        raise error(f"{len(labels)} labels; at most {inputs.MAX_LABELS}", field="labels")
    for label in labels:
        inputs.text(label, "labels", inputs.MAX_LABEL, error=error)
        if not label.strip():
            raise error(f"labels must be 1-{inputs.MAX_LABEL} characters", field="labels")
    if out.get("keep_runs") is not None:
        inputs.bounded(out["keep_runs"], "keep_runs", 0, 1_000_000, error)
    if out.get("keep_days") is not None:
        inputs.bounded(out["keep_days"], "keep_days", 0, 36_500, error)
    _policies(out, error)
    if "placement" in out:
        out.update(placement(out.pop("placement"), error))
    return out


def placement(value: PlacementIn | dict[str, Any] | None,
              error: type[ApiError] = Invalid) -> dict[str, Any]:
    """A placement as the task's columns (`placement_node`, `placement_labels`), checked
    by the node rules (node.check_name / check_labels); None or {} is "any node"."""
    if value is None:
        return {"placement_node": None, "placement_labels": []}
    if isinstance(value, dict):
        try:
            value = msgspec.convert(value, PlacementIn)
        except msgspec.ValidationError as exc:
            raise error(f"placement: {exc}", field="placement") from exc
    try:
        name = node.check_name(value.node) if value.node is not None else None
        labels = node.check_labels(value.labels)
    except node.NodeError as exc:
        raise error(f"placement: {exc}", field="placement") from exc
    return {"placement_node": name, "placement_labels": labels}


def placement_view(placement_node: str | None, labels: list[str]) -> dict[str, Any]:
    return {"node": placement_node, "labels": list(labels)}


def _extra_schedules(items: list[str], error: type[ApiError]) -> list[str]:
    if len(items) > MAX_EXTRA_SCHEDULES:
        raise error(f"{len(items)} extra schedules; at most {MAX_EXTRA_SCHEDULES}",
                    field="extra_schedules")
    out = []
    for item in items:
        text = inputs.text(item, "extra_schedules", inputs.MAX_SCHEDULE, lines=True,
                           error=error)
        try:
            out.append(cron.validate(text))
        except cron.CronError as exc:
            raise error(f"extra_schedules: invalid cron schedule {text[:64]!r}: {exc}",
                        field="extra_schedules") from exc
    return list(dict.fromkeys(out))


def _policies(out: dict[str, Any], error: type[ApiError]) -> None:
    """Overlap (with its old spelling `concurrency`) and retries (docs/tasks.md)."""
    conc, overlap = out.pop("concurrency", None), out.pop("overlap", None)
    if overlap is not None:
        if conc is not None and (conc == "allow") != (overlap == "allow"):
            raise error(f"concurrency {conc!r} contradicts overlap {overlap!r}; send overlap"
                        " only (concurrency is its old spelling)", field="concurrency")
        out["overlap"] = overlap
    elif conc is not None:
        out["concurrency"] = conc
    if "retries" in out:
        inputs.bounded(out["retries"], "retries", 0, MAX_RETRIES, error)
    if "retry_delay_s" in out:
        inputs.bounded(out["retry_delay_s"], "retry_delay_s", 0, MAX_RETRY_DELAY_S, error)
    if "retry_on" in out:
        wrong = [o for o in out["retry_on"] if o not in RETRYABLE]
        if wrong:
            raise error(f"retry_on: {str(wrong[0])[:32]!r} cannot retry; choose from"
                        f" {', '.join(sorted(RETRYABLE))}", field="retry_on")


def task_view(task: Task) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(task)
    body["placement"] = placement_view(body.pop("placement_node", None),
                                       body.pop("placement_labels", []))
    body["next_fire_at_ms"] = None
    if task.schedules and task.enabled:
        body["next_fire_at_ms"] = cron.first_due_after_any(task.schedules, now_ms(), task.tz,
                                                           task.updated_at_ms)
    return body


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), TaskIn)
    task = await operations.create_task(_rt(request), validated(msgspec.structs.asdict(body)))
    return json_response(task_view(task), 201)


async def list_(request: Request) -> Response:
    after = inputs.query_int(request, "after", 0, 0, inputs.INT64_MAX)
    limit = inputs.query_int(request, "limit", 100, 1, 500)
    async with _rt(request).db.read() as tx:
        page = await tasks.list_tasks(tx, after_num=after, limit=limit)
    items = [task_view(t) for t in page]
    nxt = page[-1].num if len(page) == limit else None
    return json_response({"items": items, "next_after": nxt})


async def get(request: Request) -> Response:
    async with _rt(request).db.read() as tx:
        task = await tasks.get_task(tx, request.path_params["task_id"])
    return json_response(task_view(task))


async def update(request: Request) -> Response:
    patch = decode_body(await request.body(), TaskPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    task = await operations.update_task(_rt(request), request.path_params["task_id"],
                                        validated(fields))
    return json_response(task_view(task))


async def delete(request: Request) -> Response:
    await operations.delete_tasks(_rt(request), [request.path_params["task_id"]])
    return Response(status_code=204)


routes = [
    Route("/tasks", create, methods=["POST"]),
    Route("/tasks", list_, methods=["GET"]),
    Route("/tasks/{task_id}", get, methods=["GET"]),
    Route("/tasks/{task_id}", update, methods=["PUT", "PATCH"]),
    Route("/tasks/{task_id}", delete, methods=["DELETE"]),
]
