"""The subscriptions page in a real browser against the real appliance: create with a
field error shown under its field, the secret never shown back, Pull now leading to
the run, the last pull's result in the list, and the Chinese labels."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from _git_server import GitRepo, GitServer

from .conftest import PHONE, shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow
SECRET = "tok-9f2c41e8"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitServer]:
    repo = GitRepo(tmp_path / "repo")
    repo.write("daily.js", "// cron: 15 8 * * *\nconst $ = new Env('daily');\n")
    repo.commit()
    srv = GitServer({"repo": repo.path}, auth=("u", SECRET))
    yield srv
    srv.close()


def test_create_pull_and_see_the_result(page: Page, appliance: Appliance,
                                        served: GitServer) -> None:
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    page.get_by_role("button", name="New subscription").click()
    page.get_by_label("Name", exact=True).fill("mine")
    page.get_by_label("URL").fill(served.url("repo"))
    page.get_by_label("Branch").fill("main")
    page.get_by_label("Alias (folder)").fill("pagesub")
    page.get_by_label("Pull schedule").fill("99 * * * *")
    page.get_by_label("Username").fill("u")
    page.get_by_label("Password or token").fill(SECRET)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#s-schedule-err")).to_be_visible()
    schedule = page.get_by_label("Pull schedule")
    expect(schedule).to_have_attribute("aria-invalid", "true")
    expect(schedule).to_have_attribute("aria-describedby", re.compile(r"\bs-schedule-err\b"))
    expect(schedule).to_be_focused()
    page.get_by_label("Pull schedule").fill("@every 360m")  # an interval, stored as 6h
    page.get_by_role("button", name="Save").click()
    row = page.locator("tr[data-sub='pagesub']")
    expect(row).to_contain_text("@every 6h")
    expect(page.locator("body")).not_to_contain_text(SECRET)

    row.get_by_role("button", name="Pull now — mine").click()
    expect(page.locator("main")).to_contain_text("succeeded", timeout=60_000)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    expect(row).to_contain_text("succeeded")
    expect(row).to_contain_text("+1")
    row.get_by_role("button", name="Edit — mine").click()
    expect(page.get_by_label("Password or token")).to_have_value("")
    expect(page.get_by_label("Alias (folder)")).to_be_disabled()
    page.get_by_role("button", name="中文").click()
    expect(page.get_by_role("navigation").get_by_role("link", name="订阅")).to_be_visible()
    page.get_by_role("button", name="English").click()


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[GitServer]:
    repo = GitRepo(tmp_path / "plain")
    repo.write("daily.js", "// cron: 15 8 * * *\nconst $ = new Env('daily');\n")
    repo.write("plain.js", "console.log('no header')\n")
    repo.write("lib/sendNotify.js", "module.exports = {}\n")
    repo.commit()
    srv = GitServer({"plain": repo.path})
    yield srv
    srv.close()


def test_every_field_help_preview_and_the_scripts_without_a_task(
        page: Page, appliance: Appliance, plain: GitServer) -> None:
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    page.get_by_role("button", name="New subscription").click()
    form = page.locator("form")
    for label in ("Script extensions", "Before the pull (shell)", "After the pull (shell)",
                  "Enabled (pull on schedule)", "Add a task for each new script",
                  "Act on tasks whose script disappeared", "Dependence files",
                  "Files kept", "Pull timeout (seconds)"):
        expect(form.get_by_label(label)).to_be_visible()
    expect(form.get_by_label("Whitelist")).to_have_accessible_description(
        re.compile("only matching files are scripts"))
    expect(form.get_by_text("For scripts whose header has no cron line")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("plain")
    page.get_by_label("URL").fill(plain.url("plain"))
    page.get_by_label("Branch").fill("main")
    page.get_by_label("Alias (folder)").fill("plainsub")
    page.get_by_label("Pull schedule").fill("0 3 * * *")
    expect(page.locator("#s-schedule-preview")).to_contain_text("Next (", timeout=10_000)
    expect(page.locator("#s-schedule-preview time")).to_have_count(3)
    page.get_by_label("Pull schedule").fill("61 * * * *")
    expect(page.locator("#s-schedule-preview .preview-error")).to_be_visible()
    page.get_by_label("Pull schedule").fill("")
    page.get_by_label("Dependence files").fill("^lib/")
    page.get_by_label("Before the pull (shell)").fill("true")
    page.get_by_label("Files kept").fill("50")
    page.get_by_role("button", name="Save").click()
    row = page.locator("tr[data-sub='plainsub']")
    expect(row).to_be_visible()
    sub = next(s for s in appliance.api("GET", "/subscriptions").json()["items"]
               if s["alias"] == "plainsub")
    assert (sub["sub_before"], sub["dependences"], sub["caps"]["files"]) == ("true", "^lib/", 50)
    assert sub["default_schedule"] is None and sub["extensions"] == ["js", "mjs", "py", "sh"]

    row.get_by_role("button", name="Pull now — plain").click()
    expect(page).to_have_url(re.compile(r"#/runs/"))  # the other subscription says succeeded too
    expect(page.locator("main")).to_contain_text("succeeded", timeout=60_000)
    deadline = time.monotonic() + 30
    while not appliance.api("GET", f"/subscriptions/{sub['id']}").json()["last_sync"]:
        assert time.monotonic() < deadline, "the pull's tasks were never kept in step"
        time.sleep(0.2)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    expect(row).to_contain_text("+1")
    no_task = row.locator("[data-role=no-task]")
    expect(no_task).to_contain_text("1 scripts without a task")
    no_task.locator("summary").click()
    expect(no_task).to_contain_text(
        "plain.js — no cron line in its header and no default schedule")

    # On a phone each label sits above its value: "Pull schedule" never meets "Last pull".
    page.set_viewport_size(PHONE)
    cells = row.locator("td")
    sched, last = cells.nth(3).bounding_box(), cells.nth(4).bounding_box()
    assert sched is not None and last is not None
    assert sched["y"] + sched["height"] <= last["y"] + 0.5, (sched, last)
    # The label is a pseudo-element (no box of its own to measure): positioned absolutely,
    # a label wrapping to more lines than its value overflowed into the next row; in flow,
    # the cell holds it, so the boxes above prove the order.
    assert cells.nth(3).evaluate("td => getComputedStyle(td, '::before').position") == "static"
    shoot(page, "subscriptions-no-task")

    row.get_by_role("button", name="Edit — plain").click()
    expect(page.get_by_label("Before the pull (shell)")).to_have_value("true")
    expect(page.get_by_label("Add a task for each new script")).to_be_checked()
    expect(page.get_by_label("Files kept")).to_have_value("50")
    page.get_by_role("button", name=re.compile("Switch language")).click()
    expect(page.get_by_role("navigation").get_by_role("link", name="订阅")).to_be_visible()
    page.get_by_role("navigation").get_by_role("link", name="订阅").click()
    zh = page.locator("tr[data-sub='plainsub'] [data-role=no-task]")
    zh.locator("summary").click()
    expect(zh).to_contain_text("1 个脚本没有任务")
    expect(zh).to_contain_text("文件头没有 cron 行，也没有默认定时")
    page.get_by_role("button", name=re.compile("编辑 — plain")).click()
    expect(page.get_by_label("拉取前执行（shell）")).to_have_value("true")
    shoot(page, "subscriptions-form-zh")
    page.get_by_role("button", name=re.compile("切换语言")).click()
