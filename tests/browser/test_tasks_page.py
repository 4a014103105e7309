"""The Tasks page and the first page in a real browser against the real supervised
appliance: an empty appliance shows the start cards; with 62 tasks and 1,000+ runs
(runs seeded straight into its SQLite file, not 1,000 real runs) the list loads in one
API request, searches, filters, sorts, pages, shows each task's run strip and bulk
disables; system tasks stay out of the main list. English and Chinese screenshots."""

from __future__ import annotations

import sqlite3

import pytest
from playwright.sync_api import Page, expect

from qledge.clock import now_ms

from .conftest import Watched, api_task, shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

N_TASKS = 62
RUNS_EACH = 17  # 1,054 runs


def _seed(app: Appliance) -> list[dict[str, object]]:
    tasks = [api_task(app, name=f"job-{i:02d}", command=f"python3 job{i}.py --long-flag {i}",
                      labels=["even" if i % 2 == 0 else "odd"], schedule="0 3 * * *")
             for i in range(N_TASKS)]
    base = now_ms() - 86_400_000
    rows = []
    for i, task in enumerate(tasks):
        for k in range(RUNS_EACH):
            failed = i % 7 == 0 and k == RUNS_EACH - 1
            at = base + (i * RUNS_EACH + k) * 60_000
            rows.append((f"seed{i:02d}{k:03d}", task["id"],
                         "failed" if failed else "succeeded", at, at, at + 1000 + i,
                         1 if failed else 0))
    with sqlite3.connect(app.state / "data" / "qledge.sqlite3") as db:
        db.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, started_at_ms,"
            " finished_at_ms, exit_code) VALUES (?, ?, 'manual', ?, ?, ?, ?, ?)", rows)
        db.execute("INSERT INTO tasks (id, name, command, labels_json, created_at_ms,"
                   " updated_at_ms) VALUES ('dep-py', 'dependencies: python', 'x',"
                   " '[\"dependencies\"]', 1, 1)")
    return tasks


def test_first_page_then_the_list(watched: Watched, page: Page, appliance: Appliance) -> None:
    sign_in(page)
    first = page.locator("[data-role='first-page']")
    expect(first.locator("a[data-start]")).to_have_count(4)
    expect(first.get_by_role("link", name="Import your QingLong backup")).to_have_attribute(
        "href", "#/system")
    expect(first.get_by_role("link", name="Add a subscription")).to_have_attribute(
        "href", "#/subs")
    expect(first.get_by_role("link", name="Write a script")).to_have_attribute(
        "href", "#/scripts")
    shoot(page, "first-page-en")

    _seed(appliance)
    page.goto("/#/tasks")  # the first page now is the overview
    rows = page.locator("table.tasklist tbody tr")
    expect(rows).to_have_count(25)
    watched.urls.clear()
    page.reload()
    expect(rows).to_have_count(25)
    api_calls = [u for u in watched.urls if "/api/v1/" in u]
    assert len(api_calls) <= 3, api_calls
    assert not page.locator("tr[data-task-name='dependencies: python']").count()
    expect(page.locator("[data-role='page']")).to_contain_text("Page 1 of 3 · 62 tasks")
    first_row = page.locator("tr[data-task-name='job-00']")
    expect(first_row.locator(".strip a")).to_have_count(10)
    expect(first_row.locator(".strip a[data-status='failed']")).to_have_count(1)
    expect(first_row.locator(".cmd")).to_have_attribute("title", "python3 job0.py --long-flag 0")
    shoot(page, "tasks-en")

    page.locator("[data-action='next']").click()
    expect(page).to_have_url(page.url.split("#")[0] + "#/tasks?page=2")
    expect(page.locator("tr[data-task-name='job-25']")).to_be_visible()

    page.locator("[data-role='search']").fill("job1.py")
    expect(rows).to_have_count(1)
    expect(page.locator("tr[data-task-name='job-01']")).to_be_visible()
    page.locator("[data-role='search']").fill("")
    expect(rows).to_have_count(25)

    page.locator("select[data-role='last']").select_option("failed")
    expect(rows).to_have_count(9)  # jobs 0, 7, …, 56
    page.locator("select[data-role='sort']").select_option("name")
    page.locator("select[data-role='order']").select_option("desc")
    expect(rows.first).to_have_attribute("data-task-name", "job-56")

    page.goto("/#/tasks?label=odd&q=job-0")
    expect(rows).to_have_count(5)
    for name in ("job-01", "job-03"):
        page.get_by_label(f"Select “{name}”").check()
    page.locator("[data-bulk='disable']").click()
    page.get_by_role("dialog").get_by_role("button", name="Disable selected").click()
    expect(page.locator("#toast")).to_have_text("Done for 2 tasks.")
    off = appliance.api("GET", "/task-list?enabled=false").json()
    assert sorted(t["name"] for t in off["items"]) == ["job-01", "job-03"]

    page.goto("/#/tasks")
    internal = page.locator("details[data-role='internal']")
    expect(internal).to_be_visible()
    internal.locator("summary").click()
    expect(internal.locator("tr[data-task-id='dep-py']")).to_be_visible()

    page.get_by_role("button", name="中文").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("任务")
    shoot(page, "tasks-zh")
