"""Notifications API: /api/v1/notifications/... and the scripts' POST /notify.

A channel's apprise URL holds the service's token: it is accepted on create and
update — as the URL itself, or as a picker service and its fields that make it
(notifications/services.py) — and never returned (a response shows its scheme, its
picker service, which of its secrets and server URLs are set, and the fields that are
no secret; an edit's fields left out keep their values: notifications/readback.py).
Deliveries show their state — pending, retrying, sent, given_up — and a redacted
error.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids, limits
from ..db import notifications as q
from ..fields import FieldError
from ..notifications import readback, services, words
from ..notifications import rules as notify
from ..operations import notifications as notify_ops
from ..runtime.lifecycle import Runtime
from . import inputs
from .context import runtime_of
from .errors import (
    Forbidden,
    Invalid,
    Missing,
    StateConflict,
    Unauthorized,
    decode_body,
    json_response,
)

MAX_NAME = 100
MAX_URL = 2048
MAX_TITLE = 200
MAX_CONTENT = 4000


class ChannelIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    url: str | None = None  # either the apprise URL ...
    service: str | None = None  # ... or a picker service and its fields
    fields: dict[str, str] | None = None
    enabled: bool = True


class ChannelPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | None = None
    url: str | None = None
    service: str | None = None
    fields: dict[str, str] | None = None
    enabled: bool | None = None


class ScriptMessage(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    title: str
    content: str = ""


def channel_view(ch: q.Channel) -> dict[str, Any]:
    picked = services.service_of(ch.url)
    return {"id": ch.id, "name": ch.name, "service": ch.url.split("://", 1)[0].lower(),
            "picker": picked, "secrets": readback.hidden_set(picked, ch.url) if picked
            else {}, "fields": readback.shown_fields(picked, ch.url) if picked else {},
            "enabled": ch.enabled, "created_at_ms": ch.created_at_ms,
            "updated_at_ms": ch.updated_at_ms}


def message_state(m: q.Message) -> str:
    """pending, retrying, held (for its channel's digest), sent, digested (sent inside
    the digest `digest_id`), given_up."""
    if m.digest_id is not None:
        return "digested"
    if m.state == "pending":
        return "held" if m.held_at_ms is not None else "retrying" if m.tries else "pending"
    return m.state


def message_view(m: q.Message) -> dict[str, Any]:
    return {"id": m.id, "channel_id": m.channel_id, "kind": m.kind, "run_id": m.run_id,
            "task_id": m.task_id, "title": m.title, "state": message_state(m),
            "tries": m.tries, "created_at_ms": m.created_at_ms, "next_at_ms": m.next_at_ms if
            m.state == "pending" else None, "done_at_ms": m.done_at_ms, "error": m.last_error,
            "notify_type": m.notify_type, "digest_id": m.digest_id}


def _id(request: Request, name: str = "channel_id") -> str:
    value: str = request.path_params[name]
    if not ids.is_uuid7(value):
        raise Missing("channel not found", params={"what": "channel"})
    return value


def _rule(code: str) -> dict[str, object]:
    return {"rule": code, "params": {}}


async def _valid_url(rt: Runtime, url: str) -> str:
    url = url.strip()
    inputs.text(url, "url", MAX_URL)
    if "://" not in url:
        raise Invalid("url must be an apprise URL (service://...)", field="url",
                      code="BAD_APPRISE_URL", extra=_rule("NOT_APPRISE_URL"))
    if not await rt.notifier.valid(url):
        raise Invalid("url is not an apprise URL of a known service", field="url",
                      code="BAD_APPRISE_URL", extra=_rule("NOT_APPRISE_URL"))
    return url


async def _destination(rt: Runtime, url: str | None, service: str | None,
                       fields: dict[str, str] | None) -> str:
    """The apprise URL a request names: `url` as written, or built from a picker
    service's fields (then apprise still judges it, as it judges a written one)."""
    if (url is None) == (service is None) or (fields is not None and service is None):
        raise FieldError("URL_OR_SERVICE", "url" if service is None else "service",
                         "give either url, or service with its fields")
    if url is not None:
        return await _valid_url(rt, url)
    assert service is not None
    built = services.build_url(service, fields or {})
    if not await rt.notifier.valid(built):
        raise Invalid(f"the fields do not make a URL {service} accepts", field="service",
                      extra=_rule("SERVICE_REFUSED"))
    return built


def _name(raw: str) -> str:
    name = inputs.text(raw.strip(), "name", MAX_NAME)
    if not name:
        raise Invalid("name must not be empty", field="name", code="REQUIRED")
    return name


async def list_channels(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        chans = await q.channels(tx)
    return json_response({"items": [channel_view(c) for c in chans]})


async def create_channel(request: Request) -> Response:
    rt = runtime_of(request)
    body = decode_body(await request.body(), ChannelIn)
    name = _name(body.name)
    url = await _destination(rt, body.url, body.service, body.fields)
    try:
        ch = await notify_ops.add_channel(rt, name, url, body.enabled)
    except notify_ops.DuplicateName:
        raise StateConflict(f"a channel named {name!r} exists", field="name",
                            code="NAME_TAKEN") from None
    return json_response(channel_view(ch), 201)


async def update_channel(request: Request) -> Response:
    rt = runtime_of(request)
    channel_id = _id(request)
    patch = decode_body(await request.body(), ChannelPatch)
    fields: dict[str, object] = {}
    if patch.name is not None:
        fields["name"] = _name(patch.name)
    if patch.url is not None or patch.service is not None or patch.fields is not None:
        given = patch.fields
        if patch.service is not None and given is not None:
            try:
                async with rt.db.read() as tx:
                    current = (await q.channel(tx, channel_id)).url
            except q.NotFound:
                raise Missing("channel not found", params={"what": "channel"}) from None
            if services.service_of(current) == patch.service:
                given = readback.merged(patch.service, current, given)
        fields["url"] = await _destination(rt, patch.url, patch.service, given)
    if patch.enabled is not None:
        fields["enabled"] = patch.enabled
    try:
        ch = await notify_ops.update_channel(rt, channel_id, fields)
    except notify_ops.DuplicateName:
        raise StateConflict(f"a channel named {fields['name']!r} exists",
                            field="name", code="NAME_TAKEN") from None
    except q.NotFound:
        raise Missing("channel not found", params={"what": "channel"}) from None
    return json_response(channel_view(ch))


async def delete_channel(request: Request) -> Response:
    channel_id = _id(request)
    try:
        await notify_ops.delete_channel(runtime_of(request), channel_id)
    except q.NotFound:
        raise Missing("channel not found", params={"what": "channel"}) from None
    return Response(status_code=204)


async def test_channel(request: Request) -> Response:
    """Send a test message now (not through the outbox) and say how it went."""
    rt = runtime_of(request)
    channel_id = _id(request)
    async with rt.db.read() as tx:
        try:
            ch = await q.channel(tx, channel_id)
        except q.NotFound:
            raise Missing("channel not found", params={"what": "channel"}) from None
        lang = words.lang((await q.settings(tx)).language)
    result = await rt.notifier.send_now(ch.url, words.text(lang, "test"),
                                        words.text(lang, "test_body", ch.name))
    return json_response({"ok": result.ok, "error": result.error})


async def list_services(request: Request) -> Response:
    """The picker's catalogue: each service, its fields, their kinds and help keys."""
    return json_response({"items": msgspec.to_builtins(services.SERVICES)})


async def get_rules(request: Request) -> Response:
    async with runtime_of(request).db.read() as tx:
        base = await q.global_rules(tx)
        per_task = await q.all_task_rules(tx)
    return json_response({"global": msgspec.to_builtins(base),
                          "tasks": {k: msgspec.to_builtins(v)
                                    for k, v in per_task.items()}})


def _checked(rules: notify.Rules | notify.RulesPatch | notify.Settings) -> None:
    try:
        if isinstance(rules, notify.Settings):
            notify.check_settings(rules)
        else:
            notify.check(rules)
    except notify.RuleError as exc:
        raise Invalid(str(exc), field=exc.field, code="RULE_INVALID") from None


def settings_view(rt: Runtime, value: notify.Settings) -> dict[str, Any]:
    return {"language": value.language, "base_url": value.base_url,
            # what the run links use now: the setting, else QLEDGE_NOTIFY_BASE_URL
            "link_base_url": rt.notifier.link_base(value) or None}


async def get_settings(request: Request) -> Response:
    rt = runtime_of(request)
    async with rt.db.read() as tx:
        value = await q.settings(tx)
    return json_response(settings_view(rt, value))


async def put_settings(request: Request) -> Response:
    """Changes the fields the body names (`base_url` "" clears it)."""
    rt = runtime_of(request)
    patch = decode_body(await request.body(), notify.Settings)
    _checked(patch)
    return json_response(settings_view(rt, await notify_ops.set_settings(rt, patch)))


async def put_rules(request: Request) -> Response:
    rules = decode_body(await request.body(), notify.Rules)
    _checked(rules)
    await notify_ops.set_global_rules(runtime_of(request), rules)
    return json_response(msgspec.to_builtins(rules))


async def put_task_rules(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    patch = decode_body(await request.body(), notify.RulesPatch)
    _checked(patch)
    if not ids.is_uuid7(task_id):
        raise Missing("task not found", params={"what": "task"})
    try:
        await notify_ops.set_task_rules(runtime_of(request), task_id, patch)
    except q.NotFound:
        raise Missing("task not found", params={"what": "task"}) from None
    return json_response(msgspec.to_builtins(patch))


async def delete_task_rules(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    await notify_ops.set_task_rules(runtime_of(request), task_id, None)
    return Response(status_code=204)


async def list_messages(request: Request) -> Response:
    limit = inputs.query_int(request, "limit", limits.MESSAGES_PAGE.default, 1,
                             limits.MESSAGES_PAGE.most)
    run_id = request.query_params.get("run_id")
    async with runtime_of(request).db.read() as tx:
        items = await q.recent(tx, limit, run_id=run_id)
        counts = await q.counts(tx)
    return json_response({"items": [message_view(m) for m in items], "counts": counts})


# -- the scripts' credential -------------------------------------------------------------

async def script_notify(request: Request) -> Response:
    """POST /notify from a running task's notify.py / sendNotify.js: the credential
    in its environment names the attempt and is only good while that attempt runs."""
    rt = runtime_of(request)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    attempt_id = notify.script_attempt(runtime_of(request).notify_key, token.strip()) \
        if scheme.lower() == "bearer" else None
    if attempt_id is None:
        raise Unauthorized("missing or invalid run credential", code="TOKEN_INVALID")
    body = decode_body(await request.body(), ScriptMessage)
    # A script's output is what it is: control characters go, lengths are cut.
    title = inputs.without_controls(body.title).strip()[:MAX_TITLE] or "(no title)"
    content = "\n".join(inputs.without_controls(line)
                        for line in body.content[:MAX_CONTENT].splitlines())
    sends: dict[str, int] = request.app.state.script_sends
    try:
        queued = await notify_ops.script_message(rt, attempt_id, title, content,
                                                 sends.get(attempt_id, 0))
    except notify_ops.RunFinished:
        raise Forbidden("the run of this credential has finished",
                        code="RUN_FINISHED") from None
    except notify_ops.TooMany:
        raise StateConflict(f"a run may send at most {notify_ops.MAX_SCRIPT_SENDS}"
                            " messages", code="TOO_MANY_SENDS",
                            params={"max": notify_ops.MAX_SCRIPT_SENDS}) from None
    if len(sends) > 4096:
        sends.clear()
    sends[attempt_id] = sends.get(attempt_id, 0) + 1
    return json_response({"queued": queued}, 202)


routes = [
    Route("/notifications/channels", list_channels, methods=["GET"]),
    Route("/notifications/channels", create_channel, methods=["POST"]),
    Route("/notifications/channels/{channel_id}", update_channel, methods=["PATCH", "PUT"]),
    Route("/notifications/channels/{channel_id}", delete_channel, methods=["DELETE"]),
    Route("/notifications/channels/{channel_id}/test", test_channel, methods=["POST"]),
    Route("/notification-services", list_services, methods=["GET"]),
    Route("/notifications/rules", get_rules, methods=["GET"]),
    Route("/notifications/rules", put_rules, methods=["PUT"]),
    Route("/notifications/rules/tasks/{task_id}", put_task_rules, methods=["PUT"]),
    Route("/notifications/rules/tasks/{task_id}", delete_task_rules, methods=["DELETE"]),
    Route("/notifications/messages", list_messages, methods=["GET"]),
    Route("/notifications/settings", get_settings, methods=["GET"]),
    Route("/notifications/settings", put_settings, methods=["PUT", "PATCH"]),
]

public_routes = [Route("/notify", script_notify, methods=["POST"])]
