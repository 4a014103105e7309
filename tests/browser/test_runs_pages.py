"""Issue #37 in the panel: the runs list by URL with a total and previous/next, a
retried run's earlier attempt log, ANSI colours in a log, and the schedule preview in
the task's own time zone — against the real supervised appliance."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .conftest import api_task, shoot, sign_in, wait_run
from _appliance import Appliance


def test_a_retried_runs_earlier_attempt_log_opens_in_colour(page: Page,
                                                             appliance: Appliance) -> None:
    task = api_task(appliance, name="retry-colours", retries=2, retry_delay_s=0,
                    command="if [ -e ./tried-colours ]; then printf '\\033[32m[INFO]\\033[0m"
                            " second\\n'; exit 0; fi; touch ./tried-colours;"
                            " printf '\\033[1;31m[ERROR]\\033[0m first\\n'; exit 4")
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    wait_run(appliance, run_id, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("retry-colours")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    green = page.locator("#log span.ansi-fg-32")
    expect(green).to_have_text("[INFO]")
    expect(page.locator("#log")).to_have_text("[INFO] second\n")  # no raw [32m
    page.locator("[data-action='attempt-log'][data-attempt='1']").click()
    earlier = page.locator("#attempt-log")
    expect(earlier).to_have_attribute("data-loaded", "true")
    expect(earlier).to_have_text("[ERROR] first\n")
    expect(earlier.locator("span.ansi-fg-31.ansi-bold")).to_have_text("[ERROR]")
    shoot(page, "run-attempts")
    page.goto(f"/#/runs?task_id={task['id']}")
    expect(page.locator(f"[data-run-id='{run_id}'] .retried")).to_have_text(
        "after 1 failed attempt(s)")
    page.locator("[data-action='lang']").click()
    page.goto(f"/#/runs/{run_id}")
    page.locator("[data-action='attempt-log'][data-attempt='1']").click()
    expect(page.locator("#attempt-log")).to_have_attribute("data-loaded", "true")
    shoot(page, "run-attempts-zh")
    page.locator("[data-action='lang']").click()


def test_run_again_opens_the_new_run(page: Page, appliance: Appliance) -> None:
    task = api_task(appliance, name="again", command="echo again")
    first = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    wait_run(appliance, first, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs/{first}")
    expect(page.locator("[data-action='edit-task']")).to_have_attribute(
        "href", f"#/tasks/{task['id']}")
    page.locator("[data-action='run-again']").click()
    expect(page).not_to_have_url(re.compile(first))
    expect(page).to_have_url(re.compile(r"#/runs/[0-9a-f-]{36}$"))
    runs = appliance.api("GET", "/runs", params={"task_id": task["id"]}).json()
    assert runs["total"] == 2


def test_runs_paging_previous_next_total_and_the_url_survive_a_reload(
        page: Page, appliance: Appliance) -> None:
    task = api_task(appliance, name="many-runs", command="true", concurrency="allow")
    ids = [appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
           for _ in range(22)]
    for run_id in ids:
        wait_run(appliance, run_id, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs?task_id={task['id']}")
    total = page.locator("#runs-total")
    expect(total).to_have_attribute("data-total", "22")
    expect(total).to_have_text("Page 1 of 2 · 22 runs")
    expect(page.locator("#runs-task")).to_have_value("many-runs")
    expect(page.locator("[data-action='prev']")).to_have_count(0)
    page.locator("[data-action='next']").click()
    expect(page).to_have_url(re.compile(r"#/runs\?task_id=[0-9a-f-]+&page=2$"))
    expect(page.locator("[data-run-id]")).to_have_count(2)
    page.reload()
    expect(total).to_have_text("Page 2 of 2 · 22 runs")
    expect(page.locator("[data-run-id]")).to_have_count(2)
    oldest = sorted(ids)[:2]
    for run_id in oldest:
        expect(page.locator(f"[data-run-id='{run_id}'] a.run-task")).to_have_text("many-runs")
    shoot(page, "runs-list")
    page.locator("[data-action='prev']").click()
    expect(total).to_have_text("Page 1 of 2 · 22 runs")
    expect(page.locator("[data-run-id]")).to_have_count(20)
    page.locator("[data-action='lang']").click()
    shoot(page, "runs-list-zh")
    page.locator("[data-action='lang']").click()


def test_the_cron_preview_is_in_the_tasks_zone(page: Page, appliance: Appliance) -> None:
    sign_in(page)
    page.goto("/#/tasks/new")
    page.locator("#f-tz").fill("Asia/Shanghai")
    page.locator("#f-schedule").fill("0 8 * * *")
    head = page.locator("#f-schedule-preview p[data-zone]")
    expect(head).to_have_attribute("data-zone", "Asia/Shanghai")
    expect(head).to_have_text("Next five runs (task time zone Asia/Shanghai):")
    times = page.locator("#f-schedule-preview ol.fire-times time")
    expect(times).to_have_count(5)
    for text in times.all_inner_texts():
        assert "08:00:00" in text, text
    page.locator("#f-tz").fill("")
    expect(head).to_have_attribute("data-zone-source", "appliance")
    expect(page.locator("#f-tz")).to_have_attribute(
        "placeholder", re.compile(r"^Empty: appliance zone \S+$"))
    page.locator("#f-tz").fill("Asia/Shanghai")
    expect(head).to_have_attribute("data-zone", "Asia/Shanghai")
    shoot(page, "editor-preview-zone")
    page.locator("[data-action='lang']").click()  # the form is drawn again, empty
    page.locator("#f-tz").fill("Asia/Shanghai")
    page.locator("#f-schedule").fill("0 8 * * *")
    expect(head).to_have_text("接下来五次运行（任务时区 Asia/Shanghai）：")
    shoot(page, "editor-preview-zone-zh")
    page.locator("[data-action='lang']").click()


def test_log_search_counts_and_moves_and_wrap_is_remembered(page: Page,
                                                            appliance: Appliance) -> None:
    task = api_task(appliance, name="searchable",
                    command="for i in 1 2 3; do printf 'line %s \\033[33mneedle\\033[0m\\n' $i;"
                            " done; echo tail")
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    wait_run(appliance, run_id, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    page.locator("#log-find").fill("NEEDLE")
    count = page.locator("#log-find-count")
    expect(count).to_have_text("1 of 3")
    page.locator("[data-action='find-next']").click()
    expect(count).to_have_text("2 of 3")
    page.locator("[data-action='find-prev']").click()
    page.locator("[data-action='find-prev']").click()
    expect(count).to_have_text("3 of 3")
    assert page.evaluate("CSS.highlights.get('log-match').size") == 3
    page.locator("#log-find").fill("absent")
    expect(count).to_have_text("0 of 0")
    page.locator("#log-find").fill("needle")
    shoot(page, "log-colours-search")
    page.locator("#log-wrap").uncheck()
    expect(page.locator("#log")).to_have_class(re.compile(r"\bnowrap\b"))
    page.reload()
    expect(page.locator("#log-wrap")).not_to_be_checked()
    expect(page.locator("#log")).to_have_class(re.compile(r"\bnowrap\b"))
    page.locator("#log-wrap").check()
    page.locator("[data-action='lang']").click()
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    page.locator("#log-find").fill("needle")
    expect(count).to_have_text("第 1 / 3 处")
    shoot(page, "log-colours-search-zh")
    page.locator("[data-action='lang']").click()
