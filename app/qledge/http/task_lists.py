"""The panel's task list and overview: GET /api/v1/task-list, GET /api/v1/task-overview
(docs/api.md). Read-only; the queries are db/task_lists.py's."""

from __future__ import annotations

from datetime import datetime
from typing import Any, get_args

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, limits
from ..clock import now_ms
from ..db import task_lists
from .context import runtime_of
from .errors import Invalid, json_response
from .inputs import query_int, query_text
from .tasks import task_view

# The page's strips are one UNION ALL term per task: well under SQLite's 500 terms.
MOST = 200
_WINDOWS = {"24h": (3_600_000, 24), "7d": (86_400_000, 7)}


def appliance_zone() -> str:
    """The appliance's zone as a name a browser's Intl accepts (the panel formats times in
    it): the IANA key; else, for a zone read from a file or a POSIX TZ string, its current
    offset as an Etc/GMT zone (whole hours; the sign is POSIX's, inverted) or UTC."""
    tz = cron.local_zone()
    key = getattr(tz, "key", None)
    if key and key != "localtime":
        return str(key)
    offset = datetime.now(tz).utcoffset()
    hours, rest = divmod(int(offset.total_seconds()) if offset else 0, 3600)
    if rest or not hours:
        return "UTC"
    return f"Etc/GMT{-hours:+d}"


def _choice(request: Request, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name, default)
    if value not in allowed:
        raise Invalid(f"{name} must be one of {', '.join(allowed)}", field=name,
                      code="NOT_ONE_OF")
    return value


def _filter(request: Request) -> task_lists.Filter:
    enabled = _choice(request, "enabled", ("", "true", "false"), "")
    return task_lists.Filter(
        q=query_text(request, "q"), label=query_text(request, "label"),
        enabled=None if not enabled else enabled == "true",
        last_failed=_choice(request, "last", ("", "failed"), "") == "failed",
        internal=_choice(request, "internal", ("", "true", "false"), "") == "true")


async def task_list(request: Request) -> Response:
    f = _filter(request)
    sort: Any = _choice(request, "sort", get_args(task_lists.Sort), "name")
    order = _choice(request, "order", ("asc", "desc"), "asc")
    limit = query_int(request, "limit", 25, 1, MOST)
    offset = query_int(request, "offset", 0, 0, limits.INT64_MAX)
    async with runtime_of(request).db.read() as tx:
        everything = await task_lists.all_tasks(tx)
        views = {i.task.id: task_view(i.task) for i in everything}
        nexts = {k: v["next_fire_at_ms"] for k, v in views.items()}
        chosen = sorted(task_lists.filtered(everything, f),
                        key=task_lists.sort_key(sort, nexts), reverse=order == "desc")
        page = chosen[offset:offset + limit]
        strips = await task_lists.strips(tx, [i.task.id for i in page])
    items = [{**views[i.task.id], "internal": i.internal, "last_status": i.last_status,
              "last_run_at_ms": i.last_at_ms,
              "runs": msgspec.to_builtins(strips[i.task.id])} for i in page]
    internal = sum(1 for i in everything if i.internal)
    return json_response({"items": items, "total": len(chosen),
                          "labels": task_lists.labels_of(everything),
                          "internal_total": internal, "zone": appliance_zone(),
                          "all_total": len(everything) - internal})


async def task_overview(request: Request) -> Response:
    window = _choice(request, "window", tuple(_WINDOWS), "24h")
    bucket_ms, n = _WINDOWS[window]
    end = (now_ms() // bucket_ms + 1) * bucket_ms
    async with runtime_of(request).db.read() as tx:
        view = await task_lists.overview(tx, end - n * bucket_ms, bucket_ms, n)
    return json_response({"window": window, "zone": appliance_zone(),
                          **msgspec.to_builtins(view)})


routes = [
    Route("/task-list", task_list, methods=["GET"]),
    Route("/task-overview", task_overview, methods=["GET"]),
]
