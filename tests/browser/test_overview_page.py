"""The overview (#/overview) in a real browser against the real supervised appliance:
runs seeded straight into its SQLite file over the last day and week are drawn as
stacked bars (one per hour, or per day), the tasks that failed and the slowest ones
are listed and link on; an appliance with no task of the user's shows the start cards.
English and Chinese screenshots."""

from __future__ import annotations

import sqlite3

import pytest
from playwright.sync_api import Page, expect

from qledge.clock import now_ms

from .conftest import api_task, shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow


def _seed(app: Appliance) -> list[dict[str, object]]:
    tasks = [api_task(app, name=f"check-in-{i}", command=f"python3 c{i}.py") for i in range(4)]
    now = now_ms()
    rows = []
    for h in range(1, 30):  # one run of each task an hour, over 29 hours
        for i, task in enumerate(tasks):
            failed = i == 3 and h % 5 == 0  # check-in-3 fails now and then
            at = now - h * 3_600_000
            rows.append((f"ov{i}{h:03d}", task["id"], "failed" if failed else "succeeded",
                         at, at, at + 1000 * (i + 1) * (10 if i == 2 else 1),
                         1 if failed else 0))
    with sqlite3.connect(app.state / "data" / "qledge.sqlite3") as db:
        db.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, started_at_ms,"
            " finished_at_ms, exit_code) VALUES (?, ?, 'schedule', ?, ?, ?, ?, ?)", rows)
    return tasks


def test_the_overview_draws_a_day_and_a_week(page: Page, appliance: Appliance) -> None:
    sign_in(page)
    page.goto("/#/overview")  # nothing of the user's yet: the start cards
    expect(page.locator("[data-role='first-page'] a[data-start]")).to_have_count(4)

    _seed(appliance)
    page.reload()
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    chart = page.locator("svg.ov-chart")
    expect(chart.locator("g[data-bucket]")).to_have_count(24)  # one bar an hour
    # The last 24 h hold 23 or 24 seeded hours: every task ran in each.
    ok = chart.locator("rect.ov-succeeded").count()
    assert 23 <= ok <= 24, ok
    expect(chart.locator("rect.ov-failed")).to_have_count(4)  # hours 5, 10, 15, 20
    label = chart.get_attribute("aria-label") or ""
    assert " 4 failed" in label, label
    failed = page.locator("table.grid").nth(0)
    expect(failed.get_by_role("link", name="check-in-3")).to_have_attribute(
        "href", "#/runs?task_id=" + str(page.evaluate(
            "fetch('/api/v1/task-list?q=check-in-3').then(r => r.json())"
            ".then(b => b.items[0].id)")))
    slowest = page.locator("table.grid").nth(1)
    expect(slowest.locator("tbody tr").first).to_contain_text("check-in-2")  # 30 s a run
    shoot(page, "overview-en")

    page.get_by_role("button", name="Last 7 days").click()
    expect(page).to_have_url(page.url.split("#")[0] + "#/overview?window=7d")
    expect(chart.locator("g[data-bucket]")).to_have_count(7)  # one bar a day
    expect(page.locator("svg.ov-chart rect.ov-failed")).not_to_have_count(0)

    page.get_by_role("button", name="Switch language").click()
    expect(page.get_by_role("heading", name="概览", level=1)).to_be_visible()
    expect(page.locator("table.grid").nth(0).locator("th").first).to_have_text("任务")
    shoot(page, "overview-zh")
