"""The panel's Notifications page in a real browser against the real supervised
appliance and a real webhook receiver: add a channel (its URL never shown again),
send a test, save rules, see a failed run's delivery; in English and Chinese."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, expect

from .conftest import api_task, shoot, sign_in
from _appliance import Appliance
from _receivers import HttpReceiver

pytestmark = pytest.mark.slow

SECRET = "pAnelS3cretT0ken"


def test_channels_test_rules_and_deliveries(page: Page, appliance: Appliance) -> None:
    hook = HttpReceiver().start()
    try:
        sign_in(page)
        page.get_by_role("navigation").get_by_role("link", name="Notifications").click()
        expect(page.get_by_role("heading", name="Notifications", level=1)).to_be_visible()
        expect(page).to_have_url(re.compile(r"#/notifications$"))
        page.evaluate("location.hash = '#/tasks'")
        page.evaluate("location.hash = '#/notify'")  # the old route: old bookmarks redirect
        expect(page).to_have_url(re.compile(r"#/notifications$"))
        expect(page.get_by_role("heading", name="Notifications", level=1)).to_be_visible()
        expect(page.get_by_text("No channels: nothing is sent.")).to_be_visible()
        page.get_by_role("button", name="New channel").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Name").fill("hook")
        dialog.get_by_label("Service").select_option("other")  # the raw URL, as before
        dialog.get_by_label("Apprise URL").fill("nosuch://x")
        dialog.get_by_role("button", name="Save").click()
        expect(dialog.locator("#c-url-err")).to_contain_text("url is not an apprise URL")
        dialog.get_by_label("Apprise URL").fill(f"json://127.0.0.1:{hook.port}/{SECRET}")
        dialog.get_by_role("button", name="Save").click()
        row = page.locator("tr[data-channel='hook']")
        expect(row).to_contain_text("Webhook (JSON POST)")  # a json:// URL is the picker's webhook
        assert SECRET not in page.content()

        row.get_by_role("button", name="Send test — hook").click()
        expect(page.locator("#toast")).to_have_text("Test sent to hook.")
        assert hook.wait(1)[0].json()["title"] == "[qledge] test message"

        page.get_by_label("Log lines in the message").fill("1")
        page.get_by_label("timed out").uncheck()
        page.get_by_role("button", name="Save").click()
        expect(page.locator("#toast")).to_have_text("Rules saved.")
        rules = appliance.api("GET", "/notifications/rules").json()["global"]
        assert rules["log_lines"] == 1 and "timed_out" not in rules["statuses"]

        task = api_task(appliance, name="panel-fail", command="echo last-words; exit 5")
        assert appliance.api("POST", f"/tasks/{task['id']}/runs").status_code == 202
        got = hook.wait(2)
        assert got[1].json()["title"] == "[qledge] panel-fail: failed"
        assert got[1].json()["message"].endswith("Last 1 log lines:\nlast-words")
        deadline = time.monotonic() + 20
        delivered = page.locator("tr[data-state='sent']", has_text="panel-fail")
        while delivered.count() == 0 and time.monotonic() < deadline:
            page.get_by_role("button", name="Refresh").click()
            page.wait_for_timeout(300)
        expect(delivered).to_contain_text("hook")
        expect(delivered).to_contain_text("sent")
        shoot(page, "notifications")  # and the phone layout never scrolls sideways

        page.get_by_role("button", name=re.compile("Switch language")).click()
        expect(page.get_by_role("heading", name="通知", level=1)).to_be_visible()
        expect(page.get_by_role("button", name="发送测试 — hook")).to_be_visible()
        expect(page.locator("tr[data-state='sent']", has_text="panel-fail")).to_contain_text(
            "已发送")
        page.get_by_role("button", name=re.compile("切换语言")).click()
    finally:
        hook.stop()


def test_service_picker_pushplus_and_a_webhook_that_delivers(page: Page,
                                                             appliance: Appliance) -> None:
    """Pick PushPlus, type the token, save: the channel shows PushPlus with its token
    set (never the token) and the API holds a pushplus:// URL; a webhook picked the same
    way delivers Send test to a loopback receiver; the picker's words in 中文."""
    token = "0123456789abcdef0123456789abcdef"
    hook = HttpReceiver().start()
    try:
        sign_in(page)
        page.goto(page.url.split("#")[0] + "#/notifications")
        page.get_by_role("button", name="New channel").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Name").fill("plus")
        dialog.get_by_label("Service").select_option(label="PushPlus")
        expect(dialog.get_by_text("The token from pushplus.plus")).to_be_visible()
        dialog.get_by_label("Token").fill("short")
        dialog.get_by_role("button", name="Save").click()
        expect(dialog.locator("#c-f-token-err")).to_contain_text("32 to 64 letters")
        expect(dialog.get_by_label("Token")).to_have_attribute("aria-invalid", "true")
        dialog.get_by_label("Token").fill(token)
        dialog.get_by_role("button", name="Save").click()
        row = page.locator("tr[data-channel='plus']")
        expect(row).to_contain_text("PushPlus")
        expect(row.locator("[data-role=secrets]")).to_have_text(" — Token: set")
        assert token not in page.content()
        chans = appliance.api("GET", "/notifications/channels").json()["items"]
        plus = next(c for c in chans if c["name"] == "plus")
        assert (plus["service"], plus["picker"]) == ("pushplus", "pushplus")

        # Edit: the fields left empty keep the destination; the name changes.
        row.get_by_role("button", name="Edit — plus").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_label("Service")).to_have_value("pushplus")
        expect(dialog.get_by_label("Token")).to_have_attribute("placeholder", "set")
        dialog.get_by_label("Name").fill("plus2")
        dialog.get_by_role("button", name="Save").click()
        expect(page.locator("tr[data-channel='plus2']")).to_contain_text("Token: set")

        page.get_by_role("button", name="New channel").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Name").fill("web")
        dialog.get_by_label("Service").select_option("webhook")
        dialog.get_by_label("Webhook URL").fill(f"http://127.0.0.1:{hook.port}/in")
        dialog.get_by_role("button", name="Save").click()
        web = page.locator("tr[data-channel='web']")
        expect(web).to_contain_text("Webhook (JSON POST)")
        web.get_by_role("button", name="Send test — web").click()
        expect(page.locator("#toast")).to_have_text("Test sent to web.")
        got = hook.wait(1)[0]
        assert got.path == "/in" and got.json()["title"] == "[qledge] test message"

        # An edit shows the plain fields, keeps the secrets: only the topic retyped.
        page.get_by_role("button", name="New channel").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Name").fill("nt")
        dialog.get_by_label("Service").select_option("ntfy")
        dialog.get_by_label("Topic").fill("first")
        dialog.get_by_label("Server URL").fill(f"http://127.0.0.1:{hook.port}")
        dialog.get_by_label("Access token").fill("tk_secret_1")
        dialog.get_by_role("button", name="Save").click()
        nt = page.locator("tr[data-channel='nt']")
        nt.get_by_role("button", name="Edit — nt").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_label("Topic")).to_have_value("first")
        expect(dialog.get_by_label("Server URL")).to_have_value("")
        expect(dialog.get_by_label("Server URL")).to_have_attribute("placeholder", "set")
        expect(dialog.get_by_label("Access token")).to_have_attribute("placeholder", "set")
        assert "tk_secret_1" not in page.content()
        shoot(page, "notifications-edit")
        dialog.get_by_label("Topic").fill("second")
        dialog.get_by_role("button", name="Save").click()
        expect(dialog).to_be_hidden()
        nt.get_by_role("button", name="Send test — nt").click()
        expect(page.locator("#toast")).to_have_text("Test sent to nt.")
        sent = hook.wait(2)[1]
        assert sent.json()["topic"] == "second"
        assert sent.headers.get("Authorization") == "Bearer tk_secret_1"

        page.get_by_role("button", name=re.compile("Switch language")).click()
        page.get_by_role("button", name="新建渠道").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("服务").select_option("serverchan")
        expect(dialog.get_by_label("SendKey")).to_be_visible()
        expect(dialog.get_by_text("在 sct.ftqq.com 获取的 SendKey")).to_be_visible()
        dialog.get_by_label("服务").select_option("other")
        expect(dialog.get_by_label("Apprise 地址")).to_be_visible()
        dialog.get_by_label("名称").fill("x")
        dialog.get_by_label("服务").select_option("telegram")
        dialog.get_by_label("机器人 Token").fill("nocolon")
        dialog.get_by_label("Chat ID").fill("42")
        dialog.get_by_role("button", name="保存").click()
        expect(dialog.locator("#c-f-bot_token-err")).to_contain_text("须为数字、冒号")
        shoot(page, "notifications-picker")
        dialog.get_by_role("button", name="取消").click()
        page.get_by_role("button", name=re.compile("切换语言")).click()
    finally:
        hook.stop()
