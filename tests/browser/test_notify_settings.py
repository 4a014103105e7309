"""The notifications' message settings and a task's mute switch in a real browser,
against the real supervised appliance and a real webhook receiver: the language is
set from the panel's on first use, the settings and the rate limit are saved without
touching the other rules, a task is muted and unmuted from its editor, and a 中文
message reaches the receiver with a link to its run; in English and Chinese."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .conftest import api_task, shoot, sign_in
from _appliance import Appliance
from _receivers import HttpReceiver

pytestmark = pytest.mark.slow


def _settings(app: Appliance) -> dict[str, object]:
    got: dict[str, object] = app.api("GET", "/notifications/settings").json()
    return got


def _rules(app: Appliance) -> dict[str, object]:
    got: dict[str, object] = app.api("GET", "/notifications/rules").json()
    return got


def test_message_settings_and_task_mute(page: Page, appliance: Appliance) -> None:
    hook = HttpReceiver().start()
    try:
        r = appliance.api("PUT", "/notifications/rules", json={"log_lines": 2})
        assert r.status_code == 200, r.text
        assert _settings(appliance)["language"] is None
        sign_in(page)
        page.evaluate("location.hash = '#/notifications'")
        card = page.locator("[data-section='notify-settings']")
        expect(card.get_by_role("heading", name="Message settings")).to_be_visible()
        # the first visit sets the messages' language to the panel's
        expect(card.get_by_label("Language of messages")).to_have_value("en")
        assert _settings(appliance)["language"] == "en"
        expect(card.locator("[data-role='rate-now']")).to_have_text(
            "At most 5 messages per channel every 10 minutes; the rest arrive as one digest.")
        expect(card.get_by_label("When a task notifies")).to_have_value("transitions")

        card.get_by_label("Public base URL").fill("ftp://nope")
        card.get_by_role("button", name="Update settings").click()
        expect(card.get_by_role("alert")).to_be_visible()
        assert _settings(appliance)["base_url"] is None

        card.get_by_label("Language of messages").select_option("zh-CN")
        card.get_by_label("Public base URL").fill("http://pi.example:5700")
        card.get_by_label(re.compile("Messages per channel")).fill("3")
        card.get_by_label("Within (minutes)").fill("5")
        card.get_by_role("button", name="Update settings").click()
        expect(page.locator("#toast")).to_have_text("Message settings saved")
        expect(card.locator("[data-role='rate-now']")).to_contain_text("At most 3 messages")
        s = _settings(appliance)
        assert (s["language"], s["base_url"]) == ("zh-CN", "http://pi.example:5700")
        rules = _rules(appliance)["global"]
        assert isinstance(rules, dict)
        assert (rules["rate_limit"], rules["rate_window_s"], rules["log_lines"]) == (3, 300, 2)
        shoot(page, "notify-settings")

        # a task's editor: mute keeps the rest of its override; unmute puts it back
        task = api_task(appliance, name="mute-me", command="exit 3")
        tid = str(task["id"])
        assert appliance.api("PUT", f"/notifications/rules/tasks/{tid}",
                             json={"streak": 2}).status_code == 200
        page.evaluate(f"location.hash = '#/tasks/{tid}'")
        mute = page.get_by_label("Mute notifications")
        expect(mute).not_to_be_checked()
        mute.check()
        expect(page.locator("#toast")).to_have_text("Notifications of mute-me are muted")
        tasks = _rules(appliance)["tasks"]
        assert isinstance(tasks, dict) and tasks[tid] == {"streak": 2, "muted": True}
        mute.uncheck()
        expect(page.locator("#toast")).to_have_text("Notifications of mute-me are on again")
        tasks = _rules(appliance)["tasks"]
        assert isinstance(tasks, dict) and tasks[tid] == {"streak": 2}
        appliance.api("DELETE", f"/notifications/rules/tasks/{tid}")
        page.reload()
        mute = page.get_by_label("Mute notifications")
        mute.check()
        expect(page.locator("#toast")).to_have_text("Notifications of mute-me are muted")
        mute.uncheck()
        expect(page.locator("#toast")).to_have_text("Notifications of mute-me are on again")
        assert tid not in _rules(appliance)["tasks"]  # type: ignore[operator]

        # a failure, in 中文, with the link to its run
        r = appliance.api("POST", "/notifications/channels",
                          json={"name": "hook", "url": f"json://127.0.0.1:{hook.port}/h"})
        assert r.status_code == 201, r.text
        run = appliance.api("POST", f"/tasks/{tid}/runs").json()["run"]
        (got,) = hook.wait(1)
        doc = got.json()
        assert doc["title"] == "[qledge] mute-me：失败" and doc["type"] == "failure"
        assert f"运行：http://pi.example:5700/#/runs/{run['id']}" in doc["message"]
        assert "日志最后 " in doc["message"]  # log_lines 2 was kept, its header in 中文

        # the same pages in 中文
        page.get_by_role("button", name=re.compile("Switch language")).click()
        expect(page.get_by_label("静音通知")).to_be_visible()
        page.evaluate("location.hash = '#/notifications'")
        card = page.locator("[data-section='notify-settings']")
        expect(card.get_by_role("heading", name="消息设置")).to_be_visible()
        expect(card.get_by_label("消息语言")).to_have_value("zh-CN")
        expect(card.locator("[data-role='rate-now']")).to_have_text(
            "每个渠道每 5 分钟最多 3 条消息；其余的合并为一条摘要发送。")
        shoot(page, "notify-settings-zh")
        page.get_by_role("button", name=re.compile("切换语言")).click()
    finally:
        hook.stop()
        appliance.api("PUT", "/notifications/rules", json={})
        for ch in appliance.api("GET", "/notifications/channels").json()["items"]:
            appliance.api("DELETE", f"/notifications/channels/{ch['id']}")
