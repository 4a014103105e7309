"""QingLong's subscription form as the native subscription's fields
(http/qinglong/subscriptions.py; docs/qinglong-compat.md, "Subscription fields").

The checking is the native API's (subscriptions/spec.py), answered with 400 as
QingLong's Joi checks do. `PUT` sends only what changes: a field left out stays
(UNSET), as QingLong merges an update into the stored subscription.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import interval
from ...db import subscriptions as subs
from ...fields import FieldError
from ...subscriptions.spec import DEFAULT_EXTENSIONS, TYPES, validate
from .. import subscriptions as native
from ..errors import BadRequest

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
        # Every field a QingLong client leaves out (or sends as null) gets the native
        # default, as QingLong's own model fills them in.
        out.update(msgspec.structs.asdict(native.SubscriptionIn(
            type=body.type, url=body.url, alias=body.alias,
            name=body.name if _given(body.name) and body.name else body.alias)))
    else:
        assert isinstance(body, SubPut) and current is not None
        for key in ("type", "alias"):
            value = getattr(body, key)
            if _given(value) and TYPES.get(value, value) != getattr(current, key):
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
        return validate(out)
    except FieldError as exc:
        raise BadRequest(exc.message, field=exc.field) from None
