"""A picker channel's fields read back off the apprise URL `services.build_url` made
(docs/notifications.md, "Channels"), so an edit can show the fields that are no
secret and keep the ones it is not given.

Pure. Each reading is checked by building the URL again: a URL written by hand, or of
a shape the picker does not make, reads as None (the panel then shows blank fields,
as for any URL apprise knows but the picker does not), never as wrong values."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from ..fields import FieldError
from .services import BY_ID, build_url, secrets_set

SHOWN_KINDS = ("text", "number", "choice")  # never "secret"; nor "url": a path may be one
_SECURE = {"barks", "gotifys", "ntfys", "pushdeers", "jsons", "mailtos"}


def _server(scheme: str, host: str) -> str:
    return f"{'https' if scheme in _SECURE else 'http'}://{host}"


def _last(scheme: str, rest: str) -> tuple[str, str]:
    """(the server URL before the last path segment, that segment unquoted)."""
    host, _, last = rest.rpartition("/")
    return _server(scheme, host), unquote(last)


def _read(service_id: str, url: str) -> dict[str, str]:
    parts = urlsplit(url)
    scheme, netloc, path = parts.scheme, parts.netloc, parts.path
    rest = f"{netloc}{path}"
    match service_id:
        case "pushplus":
            return {"token": unquote(netloc), "topic": unquote(path.lstrip("/"))}
        case "serverchan":
            return {"sendkey": unquote(netloc)}
        case "wecom_bot":
            return {"key": unquote(netloc)}
        case "feishu" | "lark":
            return {"token": unquote(netloc)}
        case "bark":
            server, key = _last(scheme, rest)
            default = scheme == "barks" and netloc == "api.day.app"
            return {"device_key": key, "server": "" if default else server}
        case "wecom_app":
            auth, _, agent = netloc.rpartition("@")
            corp, _, secret = auth.partition(":")
            to = unquote(path.lstrip("/"))
            return {"corp_id": unquote(corp), "corp_secret": unquote(secret), "agent_id": agent,
                    "to_user": "" if to == "@all" else to.removeprefix("@")}
        case "dingtalk":
            secret, _, token = netloc.rpartition("@")
            return {"token": unquote(token), "sign_secret": unquote(secret)}
        case "telegram":
            return {"bot_token": netloc, "chat_id": unquote(path.lstrip("/"))}
        case "gotify":
            server, token = _last(scheme, rest)
            return {"server": server, "token": token}
        case "ntfy":
            server, topic = _last(scheme, rest)
            token = parse_qs(parts.query).get("token", [""])[0]
            default = scheme == "ntfys" and netloc == "ntfy.sh" and path.count("/") == 1
            return {"topic": topic, "server": "" if default else server,
                    "access_token": token}
        case "pushdeer":
            if "/" not in path:
                return {"pushkey": unquote(netloc), "server": ""}
            server, key = _last(scheme, rest)
            return {"pushkey": key, "server": server}
        case "email":
            return _email(scheme, parts.query, netloc)
        case _:  # webhook
            return {"url": _server(scheme, rest)}


def _email(scheme: str, query: str, netloc: str) -> dict[str, str]:
    q = {k: v[0] for k, v in parse_qs(query).items()}
    auth, _, hostport = netloc.rpartition("@")
    host, _, port = hostport.partition(":")
    sender = q.get("from", "")
    security = {"ssl": "ssl", "starttls": "starttls", "insecure": "none"}.get(
        q.get("mode", ""), "")
    return {"smtp_host": host, "smtp_port": port, "security": security, "email": sender,
            "password": unquote(auth.partition(":")[2]) if auth else "",
            "to": "" if q.get("to", "") == sender else q.get("to", "")}


def read_fields(service_id: str, url: str) -> dict[str, str] | None:
    """Every field of the picker's `service_id` as `url` holds it, or None when `url`
    is not exactly what those fields make."""
    if service_id not in BY_ID:
        return None
    try:
        fields = _read(service_id, url)
        if build_url(service_id, fields) != url:
            return None
    except (FieldError, ValueError):
        return None
    return fields


def shown_fields(service_id: str, url: str) -> dict[str, str]:
    """The fields a response may show: only those of SHOWN_KINDS ({} if unreadable)."""
    fields = read_fields(service_id, url) or {}
    return {f.name: fields[f.name] for f in BY_ID[service_id].fields
            if f.kind in SHOWN_KINDS and f.name in fields}


def hidden_set(service_id: str, url: str) -> dict[str, bool]:
    """{secret or server-URL field: whether the URL holds one} — never a value. A URL
    the picker would not make: its secrets as its shape tells (services.secrets_set)."""
    fields = read_fields(service_id, url)
    if fields is None:
        return secrets_set(service_id, url)
    return {f.name: bool(fields[f.name]) for f in BY_ID[service_id].fields
            if f.kind not in SHOWN_KINDS}


def merged(service_id: str, url: str, given: dict[str, str]) -> dict[str, str]:
    """An edit's fields: those given, the rest as the current `url` holds them (when it
    is the same service's, readable); a field is cleared by giving it as ""."""
    return {**(read_fields(service_id, url) or {}), **given}
