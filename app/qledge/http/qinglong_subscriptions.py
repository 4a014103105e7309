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

from .. import interval
from ..db import rows, runs
from ..db import subscriptions as subs
from ..runtime import subscriptions as ops
from ..runtime.lifecycle import Runtime
from ..subscription_spec import DEFAULT_EXTENSIONS
from . import inputs
from . import subscriptions as native
from .errors import BadRequest, Invalid, Missing
from .qinglong import (
    STATUS_DISABLED,
    STATUS_IDLE,
    STATUS_QUEUED,
    STATUS_RUNNING,
    decode,
    iso,
    latest_log,
    ok,
    scoped,
)

UNSET = msgspec.UNSET
Maybe = msgspec.UnsetType
SSH_REFUSED = ("pull_type ssh-key is not supported: qledge has no SSH client; use the "
               "repository's https:// URL with pull_type user-pwd and a token as password")


class _Fields(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | Maybe | None = UNSET
    schedule_type: str | Maybe | None = UNSET
    schedule: str | Maybe | None = UNSET
    interval_schedule: dict[str, Any] | str | Maybe | None = UNSET
    whitelist: str | Maybe | None = UNSET
    blacklist: str | Maybe | None = UNSET
    dependences: str | Maybe | None = UNSET
    branch: str | Maybe | None = UNSET
    pull_type: str | Maybe | None = UNSET
    pull_option: dict[str, Any] | str | Maybe | None = UNSET
    extensions: str | Maybe | None = UNSET
    sub_before: str | Maybe | None = UNSET
    sub_after: str | Maybe | None = UNSET
    proxy: str | Maybe | None = UNSET
    autoAddCron: bool | int | str | Maybe | None = UNSET
    autoDelCron: bool | int | str | Maybe | None = UNSET
    # qledge extras (docs/subscriptions.md)
    default_schedule: str | Maybe | None = UNSET
    vanished: str | Maybe = UNSET


class SubIn(_Fields, forbid_unknown_fields=True, frozen=True, kw_only=True):
    type: str
    url: str
    alias: str


class SubPut(_Fields, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: int | str
    type: str | Maybe = UNSET
    url: str | Maybe = UNSET
    alias: str | Maybe = UNSET


def _given(value: Any) -> bool:
    return value is not UNSET


def _flag(value: Any, field: str) -> bool | None:
    """Joi.boolean(): true/false, 1/0, "true"/"false"; None and "" mean not given."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequest(f"{field} must be true or false", field=field)


def _schedule(body: _Fields, current: subs.Subscription | None) -> dict[str, Any]:
    kind = body.schedule_type if _given(body.schedule_type) else None
    if not kind:  # not given: what is sent (or what there is) decides
        sent = body.interval_schedule if _given(body.interval_schedule) else None
        was = current is not None and current.schedule is not None and \
            interval.is_interval(current.schedule)
        kind = "interval" if sent or (was and not _given(body.schedule)) else "crontab"
    if kind == "interval":
        if not _given(body.interval_schedule):
            return {} if current is not None else {"schedule": None}
        raw = body.interval_schedule
        if not raw:
            return {"schedule": None}  # QingLong: an interval without a value never fires
        if not isinstance(raw, dict):
            raise BadRequest("interval_schedule must be {type, value}",
                             field="interval_schedule")
        try:
            return {"schedule": interval.from_qinglong(raw.get("type"), raw.get("value"))}
        except interval.IntervalError as exc:
            raise BadRequest(f"interval_schedule: {exc}", field="interval_schedule") from None
    if kind != "crontab":
        raise BadRequest("schedule_type must be crontab or interval", field="schedule_type")
    if not _given(body.schedule):
        return {} if current is not None else {"schedule": None}
    return {"schedule": body.schedule or None}


def _credentials(body: _Fields) -> dict[str, Any]:
    pull_type = body.pull_type if _given(body.pull_type) else None
    option = body.pull_option if _given(body.pull_option) else None
    if pull_type == "ssh-key" or (isinstance(option, dict) and "private_key" in option):
        raise BadRequest(SSH_REFUSED, field="pull_type")
    if pull_type not in (None, "", "user-pwd"):
        raise BadRequest("pull_type must be user-pwd (ssh-key is not supported)",
                         field="pull_type")
    if not option:
        if pull_type == "user-pwd":
            raise BadRequest("pull_option {username, password} is required with pull_type "
                             "user-pwd", field="pull_option")
        return {}
    if not isinstance(option, dict) or set(option) - {"username", "password"}:
        raise BadRequest("pull_option must be {username, password}", field="pull_option")
    out: dict[str, Any] = {}
    for key, native_key in (("username", "username"), ("password", "secret")):
        value = option.get(key)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"pull_option.{key} must be a string", field="pull_option")
        if value:  # a missing or empty password keeps the stored one
            out[native_key] = value
    if "username" in option and not option.get("username"):
        out["username"] = None  # the default user, `git`
    return out


def native_fields(body: _Fields, current: subs.Subscription | None) -> dict[str, Any]:
    """QingLong's fields as the native ones, checked like the native API's (400)."""
    if _given(body.proxy) and body.proxy:
        raise BadRequest("proxy is not supported by qledge", field="proxy")
    out: dict[str, Any] = {}
    if isinstance(body, SubIn):
        out.update(type=body.type, url=body.url, alias=body.alias,
                   name=body.name if _given(body.name) and body.name else body.alias)
    else:
        assert isinstance(body, SubPut) and current is not None
        for key in ("type", "alias"):
            value = getattr(body, key)
            if _given(value) and native.TYPES.get(value, value) != getattr(current, key):
                raise BadRequest(f"{key} cannot change (it is {getattr(current, key)!r}): "
                                 "create a new subscription instead", field=key)
        if _given(body.url):
            out["url"] = body.url
        if _given(body.name) and body.name:
            out["name"] = body.name
    for key in ("whitelist", "blacklist", "dependences", "sub_before", "sub_after"):
        value = getattr(body, key)
        if _given(value):
            out[key] = value or ""
    for key in ("branch", "default_schedule"):
        value = getattr(body, key)
        if _given(value):
            out[key] = value or None
    if _given(body.extensions):
        words = (body.extensions or "").split()
        out["extensions"] = words or list(DEFAULT_EXTENSIONS)
    if _given(body.vanished):
        out["vanished"] = body.vanished
    for key, native_key in (("autoAddCron", "auto_add"), ("autoDelCron", "auto_delete")):
        value = _flag(getattr(body, key), key) if _given(getattr(body, key)) else None
        if value is not None:
            out[native_key] = value
    out.update(_schedule(body, current))
    out.update(_credentials(body))
    try:
        return native.validate(out)
    except Invalid as exc:
        raise BadRequest(exc.message, field=exc.field) from None


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
        "command": ops.pull_command(sub.id),
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


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


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
    rt = _rt(request)
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
    rt = _rt(request)
    num = inputs.path_int(request, "num", "id", BadRequest)
    (sub,) = await _by_nums(rt, [num])
    return ok((await _views(rt, [sub]))[0])


@scoped("subscriptions")
async def create(request: Request) -> Response:
    rt = _rt(request)
    body = decode(await request.body(), SubIn)
    try:
        sub = await ops.create(rt, native_fields(body, None))
    except ops.AliasTaken as exc:
        raise BadRequest(str(exc), field="alias") from None
    return ok((await _views(rt, [sub]))[0])


@scoped("subscriptions")
async def update(request: Request) -> Response:
    rt = _rt(request)
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
    rt = _rt(request)
    chosen = await _by_nums(rt, await _ids_body(request), missing_ok=True)
    await ops.delete(rt, *[s.id for s in chosen])
    return ok()


@scoped("subscriptions")
async def run(request: Request) -> Response:
    rt = _rt(request)
    for sub in await _by_nums(rt, await _ids_body(request)):
        with contextlib.suppress(ops.PullBusy):  # already queued or running: like QingLong
            await ops.pull_now(rt, sub.id)
    return ok()


@scoped("subscriptions")
async def stop(request: Request) -> Response:
    rt = _rt(request)
    for sub in await _by_nums(rt, await _ids_body(request)):
        await ops.stop(rt, sub.id)
    return ok()


async def _set_enabled(request: Request, enabled: bool) -> Response:
    rt = _rt(request)
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
    rt = _rt(request)
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
