"""notifications/readback.py: a picker channel's fields read back off the URL they made
(every catalogue entry, defaults and optional fields too), nothing read from a URL the
picker would not make, and only fields that are no secret shown."""

from __future__ import annotations

import pytest

from qledge.notifications import readback, services
from qledge.notifications.services import build_url
from test_notify_services import CASES

# Optional fields left out, beside CASES' full ones: the defaults must read back as "".
SPARSE = {
    "pushplus": {"token": "0123456789abcdef0123456789abcdef"},
    "bark": {"device_key": "k1"},
    "wecom_app": {"corp_id": "w", "corp_secret": "s", "agent_id": "7"},
    "dingtalk": {"token": "t1"},
    "ntfy": {"topic": "t", "server": "http://ntfy.lan:81/sub"},
    "pushdeer": {"pushkey": "k1"},
    "email": {"smtp_host": "mail.lan", "email": "a+b@b.cn", "security": "none"},
}


def _full(service_id: str, given: dict[str, str]) -> dict[str, str]:
    """What the fields mean once the defaults are filled in, as read back."""
    out = {f.name: given.get(f.name, "") for f in services.BY_ID[service_id].fields}
    if service_id == "email" and not out["security"]:
        out["security"] = "ssl"
    return out


@pytest.mark.parametrize("service_id", sorted(CASES))
def test_every_service_reads_back_what_made_it(service_id: str) -> None:
    for given in (CASES[service_id][0], SPARSE.get(service_id)):
        if given is None:
            continue
        url = build_url(service_id, given)
        got = readback.read_fields(service_id, url)
        assert got is not None, url
        assert build_url(service_id, got) == url
        want = _full(service_id, given)
        if service_id == "gotify":  # the server's trailing / is not part of the URL
            want["server"] = want["server"].rstrip("/")
        assert got == want, url


def test_only_fields_that_are_no_secret_are_shown() -> None:
    for service_id, (given, _, _) in CASES.items():
        url = build_url(service_id, given)
        shown = readback.shown_fields(service_id, url)
        kinds = {f.name: f.kind for f in services.BY_ID[service_id].fields}
        assert all(kinds[name] in ("text", "number", "choice") for name in shown)
        for secret in (v for k, v in given.items() if kinds[k] in ("secret", "url")):
            assert secret not in repr(shown), service_id
    tg = build_url("telegram", CASES["telegram"][0])
    assert readback.shown_fields("telegram", tg) == {"chat_id": "-100123"}
    mail = build_url("email", CASES["email"][0])
    assert readback.shown_fields("email", mail) == {
        "smtp_host": "smtp.qq.com", "smtp_port": "465", "security": "ssl",
        "email": "me@qq.com", "to": "a@b.cn,c@d.cn"}


@pytest.mark.parametrize("url", [
    "tgram://123:abc/1/2",  # two chats: apprise's, not the picker's
    "tgram://123:abc/1?format=markdown",
    "pushplus://short",
    "mailtos://smtp.qq.com?from=a%40b.cn&to=a%40b.cn&mode=ssl&name=Me",
    "json://host/a%20b",
    "wechat://corp@1/%40all",
])
def test_a_url_the_picker_would_not_make_reads_as_nothing(url: str) -> None:
    service_id = services.service_of(url)
    assert service_id is not None
    assert readback.read_fields(service_id, url) is None
    assert readback.shown_fields(service_id, url) == {}


def test_an_edit_keeps_what_it_is_not_given() -> None:
    url = build_url("telegram", CASES["telegram"][0])
    edited = build_url("telegram", readback.merged("telegram", url, {"chat_id": "42"}))
    assert edited == "tgram://123456789:AAH_x-y/42"
    mail = build_url("email", CASES["email"][0])
    cleared = readback.merged("email", mail, {"to": "", "smtp_port": ""})
    assert readback.read_fields("email", build_url("email", cleared)) == {
        **_full("email", CASES["email"][0]), "to": "", "smtp_port": ""}
    # Unreadable: nothing is kept, so the fields given must be whole.
    assert readback.merged("telegram", "tgram://1:a/1/2", {"chat_id": "3"}) == {"chat_id": "3"}


def test_which_secrets_and_server_urls_are_set() -> None:
    ntfy = build_url("ntfy", {"topic": "t"})
    assert readback.hidden_set("ntfy", ntfy) == {"server": False, "access_token": False}
    hook = build_url("webhook", CASES["webhook"][0])
    assert readback.hidden_set("webhook", hook) == {"url": True}
    # Unreadable: what the URL's shape tells of the secrets, nothing of the rest.
    assert readback.hidden_set("telegram", "tgram://1:a/1/2") == {"bot_token": True}
