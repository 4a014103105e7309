"""The notification service picker: the services QingLong users use, the fields each
one needs, and the apprise URL those fields make (docs/notifications.md, "Channels").

Pure (no I/O, no apprise import): `build_url` shapes the URL from the fields and checks
each field against the pattern apprise's own plugin applies (so a wrong token is named
here, field by field, with a stable code); the API then asks apprise whether it accepts
the URL, as for a hand-written one. Field values are percent-quoted into the URL, so no
value can add a path segment, a query parameter or a host.

A channel stores only the URL it made; `service_of` tells a URL's catalogue entry back
by its scheme (every entry's schemes are its own), so no field is stored or echoed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

import msgspec

from ..fields import FieldError, text

MAX_VALUE = 512
KINDS = ("secret", "text", "url", "number", "choice")


class Field(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    kind: str  # one of KINDS; "secret" fields are typed into a password input
    required: bool = True
    help: str | None = None  # i18n key of its help text (panel: i18n.js)
    choices: tuple[str, ...] = ()  # kind "choice": the values, the first the default
    pattern: str | None = None  # the characters apprise's plugin accepts (whole value)
    chars: str | None = None  # that pattern's kind, a key of CHARS


class Service(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: str
    label: str  # its name in English (the panel's: i18n.js `svc.n.<id>`)
    schemes: tuple[str, ...]  # the apprise schemes its URLs use (unique to it)
    fields: tuple[Field, ...]
    help: str | None = None  # i18n key: where the user finds the token


# What a field's pattern allows, by kind: a refusal's code is CHARS_<KIND> (the panel
# says it in its language: i18n.js `code.CHARS_<KIND>`), its English message this text.
CHARS = {
    "word": "letters, digits, - and _", "alnum": "letters and digits",
    "dash": "dash", "dot": "dot",
    "pushplus": "32 to 64 letters, digits, - and _", "topic": "1 to 64 letters, digits, - and _",
    "tg_token": "digits, a colon, then letters, digits, - and _ (123456:ABC-def)",
    "tg_chat": "a number or a channel name without the @",
    "user": "letters, digits and _ @ . -", "host": "a host name",
    "email": "an e-mail address", "emails": "e-mail addresses separated by commas",
}
WORD = "word"
ALNUM = "alnum"


def _secret(name: str, pattern: str | None = r"[A-Za-z0-9_-]+", chars: str | None = WORD,
            required: bool = True, help: str | None = None) -> Field:
    return Field(name=name, kind="secret", required=required, help=help, pattern=pattern,
                 chars=chars)


def _server(required: bool = False, help: str | None = "svc.h.server") -> Field:
    return Field(name="server", kind="url", required=required, help=help)


SERVICES: tuple[Service, ...] = (
    Service(id="pushplus", label="PushPlus", schemes=("pushplus",), help="svc.h.pushplus",
            fields=(_secret("token", r"[A-Za-z0-9_-]{32,64}", "pushplus"),
                    Field(name="topic", kind="text", required=False, help="svc.h.topic",
                          pattern=r"[A-Za-z0-9_-]+", chars=WORD))),
    Service(id="serverchan", label="ServerChan (Server酱)", schemes=("schan",),
            help="svc.h.serverchan",
            fields=(_secret("sendkey", r"[A-Za-z0-9-]+", "dash"),)),
    Service(id="bark", label="Bark", schemes=("bark", "barks"), help="svc.h.bark",
            fields=(_secret("device_key", r"[A-Za-z0-9_-]+"), _server())),
    Service(id="wecom_bot", label="WeCom group bot (企业微信群机器人)", schemes=("wecombot",),
            help="svc.h.wecom_bot", fields=(_secret("key"),)),
    Service(id="wecom_app", label="WeCom app (企业微信应用)", schemes=("wechat",),
            help="svc.h.wecom_app",
            fields=(Field(name="corp_id", kind="text", pattern=r"[A-Za-z0-9_-]+", chars=WORD),
                    _secret("corp_secret"),
                    Field(name="agent_id", kind="number"),
                    Field(name="to_user", kind="text", required=False, help="svc.h.to_user",
                          pattern=r"@?[A-Za-z0-9][A-Za-z0-9_@.-]*",
                          chars="user"))),
    Service(id="dingtalk", label="DingTalk (钉钉)", schemes=("dingtalk",), help="svc.h.dingtalk",
            fields=(_secret("token", r"[A-Za-z0-9]+", ALNUM),
                    _secret("sign_secret", r"[A-Za-z0-9]+", ALNUM, required=False,
                            help="svc.h.sign_secret"))),
    Service(id="feishu", label="Feishu (飞书)", schemes=("feishu",), help="svc.h.feishu",
            fields=(_secret("token"),)),
    Service(id="lark", label="Lark", schemes=("lark",), help="svc.h.feishu",
            fields=(_secret("token", r"[A-Za-z0-9-]+", "dash"),)),
    Service(id="telegram", label="Telegram", schemes=("tgram",), help="svc.h.telegram",
            fields=(_secret("bot_token", r"[0-9]+:[A-Za-z0-9_-]+", "tg_token"),
                    Field(name="chat_id", kind="text", pattern=r"-?[0-9]{1,32}|[A-Za-z_-]"
                          r"[A-Za-z0-9_-]+", chars="tg_chat"))),
    Service(id="gotify", label="Gotify", schemes=("gotify", "gotifys"),
            fields=(_server(True, None), _secret("token", r"[A-Za-z0-9._-]+",
                                                 "dot"))),
    Service(id="ntfy", label="ntfy", schemes=("ntfy", "ntfys"), help="svc.h.ntfy",
            fields=(Field(name="topic", kind="text", pattern=r"[A-Za-z0-9_-]{1,64}",
                          chars="topic"), _server(),
                    _secret("access_token", None, None, required=False))),
    Service(id="pushdeer", label="PushDeer", schemes=("pushdeer", "pushdeers"),
            fields=(_secret("pushkey", r"[A-Za-z0-9]+", ALNUM), _server())),
    Service(id="email", label="E-mail (SMTP)", schemes=("mailto", "mailtos"),
            help="svc.h.email",
            fields=(Field(name="smtp_host", kind="text", pattern=r"[A-Za-z0-9.-]+",
                          chars="host"),
                    Field(name="smtp_port", kind="number", required=False),
                    Field(name="security", kind="choice", choices=("ssl", "starttls", "none")),
                    Field(name="email", kind="text", pattern=r"[^@\s]+@[^@\s]+",
                          chars="email"),
                    _secret("password", None, None, required=False),
                    Field(name="to", kind="text", required=False, help="svc.h.to",
                          pattern=r"[^@\s,]+@[^@\s,]+(,[^@\s,]+@[^@\s,]+)*",
                          chars="emails"))),
    Service(id="webhook", label="Webhook (JSON)", schemes=("json", "jsons"),
            help="svc.h.webhook", fields=(Field(name="url", kind="url"),)),
)
BY_ID = {s.id: s for s in SERVICES}
_BY_SCHEME = {scheme: s.id for s in SERVICES for scheme in s.schemes}


def service_of(url: str) -> str | None:
    """The catalogue id of an apprise URL, by its scheme; None: another apprise service."""
    return _BY_SCHEME.get(url.split("://", 1)[0].strip().lower())


def _q(value: str) -> str:
    return quote(value, safe="")


def _values(service: Service, raw: Mapping[str, str]) -> dict[str, str]:
    """Each field checked: unknown names refused, required ones present, the rest shaped."""
    names = {f.name for f in service.fields}
    for name in raw:
        if name not in names:
            raise FieldError("UNKNOWN_FIELD", f"fields.{name}"[:100],
                             f"{service.id} has no field {name!r}", service=service.id)
    out: dict[str, str] = {}
    for f in service.fields:
        where = f"fields.{f.name}"
        value = text(str(raw.get(f.name, "")).strip(), where, MAX_VALUE)
        if not value:
            if f.required and f.kind != "choice":
                raise FieldError("EMPTY", where, f"{where} must not be empty")
            value = f.choices[0] if f.choices else ""
        elif f.kind == "number" and not value.isdigit():
            raise FieldError("NOT_A_NUMBER", where, f"{where} must be a whole number")
        elif f.kind == "choice" and value not in f.choices:
            raise FieldError("NOT_ONE_OF", where, f"{where} must be one of "
                             + ", ".join(f.choices), allowed=", ".join(f.choices))
        elif f.pattern is not None and not re.fullmatch(f.pattern, value):
            kind = f.chars or WORD
            raise FieldError(f"CHARS_{kind.upper()}", where, f"{where} must be {CHARS[kind]}")
        out[f.name] = value
    return out


def _host(value: str, where: str, plain: str, secure: str,
          path: bool = False) -> tuple[str, str]:
    """(scheme, host[:port][/path]) of an http(s) server URL: https → the secure scheme."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FieldError("BAD_URL", where, f"{where} must be an http:// or https:// URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise FieldError("URL_EXTRAS", where, f"{where} must be scheme://host[:port]/path,"
                         " without credentials, query or fragment")
    rest = parts.path.rstrip("/")
    if rest and not path:
        raise FieldError("URL_EXTRAS", where, f"{where} must be scheme://host[:port] only")
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        raise FieldError("BAD_URL", where, f"{where} has a bad port") from None
    path_q = "/".join(_q(seg) for seg in rest.split("/")) if rest else ""
    return (secure if parts.scheme == "https" else plain), f"{parts.hostname}{port}{path_q}"


def build_url(service_id: str, fields: Mapping[str, str]) -> str:
    """The apprise URL of `service_id` with `fields`; FieldError names the bad field."""
    service = BY_ID.get(service_id)
    if service is None:
        raise FieldError("UNKNOWN_SERVICE", "service", f"unknown service {service_id!r}"[:200])
    v = _values(service, fields)
    q = {k: _q(x) for k, x in v.items()}
    match service.id:
        case "pushplus":
            return f"pushplus://{q['token']}" + (f"/{q['topic']}" if v["topic"] else "")
        case "serverchan":
            return f"schan://{q['sendkey']}"
        case "bark":
            scheme, host = ("barks", "api.day.app") if not v["server"] else \
                _host(v["server"], "fields.server", "bark", "barks")
            return f"{scheme}://{host}/{q['device_key']}"
        case "wecom_bot":
            return f"wecombot://{q['key']}"
        case "wecom_app":
            to = v["to_user"] or "@all"
            to = to if to.startswith("@") else "@" + to
            return f"wechat://{q['corp_id']}:{q['corp_secret']}@{q['agent_id']}/{_q(to)}"
        case "dingtalk":
            secret = f"{q['sign_secret']}@" if v["sign_secret"] else ""
            return f"dingtalk://{secret}{q['token']}/"
        case "feishu" | "lark":
            return f"{service.id}://{q['token']}"
        case "telegram":
            return f"tgram://{v['bot_token']}/{q['chat_id']}"  # the ':' stays: apprise's form
        case "gotify":
            scheme, host = _host(v["server"], "fields.server", "gotify", "gotifys", path=True)
            return f"{scheme}://{host}/{q['token']}"
        case "ntfy":
            scheme, host = ("ntfys", "ntfy.sh") if not v["server"] else \
                _host(v["server"], "fields.server", "ntfy", "ntfys", path=True)
            token = f"?token={q['access_token']}" if v["access_token"] else ""
            return f"{scheme}://{host}/{q['topic']}{token}"
        case "pushdeer":
            if not v["server"]:
                return f"pushdeers://{q['pushkey']}"
            scheme, host = _host(v["server"], "fields.server", "pushdeer", "pushdeers")
            return f"{scheme}://{host}/{q['pushkey']}"
        case "email":
            return _email(v, q)
        case _:  # webhook
            scheme, host = _host(v["url"], "fields.url", "json", "jsons", path=True)
            return f"{scheme}://{host}"


def _email(v: dict[str, str], q: dict[str, str]) -> str:
    scheme, mode = {"ssl": ("mailtos", "ssl"), "starttls": ("mailtos", "starttls"),
                    "none": ("mailto", "insecure")}[v["security"]]
    # The sign-in is the address itself (as QingLong's SMTP_EMAIL); the host is the server.
    auth = f"{q['email']}:{q['password']}@" if v["password"] else ""
    port = f":{v['smtp_port']}" if v["smtp_port"] else ""
    to = v["to"] or v["email"]
    return (f"{scheme}://{auth}{v['smtp_host']}{port}?from={q['email']}&to={_q(to)}"
            f"&mode={mode}")


def secrets_set(service_id: str, url: str) -> dict[str, bool]:
    """{secret field: whether the URL carries it} — what a channel may show of its
    secrets (never a value). Required secrets are always set; the optional ones are
    read off the URL's shape that `build_url` gives them."""
    parts = urlsplit(url)
    optional = {"sign_secret": parts.username is not None,  # dingtalk://SECRET@token/
                "access_token": "token=" in parts.query,  # ntfy ?token=
                "password": parts.password is not None}  # mailto://addr:PASSWORD@host
    return {f.name: f.required or optional.get(f.name, False)
            for f in BY_ID[service_id].fields if f.kind == "secret"}
