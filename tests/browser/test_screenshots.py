"""Screenshots of every page at desktop (1366×900) and phone (390×844) size, saved to
docs/screenshots/ (with QLTEST_SCREENSHOTS_DIR=docs/screenshots; build/screenshots
otherwise) under fixed names, from an appliance seeded with a few realistic tasks and
runs: the sign-in page, the first-hour page (English and 中文), the editor, runs, run
pages in each ending, envs with the multi-line value editor (English and 中文), scripts,
System. Also checks that no page scrolls sideways on a phone. The pages of issue 37
with many tasks or runs are shot by their own tests (docs/panel.md, "Screenshots")."""

from __future__ import annotations

import os
import re
import time

import pytest
from playwright.sync_api import Page, expect

from .conftest import SHOTS, api_task, settle, shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

BACKUP = ('echo "[backup] dumping database"; n=1200; for t in users orders invoices products; '
          'do n=$((n * 3 + 17)); echo "[backup] table $t: $n rows"; sleep 0.2; done; '
          'echo "[backup] wrote backup.sql.gz (4.2 MiB)"; echo "[backup] done"')


def _wait_terminal(app: Appliance, run_id: str, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run: dict[str, object] = app.api("GET", f"/runs/{run_id}").json()
        if run["terminal"]:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish")


def _run(app: Appliance, task: dict[str, object]) -> str:
    return str(app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"])


def _seed(app: Appliance) -> dict[str, str]:
    backup = api_task(app, name="backup-db", command=BACKUP, schedule="0 3 * * *",
                      timeout_s=600, labels=["daily"], env={"BACKUP_KEEP": "7"})
    prices = api_task(app, name="sync-prices", command='echo "fetching prices"; echo '
                      '"upstream answered 503" >&2; exit 2', schedule="*/15 * * * *")
    disk = api_task(app, name="check-disk", command="echo checking; sleep 30", timeout_s=1,
                    schedule="30 */6 * * *")
    report = api_task(app, name="weekly-report", command="echo building report; sleep 300",
                      schedule="0 8 * * 1", enabled=False)
    api_task(app, name="sign-in-bot", command="echo signed in")
    runs = {"backup": _run(app, backup), "prices": _run(app, prices), "disk": _run(app, disk)}
    rep = _run(app, report)
    deadline = time.monotonic() + 30
    while app.api("GET", f"/runs/{rep}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)
    assert app.api("POST", f"/runs/{rep}/cancel").status_code == 202
    runs["report"] = rep
    for run_id in runs.values():
        _wait_terminal(app, run_id)
    app.api("POST", "/envs", json={"name": "WEATHER_API_KEY", "value": "wx-3f9c2a77d1",
                                   "remarks": "for the weather script"})
    app.api("POST", "/envs", json={"name": "NOTIFY_URL", "value": "https://hooks.example/abc",
                                   "remarks": "", "enabled": False})
    return runs


BEAN = """/*
京东京豆签到
cron 10 7 * * * jd_bean.js, tag=京豆签到
*/
const $ = new Env('京东京豆签到');
const cookies = (process.env.JD_COOKIE || '').split('&').filter(Boolean);
!(async () => {
  for (const [i, cookie] of cookies.entries()) {
    console.log(`account ${i + 1}: signing in`);
    await sign(cookie);
  }
})().finally(() => $.done());
"""


def _seed_scripts(app: Appliance) -> None:
    for path, content in (("jd/jd_bean.js", BEAN), ("jd/jd_fruit.js", "// cron: 5 6-18/6 * * *\n"),
                          ("weather.py", "# cron: 0 7 * * *\nprint('sunny')\n"),
                          ("notify.sh", "#!/bin/sh\necho notify\n")):
        r = app.api("PUT", "/scripts/file", json={"path": path, "content": content})
        assert r.status_code == 201, r.text
    r = app.api("PUT", "/scripts/file", json={"path": "jd/jd_bean.js",
                                              "content": BEAN.replace("10 7", "15 7")})
    assert r.status_code == 200, r.text


COOKIE = ("pt_key=AAJnQ3f0ADBc9sXk2m_7rT1yWcE4QhLz8uV0pN5aD6bK;pt_pin=jd_4f2a91;\n"
          "pt_key=AAJnQ4a1ADCx1LmQ0sR3tY6uI8oP2aS4dF7gH9jK;pt_pin=jd_77c1e0;")


def _env_editor(page: Page) -> None:
    """The envs page's multi-line value editor with a two-account cookie, shown."""
    page.locator("[data-action='new-env']").click()
    page.locator("#e-name").fill("JD_COOKIE")
    page.locator("#e-value").fill(COOKIE)
    page.locator("#e-show").check()
    page.locator("#e-remarks").fill("two accounts, one a line")
    expect(page.locator("#e-value")).to_have_value(COOKIE)


def test_screenshots_of_every_page(page: Page, appliance: Appliance) -> None:
    page.goto("/")
    expect(page.get_by_label("Admin token")).to_be_visible()
    shoot(page, "login")

    # No task yet: signing in lands on the first-hour page (the overview's stand-in).
    sign_in(page)
    first = page.locator("[data-role='first-page'] a[data-start]")
    expect(first).to_have_count(4)
    shoot(page, "first-page-en")
    page.locator("[data-action='lang']").click()
    expect(first.first).to_contain_text("导入")
    shoot(page, "first-page-zh")
    page.locator("[data-action='lang']").click()
    expect(page.locator("[data-action='lang']")).to_have_text("中文")

    runs = _seed(appliance)
    page.goto("/#/tasks")
    expect(page.locator("tr[data-task-name='backup-db'] .strip a").last).to_have_attribute(
        "data-status", "succeeded")
    shoot(page, "tasks")  # a few tasks (the README's); many: test_tasks_page.py

    page.locator("tr[data-task-name='backup-db']").get_by_role("link", name="Edit").click()
    expect(page.locator(".fire-times li")).to_have_count(5)
    shoot(page, "task-editor")

    # every invalid field marked at once
    page.get_by_label("Cron schedule").fill("99 3 * * *")
    page.get_by_label("Timeout (seconds)").fill("0")
    page.get_by_label("Name of variable 1").fill("7DAYS")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[aria-invalid='true']")).to_have_count(3)
    shoot(page, "task-editor-errors")

    page.get_by_role("navigation").get_by_role("link", name="Runs").click()
    # The seeded runs; sync-prices (*/15) may have fired once more meanwhile.
    for run_id in runs.values():
        expect(page.locator(f"tr[data-run-id='{run_id}']")).to_have_count(1)
    shoot(page, "runs")

    page.goto(f"/#/runs/{runs['backup']}")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    expect(page.locator("#timeline li")).not_to_have_count(0)
    shoot(page, "run-detail")

    # a run still running: the log follows live, no exit code or reason yet
    tail = api_task(appliance, name="tail-sensor", command='for i in 1 2 3 4 5; do echo '
                    '"[sensor] reading $i: 21.$i C"; done; sleep 300')
    live = _run(appliance, tail)
    page.goto(f"/#/runs/{live}")
    expect(page.locator("#log")).to_contain_text("reading 5")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "live")
    expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "running")
    shoot(page, "run-running")
    assert appliance.api("POST", f"/runs/{live}/cancel").status_code == 202
    _wait_terminal(appliance, live)

    page.goto(f"/#/runs/{runs['report']}")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    expect(page.locator("#timeline li[data-type='attempt.signal_sent']")).to_be_visible()
    shoot(page, "run-cancelled")

    page.goto(f"/#/runs/{runs['disk']}")
    expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "timed_out")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    shoot(page, "run-timed-out")

    # a log cut short by a power loss (the file truncated after the run, as a cut leaves it)
    export = api_task(appliance, name="export-csv", command='for i in $(seq 1 40); do echo '
                      '"[export] row $i written"; done; echo "[export] done"')
    cut = _wait_terminal(appliance, _run(appliance, export))
    attempt = str(cut["attempts"][-1]["id"])  # type: ignore[index]
    os.truncate(appliance.state / "logs" / attempt[-2:] / f"{attempt}.log", 230)
    page.goto(f"/#/runs/{cut['id']}")
    expect(page.locator("#log-note")).to_contain_text("power loss")
    shoot(page, "run-log-truncated")

    page.get_by_role("navigation").get_by_role("link", name="Envs").click()
    row = page.locator("tr[data-env-name='WEATHER_API_KEY']")
    row.get_by_role("button", name="Reveal").click()
    expect(row).to_contain_text("wx-3f9c2a77d1")
    shoot(page, "envs")
    _env_editor(page)
    shoot(page, "envs-editor")
    page.get_by_role("button", name="Cancel").click()

    _seed_scripts(appliance)
    page.get_by_role("navigation").get_by_role("link", name="Scripts").click()
    tree = page.get_by_role("navigation", name="Scripts folder")
    tree.get_by_role("link", name="jd/").click()
    tree.get_by_role("link", name="jd_bean.js").click()
    expect(page.get_by_label("Content of jd/jd_bean.js")).to_have_value(re.compile("new Env"))
    page.get_by_role("button", name="History").click()
    expect(page.locator("[data-role='history'] ol.versions li")).to_have_count(1)
    shoot(page, "scripts")

    page.get_by_role("navigation").get_by_role("link", name="System").click()
    expect(page.locator("[data-stat='backlog']")).to_be_visible()
    shoot(page, "system")

    # Simplified Chinese
    page.get_by_role("navigation").get_by_role("link", name="Tasks").click()
    page.get_by_role("button", name="Switch language").click()
    expect(page.get_by_role("heading", name="任务", level=1)).to_be_visible()
    expect(page.locator("tr[data-task-name='backup-db'] .strip a").last).to_be_visible()
    page.goto("/#/envs")
    _env_editor(page)
    expect(page.locator("form h2")).to_have_text("新建变量")
    shoot(page, "envs-editor-zh")
    page.goto(f"/#/runs/{runs['prices']}")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    shoot(page, "run-detail-zh")

    # the delete confirmation, as a dialog over the page
    page.get_by_role("navigation").get_by_role("link", name="任务").click()
    page.locator("tr[data-task-name='sign-in-bot']").get_by_role("button", name="删除").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    settle(page)
    page.screenshot(path=str(SHOTS / "delete-dialog-zh-desktop.png"))
    page.keyboard.press("Escape")

