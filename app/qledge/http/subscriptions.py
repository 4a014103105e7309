"""Subscriptions, native admin API: /api/v1/subscriptions (docs/subscriptions.md).

The credential (`secret`) is write-only: answers say `has_secret`, never the value,
and no error message echoes it. `alias` and `type` are fixed at creation (the alias
is the folder the pull owns, and the tasks' commands name it).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, ids
from ..db import rows
from ..db import subscriptions as subs
from ..operations import subscriptions as ops
from ..runtime.lifecycle import Runtime
from ..subscriptions.spec import DEFAULT_EXTENSIONS, Caps, pattern_error
from . import inputs
from .errors import Invalid, Missing, StateConflict, decode_body, json_response

UNSET = msgspec.UNSET
ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
BRANCH = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$")
EXTENSION = re.compile(r"^[A-Za-z0-9]{1,10}$")
CAP_BOUNDS = {"repo_bytes": (1 << 10, 1 << 30), "files": (1, 20_000),
              "file_bytes": (1, 64 << 20), "timeout_s": (10, 3600)}
TYPES = {"git": "git", "file": "file", "public-repo": "git", "private-repo": "git"}


class SubscriptionIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    type: str
    url: str
    alias: str
    branch: str | None = None
    schedule: str | None = None
    default_schedule: str | None = None
    whitelist: str = ""
    blacklist: str = ""
    dependences: str = ""
    extensions: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_EXTENSIONS))
    auto_add: bool = True
    auto_delete: bool = True
    vanished: str = "delete"
    sub_before: str = ""
    sub_after: str = ""
    enabled: bool = True
    username: str | None = None
    secret: str | None = None
    caps: Caps = msgspec.field(default_factory=Caps)


class SubscriptionPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | msgspec.UnsetType = UNSET
    url: str | msgspec.UnsetType = UNSET
    branch: str | msgspec.UnsetType | None = UNSET
    schedule: str | msgspec.UnsetType | None = UNSET
    default_schedule: str | msgspec.UnsetType | None = UNSET
    whitelist: str | msgspec.UnsetType = UNSET
    blacklist: str | msgspec.UnsetType = UNSET
    dependences: str | msgspec.UnsetType = UNSET
    extensions: list[str] | msgspec.UnsetType = UNSET
    auto_add: bool | msgspec.UnsetType = UNSET
    auto_delete: bool | msgspec.UnsetType = UNSET
    vanished: str | msgspec.UnsetType = UNSET
    sub_before: str | msgspec.UnsetType = UNSET
    sub_after: str | msgspec.UnsetType = UNSET
    enabled: bool | msgspec.UnsetType = UNSET
    username: str | msgspec.UnsetType | None = UNSET
    secret: str | msgspec.UnsetType | None = UNSET
    caps: Caps | msgspec.UnsetType = UNSET


def validate(fields: dict[str, Any]) -> dict[str, Any]:
    """Checks beyond types; each error names its field and never echoes a secret."""
    out = dict(fields)
    if "name" in out:
        out["name"] = inputs.text(out["name"].strip(), "name", 200)
        if not out["name"]:
            raise Invalid("name must not be empty", field="name")
    if "type" in out:
        if out["type"] not in TYPES:
            raise Invalid("type must be git or file", field="type")
        out["type"] = TYPES[out["type"]]
    if "url" in out:
        out["url"] = _url(out["url"])
    if "alias" in out and not ALIAS.match(out["alias"]):
        raise Invalid("alias must be one folder name: letters, digits, '.', '_', '-' "
                      "(at most 100, not starting with '.')", field="alias")
    if out.get("branch") is not None and (
            not BRANCH.match(out["branch"]) or ".." in out["branch"]):
        raise Invalid("branch is not a valid branch name", field="branch")
    for key in ("schedule", "default_schedule"):
        if out.get(key) is not None:
            try:
                out[key] = cron.validate(out[key])
            except cron.CronError as exc:
                raise Invalid(f"{key}: {exc}", field=key) from None
    for key in ("whitelist", "blacklist", "dependences"):
        if key in out:
            inputs.text(out[key], key, 1000)
            why = pattern_error(out[key])
            if why is not None:
                raise Invalid(f"{key} is not a valid regular expression: {why}", field=key)
    if "extensions" in out:
        exts = [e.lstrip(".") for e in out["extensions"]]
        if not exts or len(exts) > 20 or not all(EXTENSION.match(e) for e in exts):
            raise Invalid("extensions must be 1-20 names like js or py", field="extensions")
        out["extensions"] = exts
    if "vanished" in out and out["vanished"] not in ("delete", "disable"):
        raise Invalid("vanished must be delete or disable", field="vanished")
    for key in ("sub_before", "sub_after"):
        if key in out:
            inputs.text(out[key], key, 4000, lines=True)
    if out.get("username") is not None:
        inputs.text(out["username"], "username", 200)
        if ":" in out["username"]:
            raise Invalid("username must not contain ':'", field="username")
    secret = out.get("secret")
    if secret is not None and (len(secret) > 4096 or inputs.without_controls(secret) != secret):
        raise Invalid("secret must be at most 4096 characters without control "
                          "characters", field="secret")
    if "caps" in out:
        for key, (lo, hi) in CAP_BOUNDS.items():
            inputs.bounded(getattr(out["caps"], key), f"caps.{key}", lo, hi)
    return out


# scp-like git URLs: git@github.com:owner/repo.git
SCP_URL = re.compile(r"^[\w.-]+@([\w.-]+):(?!//)/?(.+)$")


def _https_for(url: str) -> str | None:
    """The https:// URL an SSH URL most likely has (GitHub, Gitea, GitLab alike)."""
    scp = SCP_URL.match(url)
    if scp:
        return f"https://{scp[1]}/{scp[2]}"
    parts = urlsplit(url)
    if parts.scheme in ("ssh", "git+ssh") and parts.hostname:
        return f"https://{parts.hostname}{parts.path}"
    return None


def _url(raw: str) -> str:
    url = inputs.text(raw.strip(), "url", 2000)
    parts = urlsplit(url)
    https = _https_for(url)
    if https is not None:
        # No SSH: the image has no ssh client, and dulwich would need paramiko and
        # cryptography (docs/subscriptions.md, "SSH").
        raise Invalid(f"SSH URLs are not supported: use the HTTPS URL ({https}) with a "
                      "token in secret", field="url")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid("url must be an http:// or https:// URL (SSH URLs are not "
                      "supported: use a token over HTTPS)", field="url")
    if parts.username is not None or parts.password is not None:
        raise Invalid("url must not carry credentials: put them in username and secret",
                      field="url")
    return url


def view(sub: subs.Subscription) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(sub)
    body.pop("sync_run_id", None)
    body["sync_pending"] = sub.sync_run_id is not None
    return body


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def _sub_id(request: Request) -> str:
    sub_id: str = request.path_params["sub_id"]
    if not ids.is_uuid7(sub_id):
        raise Missing("subscription not found")
    return sub_id


async def list_(request: Request) -> Response:
    async with _rt(request).db.read() as tx:
        items = await subs.list_all(tx)
    return json_response({"items": [view(s) for s in items]})


async def create(request: Request) -> Response:
    body = decode_body(await request.body(), SubscriptionIn)
    fields = validate(msgspec.structs.asdict(body))
    try:
        sub = await ops.create(_rt(request), fields)
    except ops.AliasTaken as exc:
        raise Invalid(str(exc), field="alias") from None
    return json_response(view(sub), 201)


async def get(request: Request) -> Response:
    sub_id = _sub_id(request)
    try:
        async with _rt(request).db.read() as tx:
            sub = await subs.get(tx, sub_id)
    except rows.NotFound:
        raise Missing("subscription not found") from None
    return json_response(view(sub))


async def update(request: Request) -> Response:
    sub_id = _sub_id(request)
    patch = decode_body(await request.body(), SubscriptionPatch)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not UNSET}
    try:
        sub = await ops.update(_rt(request), sub_id, validate(fields))
    except rows.NotFound:
        raise Missing("subscription not found") from None
    return json_response(view(sub))


async def delete(request: Request) -> Response:
    try:
        await ops.delete(_rt(request), _sub_id(request))
    except rows.NotFound:
        raise Missing("subscription not found") from None
    return Response(status_code=204)


async def pull(request: Request) -> Response:
    try:
        run = await ops.pull_now(_rt(request), _sub_id(request))
    except rows.NotFound:
        raise Missing("subscription not found") from None
    except ops.PullBusy as exc:
        raise StateConflict(str(exc)) from None
    return json_response({"run_id": run.id, "status": str(run.status)}, 202)


routes = [
    Route("/subscriptions", list_, methods=["GET"]),
    Route("/subscriptions", create, methods=["POST"]),
    Route("/subscriptions/{sub_id}", get, methods=["GET"]),
    Route("/subscriptions/{sub_id}", update, methods=["PUT", "PATCH"]),
    Route("/subscriptions/{sub_id}", delete, methods=["DELETE"]),
    Route("/subscriptions/{sub_id}/pull", pull, methods=["POST"]),
]
