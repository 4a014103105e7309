"""QingLong's notification env names → apprise URLs (docs/notifications.md).

An imported QingLong config keeps notifying: a script's send() goes to the
configured channels and to every service these enabled envs describe. Pure:
the caller passes the environment (the enabled envs, then the task's own).
The URLs built here hold the same secrets the envs do; they are never shown,
logged or stored (the outbox names the env, `env:NAME`, and the sender builds
the URL again at send time).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

# (the env that enables the mapping, the apprise service) — the table in the docs.
TABLE: tuple[tuple[str, str], ...] = (
    ("PUSH_KEY", "ServerChan (schan://)"),
    ("BARK_PUSH", "Bark (barks://)"),
    ("TG_BOT_TOKEN", "Telegram (tgram://), with TG_USER_ID"),
    ("DD_BOT_TOKEN", "DingTalk (dingtalk://), with DD_BOT_SECRET if set"),
    ("QYWX_KEY", "WeCom bot (wecombot://)"),
    ("PUSH_PLUS_TOKEN", "PushPlus (pushplus://)"),
    ("GOTIFY_URL", "Gotify (gotify:// or gotifys://), with GOTIFY_TOKEN"),
    ("NTFY_TOPIC", "ntfy (ntfys://), with NTFY_URL, NTFY_TOKEN or NTFY_USERNAME/PASSWORD"),
    ("FSKEY", "Feishu (feishu://)"),
    ("WEBHOOK_URL", "JSON webhook (json:// or jsons://), POST"),
    ("SMTP_SERVER", "E-mail (mailto://), with SMTP_EMAIL, SMTP_PASSWORD, SMTP_SSL,"
                    " SMTP_EMAIL_TO"),
)


def _q(value: str) -> str:
    return quote(value.strip(), safe="")


def _host_url(raw: str, plain: str, secure: str) -> tuple[str, str] | None:
    """(scheme, host[:port][/path]) of an http(s) URL in an env value."""
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return (secure if parts.scheme == "https" else plain,
            parts.netloc + parts.path.rstrip("/"))


def _bark(env: dict[str, str]) -> str | None:
    value = env["BARK_PUSH"].strip()
    hosted = _host_url(value, "bark", "barks")
    if hosted is None:
        return f"barks://api.day.app/{_q(value)}"
    scheme, rest = hosted
    host, _, key = rest.partition("/")
    return f"{scheme}://{host}/{key.strip('/')}" if key else None


def _gotify(env: dict[str, str]) -> str | None:
    hosted = _host_url(env["GOTIFY_URL"], "gotify", "gotifys")
    token = env.get("GOTIFY_TOKEN", "").strip()
    if hosted is None or not token:
        return None
    return f"{hosted[0]}://{hosted[1]}/{_q(token)}"


def _ntfy(env: dict[str, str]) -> str | None:
    topic = _q(env["NTFY_TOPIC"])
    auth = ""
    if env.get("NTFY_USERNAME", "").strip():
        auth = f"{_q(env['NTFY_USERNAME'])}:{_q(env.get('NTFY_PASSWORD', ''))}@"
    query = f"?token={_q(env['NTFY_TOKEN'])}" if env.get("NTFY_TOKEN", "").strip() else ""
    hosted = _host_url(env.get("NTFY_URL", ""), "ntfy", "ntfys")
    if hosted is None:
        return f"ntfys://{auth}ntfy.sh/{topic}{query}"
    return f"{hosted[0]}://{auth}{hosted[1]}/{topic}{query}"


def _smtp(env: dict[str, str]) -> str | None:
    server = env["SMTP_SERVER"].strip()
    sender = env.get("SMTP_EMAIL", "").strip()
    if not server or not sender:
        return None
    to = env.get("SMTP_EMAIL_TO", "").strip().replace(";", ",") or sender
    user = f"{_q(sender)}:{_q(env.get('SMTP_PASSWORD', ''))}@" \
        if env.get("SMTP_PASSWORD", "").strip() else ""
    ssl = env.get("SMTP_SSL", "").strip().lower() == "true"
    scheme, mode = ("mailtos", "ssl") if ssl else ("mailto", "insecure")
    return (f"{scheme}://{user}{server}?from={_q(sender)}&to={_q(to)}&mode={mode}")


def _webhook(env: dict[str, str]) -> str | None:
    hosted = _host_url(env["WEBHOOK_URL"], "json", "jsons")
    return None if hosted is None else f"{hosted[0]}://{hosted[1]}"


def urls(env: dict[str, str]) -> dict[str, str]:
    """{enabling env name: apprise URL} for every mapping `env` configures."""
    out: dict[str, str] = {}

    def has(name: str) -> bool:
        return bool(env.get(name, "").strip())

    if has("PUSH_KEY"):
        out["PUSH_KEY"] = f"schan://{_q(env['PUSH_KEY'])}"
    if has("BARK_PUSH") and (url := _bark(env)):
        out["BARK_PUSH"] = url
    if has("TG_BOT_TOKEN") and has("TG_USER_ID"):
        out["TG_BOT_TOKEN"] = f"tgram://{env['TG_BOT_TOKEN'].strip()}/{_q(env['TG_USER_ID'])}"
    if has("DD_BOT_TOKEN"):
        secret = f"{_q(env['DD_BOT_SECRET'])}@" if has("DD_BOT_SECRET") else ""
        out["DD_BOT_TOKEN"] = f"dingtalk://{secret}{_q(env['DD_BOT_TOKEN'])}/"
    if has("QYWX_KEY"):
        out["QYWX_KEY"] = f"wecombot://{_q(env['QYWX_KEY'])}"
    if has("PUSH_PLUS_TOKEN"):
        out["PUSH_PLUS_TOKEN"] = f"pushplus://{_q(env['PUSH_PLUS_TOKEN'])}"
    if has("GOTIFY_URL") and (url := _gotify(env)):
        out["GOTIFY_URL"] = url
    if has("NTFY_TOPIC") and (url := _ntfy(env)):
        out["NTFY_TOPIC"] = url
    if has("FSKEY"):
        out["FSKEY"] = f"feishu://{_q(env['FSKEY'])}"
    if has("WEBHOOK_URL") and (url := _webhook(env)):
        out["WEBHOOK_URL"] = url
    if has("SMTP_SERVER") and (url := _smtp(env)):
        out["SMTP_SERVER"] = url
    return out


# -- for `qledge import qinglong` (docs/migrating-from-qinglong.md) ---------------------

# Every notification variable of QingLong's sample/notify.py and config.sample.sh.
NAMES = frozenset((
    "HITOKOTO", "SKIP_PUSH_TITLE", "CONSOLE", "BARK_PUSH", "BARK_ARCHIVE", "BARK_GROUP",
    "BARK_SOUND", "BARK_ICON", "BARK_LEVEL", "BARK_URL", "DD_BOT_SECRET", "DD_BOT_TOKEN",
    "FSKEY", "FSSECRET", "GOBOT_URL", "GOBOT_QQ", "GOBOT_TOKEN", "GOTIFY_URL", "GOTIFY_TOKEN",
    "GOTIFY_PRIORITY", "IGOT_PUSH_KEY", "PUSH_KEY", "DEER_KEY", "DEER_URL", "CHAT_URL",
    "CHAT_TOKEN", "PUSH_PLUS_TOKEN", "PUSH_PLUS_USER", "PUSH_PLUS_TEMPLATE",
    "PUSH_PLUS_CHANNEL", "PUSH_PLUS_WEBHOOK", "PUSH_PLUS_CALLBACKURL", "PUSH_PLUS_TO",
    "WE_PLUS_BOT_TOKEN", "WE_PLUS_BOT_RECEIVER", "WE_PLUS_BOT_VERSION", "QMSG_KEY",
    "QMSG_TYPE", "QYWX_ORIGIN", "QYWX_AM", "QYWX_KEY", "TG_BOT_TOKEN", "TG_USER_ID",
    "TG_API_HOST", "TG_PROXY_AUTH", "TG_PROXY_HOST", "TG_PROXY_PORT", "AIBOTK_KEY",
    "AIBOTK_TYPE", "AIBOTK_NAME", "SMTP_SERVICE", "SMTP_SERVER", "SMTP_SSL", "SMTP_EMAIL",
    "SMTP_EMAIL_TO", "SMTP_PASSWORD", "SMTP_NAME", "PUSHME_KEY", "PUSHME_URL",
    "CHRONOCAT_QQ", "CHRONOCAT_TOKEN", "CHRONOCAT_URL", "WEBHOOK_URL", "WEBHOOK_BODY",
    "WEBHOOK_HEADERS", "WEBHOOK_METHOD", "WEBHOOK_CONTENT_TYPE", "NTFY_URL", "NTFY_TOPIC",
    "NTFY_PRIORITY", "NTFY_TOKEN", "NTFY_USERNAME", "NTFY_PASSWORD", "NTFY_ACTIONS",
    "WXPUSHER_APP_TOKEN", "WXPUSHER_TOPIC_IDS", "WXPUSHER_UIDS", "WXPUSHER_SPT_LIST",
    "OPENILINK_APP_TOKEN", "OPENILINK_HUB_URL", "OPENILINK_CONTEXT_TOKEN"))

# The variable that turns on a service `urls` has no mapping for, and the service.
UNMAPPED: dict[str, str] = {
    "QYWX_AM": "WeCom app", "IGOT_PUSH_KEY": "iGot", "GOBOT_URL": "go-cqhttp",
    "DEER_KEY": "PushDeer", "CHAT_URL": "Synology Chat", "WE_PLUS_BOT_TOKEN": "WePlusBot",
    "QMSG_KEY": "Qmsg", "AIBOTK_KEY": "aibotk", "PUSHME_KEY": "PushMe",
    "CHRONOCAT_URL": "Chronocat", "WXPUSHER_APP_TOKEN": "WxPusher",
    "WXPUSHER_SPT_LIST": "WxPusher SPT", "OPENILINK_APP_TOKEN": "OpeniLink",
    "SMTP_SERVICE": "e-mail by service name (SMTP_SERVER is mapped)"}

# Variables that change how a mapped service delivers, which its URL does not carry.
DROPPED = ("TG_API_HOST", "TG_PROXY_HOST", "FSSECRET", "QYWX_ORIGIN", "PUSH_PLUS_USER",
           "WEBHOOK_BODY", "WEBHOOK_HEADERS")

# QingLong's own channel (system settings, back/data/notify.ts): mode → {field: env name}.
PANEL: dict[str, dict[str, str]] = {
    "telegramBot": {"telegramBotToken": "TG_BOT_TOKEN", "telegramBotUserId": "TG_USER_ID",
                    "telegramBotApiHost": "TG_API_HOST", "telegramBotProxyHost": "TG_PROXY_HOST"},
    "bark": {"barkPush": "BARK_PUSH"},
    "serverChan": {"serverChanKey": "PUSH_KEY"},
    "dingtalkBot": {"dingtalkBotToken": "DD_BOT_TOKEN", "dingtalkBotSecret": "DD_BOT_SECRET"},
    "weWorkBot": {"weWorkBotKey": "QYWX_KEY", "weWorkOrigin": "QYWX_ORIGIN"},
    "pushPlus": {"pushPlusToken": "PUSH_PLUS_TOKEN", "pushPlusUser": "PUSH_PLUS_USER"},
    "gotify": {"gotifyUrl": "GOTIFY_URL", "gotifyToken": "GOTIFY_TOKEN"},
    "ntfy": {"ntfyUrl": "NTFY_URL", "ntfyTopic": "NTFY_TOPIC", "ntfyToken": "NTFY_TOKEN",
             "ntfyUsername": "NTFY_USERNAME", "ntfyPassword": "NTFY_PASSWORD"},
    "feishu": {"larkKey": "FSKEY", "larkSecret": "FSSECRET"},
    "webhook": {"webhookUrl": "WEBHOOK_URL", "webhookBody": "WEBHOOK_BODY",
                "webhookHeaders": "WEBHOOK_HEADERS"},
}


def panel_env(info: dict[str, object]) -> dict[str, str] | None:
    """QingLong's own channel as the notification envs `urls` reads; None: a mode
    with no mapping (then the mode's name is all an import reports)."""
    fields = PANEL.get(str(info.get("type", "")))
    if fields is None:
        return None
    return {env: str(info[key]) for key, env in fields.items()
            if isinstance(info.get(key), str | int) and str(info[key]).strip()}
