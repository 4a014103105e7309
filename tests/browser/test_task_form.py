"""The run view of `task` form runs: a conc parent's children, a child's parent, and a
scheduled run's random-delay wait (docs/tasks.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from .conftest import DESKTOP, FAST, PHONE, api_task, sign_in
from _appliance import Appliance
from support import free_port


@pytest.fixture(scope="module")
def appliance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    app = Appliance(tmp_path_factory.mktemp("taskform") / "state", free_port(),
                    random_delay_s="3600", **FAST)
    try:
        app.start(timeout=60)
        yield app
    finally:
        app.stop()


def _wait(app: Appliance, run_id: str, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, object] = app.api("GET", f"/runs/{run_id}").json()
        if run["terminal"]:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def test_conc_parent_and_children_link_to_each_other(appliance: Appliance, page: Page) -> None:
    scripts = Path(appliance.state) / "work" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "c.sh").write_text('[ "$V" != b ] || exit 2\n')
    task = api_task(appliance, name="conc", command="task c.sh conc V", env={"V": "a&b"})
    parent_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    parent = _wait(appliance, parent_id)
    assert parent["reason_code"] == "CONC_CHILDREN"
    sign_in(page)
    page.goto(f"/#/runs/{parent_id}")
    links = page.locator("#run-children a")
    expect(links).to_have_text(["#1", "#2"])
    expect(page.locator("#run-children .badge")).to_have_text(["succeeded", "failed"])
    expect(page.locator("#run-reason")).to_contain_text("child runs")
    links.nth(1).click()
    expect(page.locator("#run-exit")).to_have_text("exit 2")
    expect(page.locator("dt:text-is('Parent run (conc)') + dd a")).to_have_attribute(
        "href", f"#/runs/{parent_id}")


def test_a_delayed_scheduled_run_shows_its_not_before_time(
        appliance: Appliance, page: Page) -> None:
    task = api_task(appliance, name="delayed", command="task later.sh",
                    schedule="* * * * * *")
    deadline = time.monotonic() + 30
    while True:
        runs = appliance.api("GET", "/runs", params={"task_id": task["id"]}).json()["items"]
        if runs:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    run = appliance.api("GET", f"/runs/{runs[-1]['id']}").json()
    assert run["status"] == "queued" and run["not_before_ms"] > run["created_at_ms"]
    appliance.api("PATCH", f"/tasks/{task['id']}", json={"enabled": False})
    sign_in(page)
    page.goto(f"/#/runs/{run['id']}")
    expect(page.locator("dt:text-is('Not before (random delay)') + dd")).not_to_be_empty()
    expect(page.locator("dt:text-is('Started') + dd")).to_have_text("—")


def test_the_chain_hint_says_tap_on_a_touch_screen(browser: Browser, appliance: Appliance) -> None:
    """Ctrl/⌘-click means nothing on a phone: a coarse pointer gets the tap wording."""
    for touch, want in ((False, "Ctrl/⌘-click picks several"), (True, "Tap the tasks to pick")):
        ctx = browser.new_context(viewport=PHONE if touch else DESKTOP, has_touch=touch,
                                  is_mobile=touch, locale="en-US",
                                  base_url=f"http://127.0.0.1:{appliance.port}")
        try:
            page = ctx.new_page()
            sign_in(page)
            page.goto("/#/tasks/new")
            expect(page.locator("#f-chain-help")).to_contain_text(want)
        finally:
            ctx.close()
