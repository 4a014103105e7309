"""QingLong's subscription calls under /open/subscriptions (scope `subscriptions`;
docs/qinglong-compat.md, "Subscriptions").

QingLong's field names map onto the native subscription (http/subscriptions.py does
the checking, answered here with 400 as QingLong does): `schedule_type` crontab →
`schedule`, interval + `interval_schedule` {type, value} → `schedule: @every …`;
`pull_type` user-pwd + `pull_option` {username, password} → `username`, `secret`;
`autoAddCron` / `autoDelCron` → `auto_add` / `auto_delete`; `extensions` is a
space-separated string. The password is write-only, as natively: an answer's
`pull_option` holds the username only. What qledge cannot do (SSH keys, a proxy,
deleting the tasks and folder with `force`) is refused with 400 naming the field.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import interval
from ...db import rows, runs
from ...db import subscriptions as subs
from ...operations import subscriptions as ops
from ...runtime.lifecycle import Runtime
from ...runtime.subscriptions import pull_command
from .. import inputs
from ..context import runtime_of
from ..errors import BadRequest, Missing
from ._subscription_form import SubIn, SubPut, native_fields
from .auth import scoped
from .crons import STATUS_DISABLED, STATUS_IDLE, STATUS_QUEUED, STATUS_RUNNING, latest_log
from .wire import decode, iso, ok


def sub_view(sub: subs.Subscription, summary: runs.RunSummary | None) -> dict[str, Any]:
    s = summary or runs.RunSummary()
    if s.running:
        status = STATUS_RUNNING
    elif s.queued:
        status = STATUS_QUEUED
    elif not sub.enabled:
        status = STATUS_DISABLED
    else:
        status = STATUS_IDLE
    every = interval.to_qinglong(sub.schedule) if sub.schedule else None
    private = sub.has_secret or sub.username is not None
    return {
        "id": sub.num,
        "name": sub.name,
        "type": "file" if sub.type == "file" else
                ("private-repo" if private else "public-repo"),
        "schedule_type": "interval" if every else "crontab",
        "schedule": None if every else sub.schedule,
        "interval_schedule": every,
        "url": sub.url,
        "whitelist": sub.whitelist,
        "blacklist": sub.blacklist,
        "dependences": sub.dependences,
        "branch": sub.branch or "",
        "status": status,
        "pull_type": "user-pwd" if private else None,
        "pull_option": {"username": sub.username or "git"} if private else None,
        "pid": s.pid,
        "is_disabled": 0 if sub.enabled else 1,
        "log_path": s.log_path or "",
        "alias": sub.alias,
        "command": pull_command(sub.id),
        "extensions": " ".join(sub.extensions),
        "sub_before": sub.sub_before,
        "sub_after": sub.sub_after,
        "proxy": None,
        "autoAddCron": int(sub.auto_add),
        "autoDelCron": int(sub.auto_delete),
        "last_running_time": round(s.last_duration_ms / 1000) if s.last_duration_ms else 0,
        "last_execution_time": s.last_started_at_ms // 1000 if s.last_started_at_ms else 0,
        "createdAt": iso(sub.created_at_ms),
        "updatedAt": iso(sub.updated_at_ms),
        # qledge extras (ignored by QingLong clients)
        "qledge_id": sub.id,
        "has_secret": sub.has_secret,
        "default_schedule": sub.default_schedule,
        "vanished": sub.vanished,
        "last_sync": sub.last_sync,
    }


async def _views(rt: Runtime, found: list[subs.Subscription]) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        summaries = await runs.run_summaries(
            tx, [s.pull_task_id for s in found if s.pull_task_id])
    return [sub_view(s, summaries.get(s.pull_task_id or "")) for s in found]


async def _by_nums(rt: Runtime, nums: list[int], *, missing_ok: bool = False
                   ) -> list[subs.Subscription]:
    """The subscriptions of these QingLong ids; 404 naming the unknown ones (nothing
    done) unless `missing_ok`."""
    async with rt.db.read() as tx:
        found = await subs.by_nums(tx, nums)
    missing = [n for n in nums if n not in found]
    if missing and not missing_ok:
        raise Missing(f"subscription {', '.join(map(str, missing))} not found")
    return [found[n] for n in nums if n in found]


async def _ids_body(request: Request) -> list[int]:
    return inputs.id_list(decode(await request.body(), list[Any]), "ids", BadRequest)


@scoped("subscriptions")
async def list_(request: Request) -> Response:
    rt = runtime_of(request)
    search = inputs.query_text(request, "searchValue", BadRequest).strip()
    raw_ids = inputs.query_text(request, "ids", BadRequest).strip()
    async with rt.db.read() as tx:
        found = await subs.search(tx, search)
    if raw_ids:
        try:
            wanted = set(inputs.id_list(msgspec.json.decode(raw_ids, type=list[Any]), "ids",
                                        BadRequest))
        except msgspec.DecodeError:
            raise BadRequest("ids must be a JSON array of ids", field="ids") from None
        found = [s for s in found if s.num in wanted]
    return ok(await _views(rt, found))


@scoped("subscriptions")
async def get(request: Request) -> Response:
    rt = runtime_of(request)
    num = inputs.path_int(request, "num", "id", BadRequest)
    (sub,) = await _by_nums(rt, [num])
    return ok((await _views(rt, [sub]))[0])


@scoped("subscriptions")
async def create(request: Request) -> Response:
    rt = runtime_of(request)
    body = decode(await request.body(), SubIn)
    try:
        sub = await ops.create(rt, native_fields(body, None))
    except ops.AliasTaken as exc:
        raise BadRequest(str(exc), field="alias") from None
    return ok((await _views(rt, [sub]))[0])


@scoped("subscriptions")
async def update(request: Request) -> Response:
    rt = runtime_of(request)
    body = decode(await request.body(), SubPut)
    (num,) = inputs.id_list([body.id], "id", BadRequest)
    (current,) = await _by_nums(rt, [num])
    try:
        sub = await ops.update(rt, current.id, native_fields(body, current))
    except rows.NotFound:
        raise Missing(f"subscription {num} not found") from None
    return ok((await _views(rt, [sub]))[0])


@scoped("subscriptions")
async def delete(request: Request) -> Response:
    """Unknown ids are already gone; an active pull refuses them all (409)."""
    if request.query_params.get("force", "").lower() in ("true", "1"):
        raise BadRequest("force is not supported: qledge keeps the tasks and the scripts "
                         "folder of a deleted subscription; delete them yourself",
                         field="force")
    rt = runtime_of(request)
    chosen = await _by_nums(rt, await _ids_body(request), missing_ok=True)
    await ops.delete(rt, *[s.id for s in chosen])
    return ok()


@scoped("subscriptions")
async def run(request: Request) -> Response:
    rt = runtime_of(request)
    for sub in await _by_nums(rt, await _ids_body(request)):
        with contextlib.suppress(ops.PullBusy):  # already queued or running: like QingLong
            await ops.pull_now(rt, sub.id)
    return ok()


@scoped("subscriptions")
async def stop(request: Request) -> Response:
    rt = runtime_of(request)
    for sub in await _by_nums(rt, await _ids_body(request)):
        await ops.stop(rt, sub.id)
    return ok()


async def _set_enabled(request: Request, enabled: bool) -> Response:
    rt = runtime_of(request)
    for sub in await _by_nums(rt, await _ids_body(request)):
        await ops.update(rt, sub.id, {"enabled": enabled})
    return ok()


@scoped("subscriptions")
async def disable(request: Request) -> Response:
    return await _set_enabled(request, False)


@scoped("subscriptions")
async def enable(request: Request) -> Response:
    return await _set_enabled(request, True)


@scoped("subscriptions", "logs")
async def log(request: Request) -> Response:
    """The latest pull's log (QingLong: the subscription's last log file)."""
    rt = runtime_of(request)
    num = inputs.path_int(request, "num", "id", BadRequest)
    (sub,) = await _by_nums(rt, [num])
    return await latest_log(rt, sub.pull_task_id)


def _both(path: str, endpoint: Any, methods: list[str]) -> list[Route]:
    return [Route(path, endpoint, methods=methods),
            Route(f"{path}/", endpoint, methods=methods)]


routes = [
    *_both("/subscriptions", list_, ["GET"]),
    *_both("/subscriptions", create, ["POST"]),
    *_both("/subscriptions", update, ["PUT"]),
    *_both("/subscriptions", delete, ["DELETE"]),
    Route("/subscriptions/run", run, methods=["PUT"]),
    Route("/subscriptions/stop", stop, methods=["PUT"]),
    Route("/subscriptions/disable", disable, methods=["PUT"]),
    Route("/subscriptions/enable", enable, methods=["PUT"]),
    Route("/subscriptions/{num:digits}", get, methods=["GET"]),
    Route("/subscriptions/{num:digits}/log", log, methods=["GET"]),
]
