"""The service picker's URLs against apprise's own parser: every catalogue entry builds
a URL that apprise accepts, instantiates as the expected plugin, and reads back the
values the fields gave; bad fields are refused with stable codes and parameters."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import apprise
import httpx
import pytest
from apprise.plugins.bark import NotifyBark
from apprise.plugins.custom_json import NotifyJSON
from apprise.plugins.dingtalk import NotifyDingTalk
from apprise.plugins.email import NotifyEmail
from apprise.plugins.feishu import NotifyFeishu
from apprise.plugins.gotify import NotifyGotify
from apprise.plugins.lark import NotifyLark
from apprise.plugins.ntfy import NotifyNtfy
from apprise.plugins.pushdeer import NotifyPushDeer
from apprise.plugins.pushplus import NotifyPushplus
from apprise.plugins.serverchan import NotifyServerChan
from apprise.plugins.telegram import NotifyTelegram
from apprise.plugins.wechat import NotifyWeChat
from apprise.plugins.wecombot import NotifyWeComBot
from apprise.utils.parse import parse_url

from qledge.fields import FieldError
from qledge.notifications import services
from qledge.notifications.services import build_url, service_of

from _receivers import HttpReceiver
from support import Server

PUSHPLUS = "0123456789abcdef0123456789abcdef"

# service id: (fields, the plugin class, {plugin attribute: the value it must read back})
CASES: dict[str, tuple[dict[str, str], type[Any], dict[str, object]]] = {
    "pushplus": ({"token": PUSHPLUS, "topic": "team_1"}, NotifyPushplus,
                 {"token": PUSHPLUS, "topics": ["team_1"]}),
    "serverchan": ({"sendkey": "SCT123456TAbCdEfGh"}, NotifyServerChan,
                   {"token": "SCT123456TAbCdEfGh"}),
    "bark": ({"device_key": "dEvIcE12", "server": "http://bark.lan:8080"}, NotifyBark,
             {"host": "bark.lan", "port": 8080, "secure": False, "targets": ["dEvIcE12"]}),
    "wecom_bot": ({"key": "693a91f6-7aaa-4bc4-97a0-0ec2"}, NotifyWeComBot,
                  {"key": "693a91f6-7aaa-4bc4-97a0-0ec2"}),
    "wecom_app": ({"corp_id": "ww12ab", "corp_secret": "Sec_ret-1", "agent_id": "1000002",
                   "to_user": "zhangsan"}, NotifyWeChat,
                  {"corpid": "ww12ab", "corpsecret": "Sec_ret-1", "agentid": "1000002",
                   "users": ["zhangsan"]}),
    "dingtalk": ({"token": "abc123", "sign_secret": "SEC99"}, NotifyDingTalk,
                 {"token": "abc123", "secret": "SEC99"}),
    "feishu": ({"token": "0a1b-2c_3d"}, NotifyFeishu, {"token": "0a1b-2c_3d"}),
    "lark": ({"token": "0a1b-2c3d"}, NotifyLark, {"token": "0a1b-2c3d"}),
    "telegram": ({"bot_token": "123456789:AAH_x-y", "chat_id": "-100123"}, NotifyTelegram,
                 {"bot_token": "123456789:AAH_x-y", "targets": [(-100123, None)]}),
    "gotify": ({"server": "https://push.example.com/gotify/", "token": "AbC.12"},
               NotifyGotify, {"host": "push.example.com", "fullpath": "/gotify/",
                              "token": "AbC.12", "secure": True}),
    "ntfy": ({"topic": "alerts_1", "access_token": "tk_abc"}, NotifyNtfy,
             {"host": "ntfy.sh", "topics": ["alerts_1"], "token": "tk_abc"}),
    "pushdeer": ({"pushkey": "PDU12ab"}, NotifyPushDeer, {"push_key": "PDU12ab"}),
    "email": ({"smtp_host": "smtp.qq.com", "smtp_port": "465", "email": "me@qq.com",
               "password": "p@ss/w?rd&x", "to": "a@b.cn,c@d.cn"}, NotifyEmail,
              {"smtp_host": "smtp.qq.com", "port": 465, "user": "me@qq.com",
               "password": "p@ss/w?rd&x", "secure_mode": "ssl",
               "targets": [(False, "a@b.cn"), (False, "c@d.cn")]}),
    "webhook": ({"url": "https://hooks.example.com:8443/in/x"}, NotifyJSON,
                {"host": "hooks.example.com", "port": 8443, "fullpath": "/in/x",
                 "secure": True}),
}


def test_every_catalogue_entry_has_a_case() -> None:
    assert set(CASES) == {s.id for s in services.SERVICES}


@pytest.mark.parametrize("service_id", sorted(CASES))
def test_apprise_accepts_and_reads_back(service_id: str) -> None:
    fields, plugin, expect = CASES[service_id]
    url = build_url(service_id, fields)
    assert service_of(url) == service_id
    box = apprise.Apprise()
    assert box.add(url) is True, url
    assert type(box[0]) is plugin
    for attr, value in expect.items():
        assert getattr(box[0], attr) == value, (attr, url)
    # The plugin's own parser and apprise's generic one agree on the scheme.
    assert plugin.parse_url(url) is not None
    assert parse_url(url, verify_host=False)["schema"] == url.split("://")[0]


def test_optional_fields_take_their_defaults() -> None:
    assert build_url("bark", {"device_key": "k1"}) == "barks://api.day.app/k1"
    assert build_url("wecom_app", {"corp_id": "w", "corp_secret": "s", "agent_id": "7"}) \
        .endswith("@7/%40all")
    assert build_url("dingtalk", {"token": "t1"}) == "dingtalk://t1/"
    assert build_url("pushdeer", {"pushkey": "k1", "server": "http://deer.lan:81"}) \
        == "pushdeer://deer.lan:81/k1"
    mail = build_url("email", {"smtp_host": "mail.lan", "email": "a@b.cn", "security": "none"})
    assert mail == "mailto://mail.lan?from=a%40b.cn&to=a%40b.cn&mode=insecure"
    assert apprise.Apprise().add(mail)


def _refused(service_id: str, fields: dict[str, str]) -> FieldError:
    with pytest.raises(FieldError) as caught:
        build_url(service_id, fields)
    return caught.value


@pytest.mark.parametrize(("service_id", "fields", "code", "field"), [
    ("nosuch", {}, "UNKNOWN_SERVICE", "service"),
    ("pushplus", {}, "EMPTY", "fields.token"),
    ("pushplus", {"token": "   "}, "EMPTY", "fields.token"),
    ("pushplus", {"token": "short"}, "CHARS_PUSHPLUS", "fields.token"),
    ("pushplus", {"token": PUSHPLUS, "url": "x"}, "UNKNOWN_FIELD", "fields.url"),
    ("serverchan", {"sendkey": "SCT1/../x"}, "CHARS_DASH", "fields.sendkey"),
    ("telegram", {"bot_token": "nocolon", "chat_id": "1"}, "CHARS_TG_TOKEN",
     "fields.bot_token"),
    ("wecom_app", {"corp_id": "w", "corp_secret": "s", "agent_id": "12a"}, "NOT_A_NUMBER",
     "fields.agent_id"),
    ("gotify", {"server": "ftp://x", "token": "t"}, "BAD_URL", "fields.server"),
    ("gotify", {"server": "https://u:p@x", "token": "t"}, "URL_EXTRAS", "fields.server"),
    ("bark", {"device_key": "k", "server": "https://x/sub"}, "URL_EXTRAS", "fields.server"),
    ("webhook", {"url": "https://x/in?a=1"}, "URL_EXTRAS", "fields.url"),
    ("email", {"smtp_host": "h", "email": "a@b", "security": "tls"}, "NOT_ONE_OF",
     "fields.security"),
    ("email", {"smtp_host": "h", "email": "not-an-address"}, "CHARS_EMAIL",
     "fields.email"),
    ("feishu", {"token": "x" * 600}, "TOO_LONG", "fields.token"),
    ("feishu", {"token": "a\nb"}, "CONTROL_CHARACTER", "fields.token"),
])
def test_bad_fields_have_codes(service_id: str, fields: dict[str, str], code: str,
                               field: str) -> None:
    err = _refused(service_id, fields)
    assert (err.code, err.field) == (code, field)
    for value in fields.values():
        if len(value) > 3:
            assert value not in err.message  # a refusal never echoes a value (a secret)


def test_refusals_carry_their_parameters() -> None:
    assert _refused("pushplus", {"token": "x"}).message == \
        "fields.token must be 32 to 64 letters, digits, - and _"
    assert _refused("email", {"smtp_host": "h", "email": "a@b", "security": "tls"}) \
        .params["allowed"] == "ssl, starttls, none"
    assert _refused("feishu", {"token": "x" * 600}).params["max"] == services.MAX_VALUE


def test_a_value_cannot_reach_into_another_part_of_the_url() -> None:
    # A password with URL syntax in it stays the password (quoted), not a host or query.
    url = build_url("email", {"smtp_host": "smtp.lan", "email": "a@b.cn",
                              "password": "x@evil.com/?to=z@evil.com#"})
    box = apprise.Apprise()
    assert box.add(url)
    assert box[0].smtp_host == "smtp.lan" and box[0].targets == [(False, "a@b.cn")]


def _panel_keys() -> set[str]:
    text = (Path(services.__file__).parents[1] / "panel" / "i18n.js").read_text("utf-8")
    # Each entry is `'key': 'English|中文'`: a key counts only with both halves.
    return set(re.findall(r"^\s*'([\w.]+)': '[^'|]+\|[^'|]+'", text, re.M))


def test_the_panel_says_every_name_help_and_refusal_in_both_languages() -> None:
    keys = _panel_keys()
    want = {"svc.other", "svc.appriseUrl", "svc.set", "svc.unset", "svc.keep"}
    for svc in services.SERVICES:
        want.add(f"svc.n.{svc.id}")
        want.update(k for k in (svc.help,) if k)
        for f in svc.fields:
            want.add(f"svc.f.{f.name}")
            want.update(k for k in (f.help,) if k)
            want.update(f"svc.c.{c}" for c in f.choices)
    codes = {"UNKNOWN_SERVICE", "UNKNOWN_FIELD", "NOT_A_NUMBER", "URL_EXTRAS", "BAD_URL",
             "URL_OR_SERVICE", "SERVICE_REFUSED", "NOT_APPRISE_URL", "EMPTY", "TOO_LONG",
             "CONTROL_CHARACTER", "NOT_ONE_OF", *(f"CHARS_{k.upper()}" for k in services.CHARS)}
    assert {f.chars for s in services.SERVICES for f in s.fields if f.chars} <= set(
        services.CHARS)
    assert want | {f"code.{c}" for c in codes} <= keys, sorted(
        want | {f"code.{c}" for c in codes} - keys)


def test_other_urls_are_not_catalogue_services() -> None:
    assert service_of("discord://a/b") is None
    assert service_of("TGRAM://1:a/2") == "telegram"
    schemes = [s for svc in services.SERVICES for s in svc.schemes]
    assert len(schemes) == len(set(schemes))


# -- through the API, on a real worker ---------------------------------------------------

SECRET = "HookS3cretPathValue"
CHANNELS = "/api/v1/notifications/channels"


def test_catalogue_endpoint(server: Server) -> None:
    r = server.http.get("/api/v1/notification-services")
    assert r.status_code == 200
    items = {s["id"]: s for s in r.json()["items"]}
    assert set(items) == set(CASES)
    token = items["pushplus"]["fields"][0]
    assert (token["name"], token["kind"], token["required"]) == ("token", "secret", True)
    assert httpx.get(f"{server.url}/api/v1/notification-services").status_code == 401


def test_channel_from_a_service_and_its_fields(server: Server) -> None:
    http = server.http
    hook = HttpReceiver().start()
    try:
        r = http.post(CHANNELS, json={"name": "hook", "service": "webhook", "fields": {
            "url": f"http://127.0.0.1:{hook.port}/in/{SECRET}"}})
        assert r.status_code == 201, r.text
        ch = r.json()
        assert (ch["service"], ch["picker"], ch["secrets"]) == ("json", "webhook",
                                                                {"url": True})
        assert SECRET not in r.text
        test = http.post(f"{CHANNELS}/{ch['id']}/test").json()
        assert test == {"ok": True, "error": None}
        assert hook.requests[0].path == f"/in/{SECRET}"
        # Switched to DingTalk without its optional signing secret: shown as not set.
        r = http.patch(f"{CHANNELS}/{ch['id']}", json={"service": "dingtalk",
                                                        "fields": {"token": "abc" + SECRET}})
        assert r.status_code == 200, r.text
        assert (r.json()["picker"], r.json()["secrets"]) == (
            "dingtalk", {"token": True, "sign_secret": False})
        r = http.patch(f"{CHANNELS}/{ch['id']}", json={"service": "pushplus",
                                                        "fields": {"token": "x" * 40}})
        assert (r.json()["service"], r.json()["secrets"]) == ("pushplus", {"token": True})
        listed = http.get(CHANNELS)
        assert SECRET not in listed.text and "x" * 40 not in listed.text
        # A URL apprise knows but the picker does not stays possible.
        r = http.post(CHANNELS, json={"name": "other", "url": "discord://123/abcdef"})
        assert r.status_code == 201 and r.json()["picker"] is None
    finally:
        hook.stop()


def test_an_edit_shows_the_plain_fields_and_keeps_the_secrets(server: Server) -> None:
    """Only the topic changed: the access token, never shown, still goes with the
    message (an ntfy server on loopback sees both)."""
    http = server.http
    hook = HttpReceiver().start()
    try:
        token = "tk_" + SECRET
        r = http.post(CHANNELS, json={"name": "ntfy", "service": "ntfy", "fields": {
            "topic": "first", "server": f"http://127.0.0.1:{hook.port}",
            "access_token": token}})
        assert r.status_code == 201, r.text
        ch = r.json()
        assert ch["fields"] == {"topic": "first"}
        assert ch["secrets"] == {"server": True, "access_token": True}
        r = http.patch(f"{CHANNELS}/{ch['id']}", json={"service": "ntfy",
                                                        "fields": {"topic": "second"}})
        assert r.status_code == 200, r.text
        assert r.json()["fields"] == {"topic": "second"} and SECRET not in r.text
        assert http.post(f"{CHANNELS}/{ch['id']}/test").json() == {"ok": True, "error": None}
        sent = hook.requests[-1]  # ntfy posts JSON to the server's root, topic inside
        assert json.loads(sent.body)["topic"] == "second"
        assert sent.headers.get("Authorization") == f"Bearer {token}"
        # Another service: nothing of the old one is kept.
        r = http.patch(f"{CHANNELS}/{ch['id']}", json={"service": "telegram",
                                                        "fields": {"chat_id": "5"}})
        assert r.status_code == 422 and r.json()["field"] == "fields.bot_token", r.text
    finally:
        hook.stop()


@pytest.mark.parametrize(("body", "status", "rule", "field"), [
    ({"url": "json://a/b", "service": "webhook", "fields": {"url": "http://a/b"}}, 422,
     "URL_OR_SERVICE", "service"),
    ({}, 422, "URL_OR_SERVICE", "url"),
    ({"fields": {"token": "t"}}, 422, "URL_OR_SERVICE", "url"),
    ({"service": "nosuch", "fields": {}}, 422, "UNKNOWN_SERVICE", "service"),
    ({"service": "pushplus", "fields": {"token": SECRET}}, 422, "CHARS_PUSHPLUS",
     "fields.token"),
    ({"service": "telegram", "fields": {"bot_token": "1:a"}}, 422, "EMPTY",
     "fields.chat_id"),
    ({"url": "nosuch://x"}, 422, "NOT_APPRISE_URL", "url"),
])
def test_bad_channel_bodies(server: Server, body: dict[str, Any], status: int, rule: str,
                            field: str) -> None:
    r = server.http.post(CHANNELS, json={"name": "x", **body})
    assert r.status_code == status, r.text
    got = r.json()
    assert (got["rule"], got["field"]) == (rule, field)
    assert SECRET not in r.text
