"""The operator panel in a real browser against the real supervised appliance:
sign-in, tasks, the live log (across a kill -9 of the worker), cancel, runs,
envs, language, keyboard."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from qledge.http import panel
from test_panel import emitted_event_types

from .conftest import FAST, Watched, api_task, sign_in, signed_in, wait_ready_again
from _appliance import ADMIN, Appliance
from support import free_port

pytestmark = pytest.mark.slow


def lines(prefix: str, n: int) -> str:
    return "".join(f"{prefix}{i}\n" for i in range(1, n + 1))


def test_wrong_token_is_refused_and_the_token_stays_out_of_urls(watched: Watched) -> None:
    page = watched.page
    page.goto("/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_label("Admin token")).to_be_focused()
    page.get_by_label("Admin token").fill("not-the-admin-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#login-token-err")).to_have_text("That token was refused.")
    expect(page.get_by_label("Admin token")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Admin token")).to_have_attribute(
        "aria-describedby", "login-token-help login-token-err")
    expect(page.get_by_label("Admin token")).to_be_focused()
    assert page.evaluate("sessionStorage.getItem('qledge.token')") is None
    expect(page.get_by_role("navigation")).to_have_count(0)
    # the right one, with the keyboard
    page.get_by_label("Admin token").fill(ADMIN)
    page.keyboard.press("Enter")
    signed_in(page)
    # The browser keeps an HttpOnly session cookie, never the token (docs/panel.md).
    assert page.evaluate("sessionStorage.getItem('qledge.token')") is None
    assert page.evaluate("localStorage.getItem('qledge.token')") is None
    [cookie] = page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
        "qledge_session", True, "Strict")
    assert ADMIN not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # out of the page's reach
    # a reload keeps the session; signing out ends it
    page.reload()
    signed_in(page)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.context.cookies() == []
    assert all(ADMIN not in u for u in watched.urls)


def test_create_a_task_run_it_and_follow_the_live_log(page: Page, appliance: Appliance,
                                                      tmp_path: Path) -> None:
    release = tmp_path / "release"
    sign_in(page)
    page.get_by_role("link", name="New task").click()
    expect(page.get_by_role("heading", name="New task", level=1)).to_be_visible()
    page.get_by_label("Name", exact=True).fill("count-slowly")
    # Prints three lines, then waits (at most 60 s) for a file only this test creates,
    # so those lines can only reach the page by streaming while the run is running.
    page.get_by_label("Command").fill(
        'echo "greeting=$GREETING"; for i in 1 2 3; do echo "line $i"; done;'
        f" n=0; while [ ! -e '{release}' ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done;"
        ' for i in $(seq 4 40); do echo "line $i"; sleep 0.02; done; exit 3')
    # the preview reports a bad schedule as you type; saving marks the field with the API's reason
    schedule = page.get_by_label("Cron schedule")
    schedule.fill("61 * * * *")
    expect(page.locator(".preview-error")).to_contain_text("cron")
    page.get_by_role("button", name="Create task").click()
    expect(page.locator("#f-schedule-err")).to_contain_text("invalid cron schedule")
    expect(schedule).to_have_attribute("aria-invalid", "true")
    expect(schedule).to_be_focused()
    schedule.fill("*/10 * * * *")
    expect(page.locator(".fire-times li")).to_have_count(5)
    page.get_by_label("Timeout (seconds)").fill("120")
    page.get_by_role("button", name="Add variable").click()
    page.get_by_label("Name of variable 1").fill("GREETING")
    page.get_by_label("Value of variable 1").fill("hello")
    page.get_by_role("button", name="Create task").click()

    row = page.locator("tr[data-task-name='count-slowly']")
    expect(row).to_be_visible()
    expect(row).to_contain_text("*/10 * * * *")
    expect(row).to_contain_text("never run")
    row.get_by_role("button", name="Run now").click()
    expect(page).to_have_url(re.compile(r"#/runs/[0-9a-f-]{36}$"))
    run_id = page.url.rsplit("/", 1)[1]

    log = page.locator("#log")
    state = page.locator("#log-state")
    # Live: the first lines are on the page while the task still waits for the release.
    expect(log).to_have_text("greeting=hello\nline 1\nline 2\nline 3\n")
    expect(state).to_have_attribute("data-state", "live")
    expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "running")
    assert not release.exists()
    body = appliance.api("GET", f"/runs/{run_id}").json()
    assert body["status"] == "running", body
    expect(page.locator(".summary")).not_to_contain_text("null")  # no Element.append(null)
    release.touch()
    expect(state).to_have_attribute("data-state", "ended", timeout=60_000)
    assert log.text_content() == "greeting=hello\n" + lines("line ", 40), (
        page.locator("#main").inner_text())
    expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "failed")
    expect(page.locator("#run-exit")).to_have_text("exit 3")
    expect(page.locator("#run-reason")).to_contain_text("exit code decided")
    expect(page.locator("[data-action='cancel-run']")).to_be_hidden()
    types = page.locator("#timeline li").evaluate_all("els => els.map(e => e.dataset.type)")
    assert types[0] == "run.created" and types[-1] == "run.finished"
    assert "run.started" in types and "attempt.finished" in types
    # back on the list: the run strip's newest square, with its exit code in its title
    page.get_by_role("navigation").get_by_role("link", name="Tasks").click()
    newest = row.locator(".strip a").last
    expect(newest).to_have_attribute("data-status", "failed")
    expect(newest).to_have_attribute("title", re.compile(r"\bexit 3\b"))


@pytest.mark.drill
def test_live_log_resumes_without_gaps_after_kill_9_of_the_worker(
        watched: Watched, appliance: Appliance) -> None:
    page = watched.page
    task = api_task(appliance, name="numbered",
                    command='for i in $(seq 1 80); do echo "n=$i"; sleep 0.1; done')
    sign_in(page)
    run = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]
    page.goto(f"/#/runs/{run['id']}")
    log = page.locator("#log")
    section = page.locator("#log-section")
    state = page.locator("#log-state")
    expect(log).to_contain_text("n=5")
    expect(state).to_have_attribute("data-state", "live")
    before = log.text_content() or ""
    old_pid = appliance.kill_worker()
    expect(section).not_to_have_attribute("data-reconnects", "0")
    wait_ready_again(appliance)
    assert appliance.worker_pid() != old_pid
    if appliance.api("GET", f"/runs/{run['id']}").json()["status"] == "running":
        # resumed while the task still runs: following live again, on a new ticket
        expect(state).to_have_attribute("data-state", "live")
    expect(state).to_have_attribute("data-state", "ended", timeout=90_000)
    tickets = [u for u in watched.urls if u.endswith(f"/runs/{run['id']}/log/ticket")]
    streams = [u for u in watched.urls if "/log/stream?" in u]
    assert len(tickets) >= 2 and len(streams) >= 2
    assert len({u.split("ticket=")[1] for u in streams}) == len(streams)  # never reused
    assert "offset=0&" in streams[0] and "offset=0&" not in streams[-1]
    final = log.text_content() or ""
    assert final == lines("n=", 80), final
    assert final.startswith(before)
    expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#run-exit")).to_have_text("exit 0")
    body = appliance.api("GET", f"/runs/{run['id']}").json()
    assert (body["status"], body["exit_code"]) == ("succeeded", 0)


def test_cancel_from_the_panel_ends_the_run_cancelled(page: Page, appliance: Appliance) -> None:
    api_task(appliance, name="sleepy", command="echo started; sleep 300")
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    page.locator("tr[data-task-name='sleepy']").get_by_role("button", name="Run now").click()
    expect(page.locator("#log")).to_contain_text("started")
    page.get_by_role("button", name="Cancel run").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Cancel", exact=True)).to_be_focused()
    dialog.get_by_role("button", name="Cancel run").click()
    expect(dialog).to_have_count(0)
    expect(page.locator("#run-status .badge")).to_have_attribute(
        "data-status", "cancelled", timeout=60_000)
    expect(page.locator("#run-reason")).to_contain_text("cancel request")
    expect(page.locator("#timeline li[data-type='run.cancel_requested']")).to_contain_text(
        "reason: user")
    expect(page.locator("#timeline li[data-type='attempt.signal_sent']")).to_contain_text("TERM")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    expect(page.locator("[data-action='cancel-run']")).to_be_hidden()
    run_id = page.url.rsplit("/", 1)[1]
    assert appliance.api("GET", f"/runs/{run_id}").json()["status"] == "cancelled"


def test_runs_filter_and_next_page(page: Page, appliance: Appliance) -> None:
    task = api_task(appliance, name="many", command="true", concurrency="allow")
    other = api_task(appliance, name="fails", command="exit 7")
    ids = [appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
           for _ in range(23)]
    failed = appliance.api("POST", f"/tasks/{other['id']}/runs").json()["run"]["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = appliance.api("GET", "/runs", params={"task_id": task["id"], "limit": 200}).json()
        if sum(r["terminal"] for r in runs["items"]) == 23 and \
                appliance.api("GET", f"/runs/{failed}").json()["terminal"]:
            break
        time.sleep(0.2)
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="Runs").click()
    page.get_by_label("Task").fill("many")  # a searchable field (issue #37)
    page.get_by_label("Task").press("Enter")
    rows = page.locator("tr[data-run-id]")
    expect(rows).to_have_count(20)
    expect(page.locator(".pager")).to_contain_text("Page 1")
    assert "task_id=" in page.url
    page.get_by_role("button", name="Next page").click()
    expect(rows).to_have_count(3)
    expect(page.locator(".pager")).to_contain_text("Page 2")
    expect(page.get_by_role("button", name="Next page")).to_have_count(0)
    shown = rows.evaluate_all("els => els.map(e => e.dataset.runId)")
    assert set(shown) <= set(ids)
    page.get_by_role("button", name="Previous page").click()
    expect(rows).to_have_count(20)
    page.get_by_label("Task").fill("")
    page.get_by_label("Task").press("Enter")
    page.get_by_label("Status").select_option("failed")
    expect(page.locator(f"tr[data-run-id='{failed}']")).to_be_visible()
    expect(page.locator("tr[data-run-id] .badge[data-status='succeeded']")).to_have_count(0)
    statuses = page.locator("tr[data-run-id] .badge").evaluate_all(
        "els => els.map(e => e.dataset.status)")
    assert statuses and set(statuses) == {"failed"}
    # every state has a badge label
    for status in ("queued", "running", "succeeded", "failed", "cancelled", "timed_out", "lost",
                   "blocked"):
        expect(page.locator(f"#runs-status option[value='{status}']")).to_have_count(1)


def test_envs_values_hidden_until_revealed(page: Page, appliance: Appliance) -> None:
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="Envs").click()
    page.get_by_role("button", name="New variable").click()
    page.get_by_label("Name", exact=True).fill("2BAD")
    page.get_by_label("Value", exact=True).fill("s3cret-value")
    page.get_by_role("button", name="Add variable").click()
    expect(page.locator("#e-name-err")).to_contain_text("shell identifier")
    expect(page.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Name", exact=True)).to_be_focused()
    page.get_by_label("Name", exact=True).fill("API_KEY")
    # a multi-line textarea, its text masked until "Show value"
    value = page.get_by_label("Value", exact=True)
    expect(value).to_have_class(re.compile(r"\bmasked-text\b"))
    assert value.evaluate("(a) => getComputedStyle(a).webkitTextSecurity") == "disc"
    page.get_by_label("Show value").check()
    expect(value).not_to_have_class(re.compile(r"\bmasked-text\b"))
    page.get_by_role("button", name="Add variable").click()
    row = page.locator("tr[data-env-name='API_KEY']")
    expect(row).to_be_visible()
    expect(row).not_to_contain_text("s3cret-value")
    row.get_by_role("button", name="Reveal API_KEY").click()
    expect(row).to_contain_text("s3cret-value")
    expect(row.get_by_role("button", name="Hide API_KEY")).to_have_attribute("aria-pressed", "true")
    row.get_by_role("button", name="Hide API_KEY").click()
    expect(row).not_to_contain_text("s3cret-value")
    row.get_by_role("button", name="Disable").click()
    expect(row).to_contain_text("disabled")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Remarks", exact=True).fill("for the weather script")
    page.get_by_role("button", name="Save").click()
    expect(row).to_contain_text("for the weather script")
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)


def test_task_enable_disable_edit_and_delete(page: Page, appliance: Appliance) -> None:
    api_task(appliance, name="nightly", command="echo hi", schedule="0 3 * * *")
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    row = page.locator("tr[data-task-name='nightly']")
    expect(row).to_contain_text("next")
    row.get_by_role("button", name="Disable").click()
    expect(row).to_contain_text("disabled: no next run")
    row.get_by_role("button", name="Enable").click()
    # "disabled: no next run" contains "next" too: wait for the re-rendered row, or
    # the click below can land on the row the re-render is about to replace.
    expect(row).not_to_contain_text("disabled")
    expect(row.get_by_role("button", name="Disable")).to_be_visible()
    row.get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Cron schedule")).to_have_value("0 3 * * *")
    expect(page.locator(".fire-times li")).to_have_count(5)
    page.get_by_label("Command").fill("echo changed")
    page.get_by_label("When a run is still active").select_option("allow")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("heading", name="Tasks", level=1)).to_be_visible()
    task = next(t for t in appliance.api("GET", "/tasks").json()["items"] if t["name"] == "nightly")
    assert (task["command"], task["concurrency"], task["overlap"]) == (
        "echo changed", "allow", "allow")
    row.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("nightly")
    page.keyboard.press("Escape")  # keyboard dismissal keeps the task
    expect(dialog).to_have_count(0)
    expect(row).to_be_visible()
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)


def test_chinese_is_switchable_and_remembered(page: Page, appliance: Appliance) -> None:
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    page.get_by_role("button", name=re.compile("Switch language")).click()
    expect(page.get_by_role("heading", name="任务", level=1)).to_be_visible()
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert page.evaluate("localStorage.getItem('qledge.lang')") == "zh"
    page.reload()
    expect(page.get_by_role("navigation").get_by_role("link", name="运行记录")).to_be_visible()
    page.get_by_role("navigation").get_by_role("link", name="系统").click()
    expect(page.get_by_role("heading", name="系统", level=1)).to_be_visible()
    page.get_by_role("button", name=re.compile("切换语言")).click()
    expect(page.get_by_role("heading", name="System", level=1)).to_be_visible()
    assert page.evaluate("localStorage.getItem('qledge.lang')") == "en"


def test_keyboard_alone_labels_and_visible_focus(page: Page, appliance: Appliance) -> None:
    page.goto("/#/tasks")  # signing in stays on the page the address names
    expect(page.get_by_label("Admin token")).to_be_focused()
    page.keyboard.type(ADMIN)
    page.keyboard.press("Enter")
    heading = page.get_by_role("heading", name="Tasks", level=1)
    expect(heading).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="New task")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="New task", level=1)).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_label("Name", exact=True)).to_be_focused()
    page.keyboard.type("typed-by-keyboard")
    page.keyboard.press("Tab")
    page.keyboard.type("echo keyboard works")
    # every form control has a label; every clickable thing is a button or a link
    unlabelled = page.evaluate("""[...document.querySelectorAll('input, select, textarea')]
        .filter(e => e.type !== 'hidden' && e.labels.length === 0).map(e => e.id)""")
    assert unlabelled == []
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")  # implicit submission from the name field
    row = page.locator("tr[data-task-name='typed-by-keyboard']")
    expect(row).to_be_visible()
    run_now = row.get_by_role("button", name="Run now")
    # Tab until "Run now" of that row has the focus, then press it with Enter
    for _ in range(200):
        page.keyboard.press("Tab")
        if run_now.evaluate("e => e === document.activeElement"):
            break
    else:
        raise AssertionError("Run now is not reachable with Tab")
    outline = run_now.evaluate("e => getComputedStyle(e).outlineStyle + ' ' + "
                               "getComputedStyle(e).outlineWidth")
    assert not outline.startswith("none") and not outline.endswith(" 0px"), outline
    page.keyboard.press("Enter")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    expect(page.locator("#log")).to_have_text("keyboard works\n")
    fake_buttons = page.evaluate("""[...document.querySelectorAll('[onclick], [role=button]')]
        .filter(e => e.tagName !== 'BUTTON').length""")
    assert fake_buttons == 0


_MISALIGNED = """rows => rows.flatMap((tr) => {
  const row = tr.getBoundingClientRect();
  return [...tr.cells].filter((td) => {
    const r = td.getBoundingClientRect();
    return Math.abs(r.top - row.top) > 1 || Math.abs(r.bottom - row.bottom) > 1;
  }).map((td) => `${td.dataset.label}: cell ${Math.round(td.getBoundingClientRect().top)}-`
    + `${Math.round(td.getBoundingClientRect().bottom)}, row ${Math.round(row.top)}-`
    + `${Math.round(row.bottom)}`);
})"""


def test_table_cells_fill_their_rows_at_desktop_width(page: Page, appliance: Appliance) -> None:
    """Every cell spans its whole row, so the row lines (cell borders) are one straight
    line — the Actions cell included (a flex box in place of a table cell would not)."""
    api_task(appliance, name="aligned", command="true", schedule="0 4 * * *", labels=["x"])
    assert appliance.api("POST", "/envs", json={"name": "ALIGNED", "value": "v"}).status_code == 201
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    assert page.viewport_size == {"width": 1280, "height": 800}
    rows = page.locator("table.grid tbody tr")
    expect(page.locator("tr[data-task-name='aligned']")).to_be_visible()
    assert rows.evaluate_all(_MISALIGNED) == []
    page.get_by_role("navigation").get_by_role("link", name="Envs").click()
    expect(page.locator("tr[data-env-name='ALIGNED']")).to_be_visible()
    assert rows.evaluate_all(_MISALIGNED) == []


# One realistic `data` per event type, shaped as the backend writes it.
EVENT_SAMPLES: dict[str, dict[str, object]] = {
    "run.created": {"trigger": "schedule"},
    "run.scheduled": {"scheduled_for_ms": 1767225600000, "late_ms": 40, "catch_up": 0},
    "schedule.skipped": {"scheduled_for_ms": 1767225600000, "reason": "queued_run",
                         "catch_up": 0},
    "attempt.created": {},
    "attempt.started": {"pid": 4242},
    "run.started": {},
    "run.cancel_requested": {"reason": "timeout"},
    "attempt.signal_sent": {"signal": "SIGTERM", "epoch": 3},
    "attempt.finished": {"status": "failed", "exit_code": 2, "reason_code": "EXITED"},
    "run.finished": {"status": "failed", "exit_code": 2, "reason_code": "EXITED",
                     "leftover_processes": 3},
    "run.held": {"reason": "DISK_PRESSURE", "volumes": "logs"},
    "run.retry_scheduled": {"attempt_no": 1, "status": "failed", "reason_code": "EXITED",
                            "delay_ms": 10_000, "not_before_ms": 1_700_000_010_000},
    "run.replaces": {"run_id": "01900000-0000-7000-8000-000000000001"},
    "run.replaced_by": {"run_id": "01900000-0000-7000-8000-000000000002"},
    "chain.triggered": {"run_id": "01900000-0000-7000-8000-000000000003",
                        "task_id": "01900000-0000-7000-8000-000000000004"},
    "chain.triggered_by": {"run_id": "01900000-0000-7000-8000-000000000005",
                           "task_id": "01900000-0000-7000-8000-000000000006",
                           "status": "succeeded"},
    "chain.skipped": {"task_id": "01900000-0000-7000-8000-000000000007",
                      "reason": "disabled"},
    "attempt.late_receipt": {"exit_code": 4, "epoch": 2},
}


def test_h_takes_classes_in_the_tag_name_and_props_may_be_left_out(page: Page) -> None:
    sign_in(page)
    # the module's hashed URL, as the appliance (same files) serves it: the page shares it
    made = page.evaluate("""async (url) => { const { h } = await import(url); return [
        h('p.muted.small', { class: 'x', id: 'a' }, 'one').outerHTML,
        h('p', 'two', null, h('b', 'three')).outerHTML,
        h('td', { 'data-label': 'L' }).outerHTML,
        h('span').outerHTML]; }""", panel.Panel().urls["core.js"])
    assert made == ['<p class="muted small x" id="a">one</p>', "<p>two<b>three</b></p>",
                    '<td data-label="L"></td>', "<span></span>"]


def test_every_event_type_reads_as_words_in_english_and_chinese(page: Page) -> None:
    assert set(EVENT_SAMPLES) == emitted_event_types()  # a new event type needs a sample here
    sign_in(page)
    texts = {}
    for lang in ("en", "zh"):
        texts[lang] = dict(page.evaluate(
            "async ([samples, url]) => { const { eventText } = await import(url); "
            "return Object.entries(samples).map(([type, data]) => "
            "[type, eventText({ type, data })]); }", [EVENT_SAMPLES, panel.Panel().urls["run.js"]]))
        for kind, text in texts[lang].items():
            assert kind not in text and "{" not in text and "ev." not in text, (lang, text)
            assert not re.search(r"\b(undefined|null|NaN)\b", text), (lang, text)
        page.locator("[data-action='lang']").click()
    assert all(re.search(r"[\u4e00-\u9fff]", text) for text in texts["zh"].values()), texts["zh"]
    assert "logs" in texts["en"]["run.held"] and "disk" in texts["en"]["run.held"]
    assert "still queued" in texts["en"]["schedule.skipped"]
    assert texts["en"]["run.finished"].endswith(" · ended 3 leftover processes")


def test_a_run_held_for_low_disk_space_says_why(page: Page, tmp_path: Path) -> None:
    # Every volume is "short" of a petabyte of free space: the run stays queued and the
    # retention loop gives it one `run.held` event (docs/retention.md).
    held = Appliance(tmp_path / "state", free_port(), low_water_mb=str(10**9), **FAST)
    try:
        held.start(timeout=60)
        task = held.api("POST", "/tasks", json={"name": "waits", "command": "true"}).json()
        run_id = held.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
        deadline = time.monotonic() + 30
        while not any(e["type"] == "run.held" for e in
                      held.api("GET", f"/runs/{run_id}/events").json()["items"]):
            assert time.monotonic() < deadline, "no run.held event"
            time.sleep(0.2)
        page.goto(f"http://127.0.0.1:{held.port}/")
        page.get_by_label("Admin token").fill(ADMIN)
        page.get_by_role("button", name="Sign in").click()
        signed_in(page)
        page.goto(f"http://127.0.0.1:{held.port}/#/runs/{run_id}")
        expect(page.locator("#timeline li[data-type='run.held'] .ev-text")).to_have_text(
            re.compile(r"^Held in the queue: low disk space on (data|receipts|logs)"
                       r"(, (data|receipts|logs))*; it starts when space is back$"))
        expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "queued")
        expect(page.locator(".summary")).not_to_contain_text("null")
        page.locator("[data-action='lang']").click()
        expect(page.locator("#timeline li[data-type='run.held']")).to_contain_text("磁盘空间不足")
        assert held.api("GET", f"/runs/{run_id}").json()["status"] == "queued"
    finally:
        held.stop()


def _ms(text: str) -> float:
    """'+12 ms' / '0 ms' / '1.25 s' → milliseconds (what fmtDur prints below a minute)."""
    m = re.fullmatch(r"\+?([\d.]+) (ms|s)", text.strip())
    assert m, text
    return float(m[1]) * (1 if m[2] == "ms" else 1000)


def _wait_status(app: Appliance, run_id: str, want: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (status := app.api("GET", f"/runs/{run_id}").json()["status"]) not in want:
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def _times_shown(page: Page) -> dict[str, float]:
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    shown = {"ran": _ms(page.locator("dt:text-is('Ran for') + dd").inner_text()),
             "attempt": _ms(page.locator("td[data-label='Duration']").inner_text())}
    for kind in ("run.started", "attempt.started", "attempt.finished", "run.finished"):
        # the "+…" after the time: how long after the run was created
        shown[kind] = _ms(page.locator(f"#timeline li[data-type='{kind}'] > span").first
                          .inner_text())
    return shown


def test_a_short_runs_duration_and_timeline_agree(page: Page, appliance: Appliance) -> None:
    task = api_task(appliance, name="blink", command="true")
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    _wait_status(appliance, run_id, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    shown = _times_shown(page)
    # "Ran for" is the distance between where the timeline puts the start and the finish
    assert shown["ran"] == shown["run.finished"] - shown["run.started"], shown
    assert shown["attempt"] == shown["attempt.finished"] - shown["attempt.started"], shown
    assert shown["run.finished"] == shown["attempt.finished"], shown
    expect(page.locator("#timeline .ev-recorded")).to_have_count(0)


@pytest.mark.drill
def test_a_finish_recorded_while_the_worker_was_down_keeps_its_real_duration(
        page: Page, appliance: Appliance, tmp_path: Path) -> None:
    release = tmp_path / "release"
    task = api_task(appliance, name="ends-unwatched",
                    command=f"while [ ! -e '{release}' ]; do sleep 0.02; done")
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    _wait_status(appliance, run_id, {"running"})
    seen_running = time.monotonic()
    appliance.ctl("stop", "http")  # shutdown_policy "leave": the task runs on, unwatched
    release.touch()  # it exits now, while no worker is there to record it
    released = time.monotonic()
    time.sleep(2.5)
    appliance.ctl("start", "http")
    wait_ready_again(appliance)
    _wait_status(appliance, run_id, {"succeeded"})
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    shown = _times_shown(page)
    # the receipt's exit time, not the recording 2.5 s later
    assert shown["ran"] <= (released - seen_running) * 1000 + 500, shown
    assert abs(shown["ran"] - (shown["run.finished"] - shown["run.started"])) <= 10, shown
    late = page.locator("#timeline li[data-type='run.finished'] .ev-recorded")
    expect(late).to_contain_text(re.compile(r"recorded [\d.]+ s later"))
    assert _ms(late.inner_text().split("recorded ")[1].removesuffix(" later")) >= 2000


def test_the_editor_marks_every_invalid_field_at_once(page: Page, appliance: Appliance) -> None:
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    page.get_by_role("link", name="New task").click()
    expect(page.get_by_role("heading", name="New task", level=1)).to_be_visible()
    page.get_by_label("Command").fill("echo fine")  # the one good field; the name stays empty
    page.get_by_label("Cron schedule").fill("99 * * * *")
    page.get_by_label("Timeout (seconds)").fill("0")
    page.get_by_role("button", name="Add variable").click()
    page.get_by_label("Name of variable 1").fill("2BAD")
    page.get_by_label("Value of variable 1").fill("x")
    page.get_by_label("Labels", exact=True).fill("nightly, " + "x" * 101)
    page.get_by_role("button", name="Create task").click()

    invalid = page.locator("[aria-invalid='true']")
    expect(invalid).to_have_count(5)
    assert invalid.evaluate_all("els => els.map(e => e.id)") == [
        "f-name", "f-schedule", "f-timeout", "f-env-k-1", "f-labels"]
    expect(page.locator("#f-name-err")).to_contain_text("name")
    expect(page.locator("#f-command-err")).to_be_hidden()
    expect(page.locator("#f-schedule-err")).to_have_text(
        "invalid cron schedule: minute field '99': out of range 0-59")
    expect(page.locator("#f-timeout-err")).to_contain_text("1 to 31622400")
    expect(page.locator("#f-env-err")).to_contain_text("2BAD is not a shell variable name")
    expect(page.locator("#f-labels-err")).to_contain_text("100 characters")
    expect(page.get_by_label("Name", exact=True)).to_be_focused()  # the first one
    assert not [u for u in posts if u.endswith("/api/v1/tasks")]  # nothing was sent

    # fixing one leaves the others marked, and the focus moves to the next
    page.get_by_label("Name", exact=True).fill("all-fixed")
    page.get_by_role("button", name="Create task").click()
    expect(invalid).to_have_count(4)
    expect(page.get_by_label("Cron schedule")).to_be_focused()
    page.get_by_label("Cron schedule").fill("0 4 * * *")
    page.get_by_label("Timeout (seconds)").fill("60")
    page.get_by_label("Name of variable 1").fill("GOOD")
    page.get_by_label("Labels", exact=True).fill("nightly")
    page.get_by_role("button", name="Create task").click()
    expect(page.locator("tr[data-task-name='all-fixed']")).to_be_visible()
    task = next(t for t in appliance.api("GET", "/tasks").json()["items"]
                if t["name"] == "all-fixed")
    assert (task["schedule"], task["timeout_s"], task["env"], task["labels"]) == (
        "0 4 * * *", 60, {"GOOD": "x"}, ["nightly"])


def test_retry_fields_and_the_retry_countdown(page: Page, appliance: Appliance) -> None:
    """Issue 20: the editor sets overlap and retries; a run waiting for its retry shows
    the countdown, its first attempt and the retry event in words."""
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    page.get_by_role("link", name="New task").click()
    page.get_by_label("Name", exact=True).fill("flaky")
    page.get_by_label("Command").fill("exit 3")
    page.get_by_label("When a run is still active").select_option("queue")
    page.get_by_label("Retries").fill("2")
    page.get_by_label("First retry after (seconds, doubling)").fill("600")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Tasks", level=1)).to_be_visible()
    task = next(t for t in appliance.api("GET", "/tasks").json()["items"] if t["name"] == "flaky")
    assert (task["overlap"], task["retries"], task["retry_delay_s"]) == ("queue", 2, 600)
    run = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]
    page.goto(f"/#/runs/{run['id']}")
    expect(page.locator("#run-retry-in")).to_contain_text(re.compile(r"\d+ ?(min|m)"),
                                                          timeout=20_000)
    expect(page.locator("#timeline")).to_contain_text("Attempt 1 failed: retry at")
    expect(page.locator("#run-status")).to_contain_text("queued")


def test_chain_tz_and_retry_on_fields(page: Page, appliance: Appliance) -> None:
    """Issue 20: retry_on, extra schedules, tz and the chain lists are set in the editor
    and reach the API; the API's 422 for a bad zone and for a chain cycle shows under
    its own field."""
    b = api_task(appliance, name="chain-b", command="true")
    sign_in(page, at="/#/tasks")  # the task list, not the first page (the overview)
    page.get_by_role("link", name="New task").click()
    page.get_by_label("Name", exact=True).fill("chain-a")
    page.get_by_label("Command").fill("true")
    page.get_by_label("timed out", exact=True).check()
    page.get_by_label("lost", exact=True).uncheck()
    page.get_by_label("More schedules (one per line)").fill("0 5 * * *\n\n30 6 * * 1\n")
    page.get_by_label("Time zone").fill("Asia/Shanghai")
    page.get_by_label("After success").select_option(label="chain-b")
    page.get_by_label("After any end").select_option(label="chain-b")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Tasks", level=1)).to_be_visible()
    a = next(t for t in appliance.api("GET", "/tasks").json()["items"] if t["name"] == "chain-a")
    assert (a["retry_on"], a["extra_schedules"], a["tz"]) == (
        ["failed", "timed_out"], ["0 5 * * *", "30 6 * * 1"], "Asia/Shanghai")
    assert (a["on_success"], a["on_failure"], a["on_finish"]) == ([b["id"]], [], [b["id"]])

    # B's editor: a wrong zone, then B → A, which closes A → B → A
    page.goto(f"/#/tasks/{b['id']}")
    chained = page.get_by_label("After failure")
    page.get_by_label("Time zone").fill("Mars/Olympus")
    chained.select_option(label="chain-a")  # waits for the task names to load
    expect(chained.locator("option", has_text="chain-b")).to_have_count(0)  # not itself
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#f-tz-err")).to_contain_text("Mars/Olympus")
    expect(page.get_by_label("Time zone")).to_be_focused()
    page.get_by_label("Time zone").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#f-on_failure-err")).to_contain_text("cycle")
    expect(page.locator("#f-tz-err")).to_be_hidden()
    expect(chained).to_have_attribute("aria-invalid", "true")
    expect(chained).to_be_focused()
    assert appliance.api("GET", f"/tasks/{b['id']}").json()["on_failure"] == []
    # the editor shows what is saved: A's lists come back selected
    page.goto(f"/#/tasks/{a['id']}")
    expect(page.get_by_label("After success").locator("option:checked")).to_have_text(["chain-b"])
    expect(page.get_by_label("timed out", exact=True)).to_be_checked()
    expect(page.get_by_label("More schedules (one per line)")).to_have_value(
        "0 5 * * *\n30 6 * * 1")
