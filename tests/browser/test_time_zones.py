"""The one time rule in a real browser (docs/panel.md "Time"): a browser in Asia/Shanghai
against an appliance in UTC. The panel says the zones differ (a dismissible notice, in
English and 中文, remembered once dismissed); the task list shows each "next" time in the
zone its schedule runs in — the task's own, or the appliance's, said so — with the zone
on the time; the run page names the browser's zone and the appliance's (what a task's
own output is printed in). Screenshots of the notice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from .conftest import DESKTOP, TIMEOUT_MS, api_task, shoot, sign_in, wait_run
from _appliance import Appliance

pytestmark = pytest.mark.slow


@pytest.fixture
def shanghai(browser: Browser, appliance: Appliance) -> Iterator[Page]:
    ctx = browser.new_context(viewport=DESKTOP, locale="en-US", timezone_id="Asia/Shanghai",
                              base_url=f"http://127.0.0.1:{appliance.port}")
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def test_zones_are_said_and_a_difference_is_warned(shanghai: Page,
                                                   appliance: Appliance) -> None:
    page = shanghai
    zone = appliance.api("GET", "/task-list?limit=1").json()["zone"]
    assert zone in ("Etc/UTC", "UTC"), zone  # the appliance runs in UTC here
    own = api_task(appliance, name="tz-shanghai", command="echo hi", schedule="0 8 * * *",
                   tz="Asia/Shanghai")
    api_task(appliance, name="tz-appliance", command="echo hi", schedule="0 3 * * *")
    sign_in(page)
    note = page.locator("[data-role='zone-note']")
    expect(note).to_contain_text("Asia/Shanghai")
    expect(note).to_contain_text(zone)
    shoot(page, "zone-warning-en")

    page.goto("/#/tasks?q=tz-")
    mine = page.locator("tr[data-task-name='tz-shanghai'] [data-role='next']")
    expect(mine).to_contain_text("08:00 UTC+8")
    expect(mine.locator("[data-role='zone']")).to_have_text("Asia/Shanghai")
    other = page.locator("tr[data-task-name='tz-appliance'] [data-role='next']")
    expect(other).to_contain_text("03:00 UTC (")
    expect(other.locator("[data-role='zone']")).to_have_text(f"appliance zone {zone}")

    run = appliance.api("POST", f"/tasks/{own['id']}/runs").json()["run"]
    wait_run(appliance, run["id"], {"succeeded"})
    page.goto(f"/#/runs/{run['id']}")
    line = page.locator("#run-zone")
    expect(line).to_contain_text("Asia/Shanghai (your browser)")
    expect(line).to_contain_text(f"in the appliance's zone, {zone}")
    expect(page.locator("section.summary dl.kv")).to_contain_text("UTC+8")

    page.get_by_role("button", name="Dismiss").click()
    expect(note).to_have_count(0)
    page.reload()
    expect(page.locator("#run-zone")).to_contain_text("Asia/Shanghai")
    expect(note).to_have_count(0)  # remembered for this pair of zones

    page.evaluate("localStorage.removeItem('qledge.zoneNote')")
    page.locator("[data-action='lang']").click()
    page.goto("/#/overview")
    expect(note).to_contain_text("浏览器时区（Asia/Shanghai）与设备时区")
    expect(note.get_by_role("button", name="知道了")).to_be_visible()
    shoot(page, "zone-warning-zh")


def test_no_notice_when_the_zones_agree(page: Page) -> None:
    sign_in(page)  # the shared context's browser is in UTC, as the appliance
    page.goto("/#/tasks")
    expect(page.locator("main h1")).to_have_text("Tasks")
    page.wait_for_timeout(2500)  # the notice is decided 1.5 s after a page is drawn
    expect(page.locator("[data-role='zone-note']")).to_have_count(0)
