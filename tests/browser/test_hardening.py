"""The panel for issue 21's hardening, against real appliances: background processes
a command leaves (the editor's keep_background, the count the launcher ended), task
isolation on the System page (Landlock in effect; refused by a seccomp filter, as on a
kernel without it), and retention's deletions by reason — a real 8 MiB tmpfs logs
volume filled until it is critically full, so that a task's newest log goes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from qledge.launch import isolation

from .conftest import FAST, api_task, shoot, sign_in, sign_in_at, wait_run
from _appliance import Appliance
from _launcher import landlock_unavailable
from support import free_port, tmpfs, unavailable

pytestmark = pytest.mark.slow


def test_keep_background_in_the_editor_and_leftovers_in_words(
        page: Page, appliance: Appliance) -> None:
    sign_in(page)
    page.get_by_role("link", name="New task").click()
    box = page.get_by_label("Keep background processes running when the run ends")
    expect(box).not_to_be_checked()  # the default: leftovers are ended
    expect(box).to_have_accessible_description(re.compile(
        r"^Off \(default\): whatever the command leaves running is ended when it exits "
        r"\(TERM, then KILL after 2 s\) and counted"))
    page.get_by_label("Name", exact=True).fill("leaves-two")
    page.get_by_label("Command").fill("sleep 300 & sleep 300 & echo started")
    box.check()
    page.get_by_role("button", name="Create task").click()
    row = page.locator("tr[data-task-name='leaves-two']")
    expect(row).to_be_visible()
    task = next(t for t in appliance.api("GET", "/tasks").json()["items"]
                if t["name"] == "leaves-two")
    assert task["keep_background"] is True
    row.get_by_role("link", name="Edit").click()
    expect(box).to_be_checked()
    box.uncheck()
    page.get_by_role("button", name="Save").click()
    expect(row).to_be_visible()
    assert appliance.api("GET", f"/tasks/{task['id']}").json()["keep_background"] is False

    # Off: the launcher ends both sleeps when the shell exits, and says how many.
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    wait_run(appliance, run_id, {"succeeded"})
    events = appliance.api("GET", f"/runs/{run_id}/events").json()["items"]
    finished = {e["type"]: e["data"] for e in events if e["type"].endswith(".finished")}
    assert finished["run.finished"]["leftover_processes"] == 2, finished
    page.goto(f"/#/runs/{run_id}")
    expect(page.locator("#timeline li[data-type='run.finished'] .ev-text")).to_have_text(
        "Run finished: succeeded · exit 0 · ended 2 leftover processes")
    expect(page.locator("#timeline li[data-type='attempt.finished'] .ev-text")).to_have_text(
        "Attempt finished: succeeded · exit 0 · ended 2 leftover processes")
    expect(page.locator("dt:text-is('Background processes') + dd")).to_have_text(
        "ended 2 leftover processes")
    page.locator("[data-action='lang']").click()
    expect(page.locator("#run-leftover")).to_have_text("结束了 2 个残留进程")
    page.locator("[data-action='lang']").click()

    # a run that left nothing says nothing about it
    quiet = api_task(appliance, name="leaves-none", command="echo alone")
    quiet_run = appliance.api("POST", f"/tasks/{quiet['id']}/runs").json()["run"]["id"]
    wait_run(appliance, quiet_run, {"succeeded"})
    page.goto(f"/#/runs/{quiet_run}")
    expect(page.locator("#timeline li[data-type='run.finished'] .ev-text")).to_have_text(
        "Run finished: succeeded · exit 0")
    expect(page.locator("#run-leftover")).to_have_count(0)


def test_task_isolation_in_effect_and_the_settled_journal(page: Page,
                                                          appliance: Appliance) -> None:
    abi, why = isolation.landlock_abi()
    if why is not None:
        unavailable(f"Landlock on this kernel: {why}")
    system = appliance.api("GET", "/system").json()
    iso = system["task_isolation"]
    assert (iso["mode"], iso["effective"], iso["landlock_abi"]) == ("auto", True, abi), iso
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="System").click()
    card = page.locator("#sys-isolation")
    expect(card).to_have_attribute("data-effective", "true")
    expect(card.locator("dt:text-is('Mode') + dd")).to_have_text("auto")
    expect(card.locator("dt:text-is('In effect') + dd")).to_have_text("Yes")
    expect(card.locator("dt:text-is('Landlock ABI') + dd")).to_have_text(str(abi))
    expect(card.locator("#sys-iso-protected li")).to_have_text(iso["protected"])
    assert any(d.endswith("/data") for d in iso["protected"]), iso
    expect(page.locator("#sys-iso-warning")).to_have_count(0)
    # the journal's settled rows: the same count as the API's (rows age out meanwhile, so
    # compare one page load with the API answer around it)
    settled = page.locator("[data-stat='settled'] .stat-value")
    for _ in range(20):
        before = appliance.api("GET", "/system").json()["journal"]["settled"]
        page.get_by_role("button", name="Refresh").click()
        expect(settled).to_have_text(re.compile(r"^\d+$"))
        time.sleep(0.3)
        after = appliance.api("GET", "/system").json()["journal"]["settled"]
        if before == after == int(settled.inner_text()):
            break
    else:
        raise AssertionError("the settled count never matched the API's")
    expect(page.locator("[data-stat='settled'] .stat-label")).to_have_text("Settled")


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_task_isolation_not_in_effect_is_a_visible_warning(page: Page, tmp_path: Path,
                                                           mode: str) -> None:
    """Landlock's syscalls refused by a seccomp filter (as on a kernel without it)."""
    no_landlock = landlock_unavailable()
    if no_landlock is None:
        unavailable("the seccomp Landlock filter is written for x86_64 hosts")
    app = Appliance(tmp_path / "state", free_port(), preexec_fn=no_landlock,
                    task_isolation=mode, **FAST)
    try:
        app.start(timeout=60)
        iso = app.api("GET", "/system").json()["task_isolation"]
        assert (iso["mode"], iso["effective"]) == (mode, False), iso
        sign_in_at(page, app)
        page.get_by_role("navigation").get_by_role("link", name="System").click()
        card = page.locator("#sys-isolation")
        expect(card).to_have_attribute("data-effective", "false")
        warning = card.locator("#sys-iso-warning")
        # The server's "Landlock unavailable: Function not implemented", in words.
        reason = "the kernel offers no Landlock: the kernel was built without it (ENOSYS)"
        expect(card.locator("dt:text-is('Why not') + dd")).to_have_text(reason)
        expect(card.locator("dt:text-is('Landlock ABI') + dd")).to_have_text("—")
        if mode == "required":
            expect(warning).to_have_text(f"Task isolation is required but unavailable "
                                         f"({reason}): no task starts; every run ends blocked.")
            expect(warning).to_have_class(re.compile(r"\berror\b"))
        else:
            expect(warning).to_have_text("Tasks run unconfined: they can read the database "
                                         f"and the admin token ({reason}).")
        page.locator("[data-action='lang']").click()
        expect(warning).to_contain_text("任务隔离设为必需但不可用" if mode == "required"
                                        else "任务在无隔离状态下运行")
        expect(warning).to_contain_text("内核不提供 Landlock：内核编译时未启用（ENOSYS）")
        assert "Function not implemented" not in card.inner_text()
        page.locator("[data-action='lang']").click()
        if mode == "required":
            shoot(page, "system-isolation-required")
            task = api_task(app, name="never-starts", command="echo hi")
            run_id = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
            run = wait_run(app, run_id, {"blocked"})
            assert run["reason_code"] == "TASK_ISOLATION_UNAVAILABLE", run
            page.goto(f"http://127.0.0.1:{app.port}/#/runs/{run_id}")
            expect(page.locator("#run-reason")).to_have_text(
                "Task isolation is “required” but Landlock is unavailable (see System): "
                "blocked, nothing was started.")
    finally:
        app.stop()


# -- a critically full logs volume ---------------------------------------------------

@pytest.fixture
def tiny_logs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "logs", "a tmpfs logs volume") as mnt:
        yield mnt


@pytest.mark.drill
def test_a_critically_full_disk_takes_a_tasks_newest_log_and_says_so(
        page: Page, tmp_path: Path, tiny_logs: Path) -> None:
    """12 MB into an 8 MiB logs volume with a 2 MiB low-water mark (critical below
    1 MiB): while the task holds its log open the volume shows critically full; once it
    ends, retention takes its log — its task's newest — with the reason DISK_CRITICAL,
    which the run page and the System page's deletions say in words."""
    gate = tmp_path / "gate"
    app = Appliance(tmp_path / "state", free_port(), logs_dir=str(tiny_logs),
                    low_water_mb="2", low_water_pct="0", logs_cap_mb="0",
                    retention_interval_s="1", **FAST)
    try:
        app.start(timeout=60)
        task = api_task(app, name="overflow", command=f"head -c 12000000 /dev/zero; rc=$?; "
                        f"while [ ! -e {gate} ]; do sleep 0.1; done; exit $rc")
        run_id = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
        deadline = time.monotonic() + 60
        while not app.api("GET", "/system").json()["volumes"]["logs"]["critical"]:
            assert time.monotonic() < deadline, "the logs volume never became critical"
            time.sleep(0.2)
        sign_in_at(page, app)
        page.get_by_role("navigation").get_by_role("link", name="System").click()
        logs_vol = page.locator(".volume[data-volume='logs']")
        expect(logs_vol.locator(".badge")).to_have_text("critically full")
        expect(logs_vol).to_contain_text("low-water mark 2.0 MiB · critical mark 1.0 MiB")
        expect(page.locator("#sys-policy")).to_contain_text(
            "LOW_WATER_MB 2 / LOW_WATER_PCT 0 · CRITICAL_WATER_MB 16")
        deleted = page.locator("#sys-deleted tr[data-reason='DISK_CRITICAL'] td")
        expect(deleted).to_have_text(
            ["logs", "disk critically full — even a task’s newest log goes", re.compile(r"\d+"),
             "0"])

        gate.touch()
        run = wait_run(app, run_id, {"failed"})
        assert run["exit_code"] == 1, run
        deadline = time.monotonic() + 60
        while app.api("GET", f"/runs/{run_id}/log").status_code != 410:
            assert time.monotonic() < deadline, "the overflow log was never evicted"
            time.sleep(0.2)
        assert app.api("GET", f"/runs/{run_id}/log").json()["reason"] == "DISK_CRITICAL"
        page.get_by_role("button", name="Refresh").click()
        expect(deleted.nth(3)).to_have_text("1")
        expect(page.locator("#sys-deleted tr[data-reason='DISK_PRESSURE'] td").nth(0)).to_have_text(
            "logs")
        expect(page.locator("#sys-deleted tr[data-reason='KEEP_RUNS'] td").nth(1)).to_have_text(
            "more than keep_runs per task")
        page.locator("[data-action='lang']").click()
        expect(deleted.nth(1)).to_have_text("磁盘空间严重不足 — 连任务最新的日志也被删除")
        page.locator("[data-action='lang']").click()

        page.goto(f"http://127.0.0.1:{app.port}/#/runs/{run_id}")
        expect(page.locator("#log-section")).to_have_attribute("data-evicted", "true")
        expect(page.locator("#log-section")).to_contain_text(
            "This log was deleted by log retention (disk critically full — even a task’s "
            "newest log goes); the run’s record is kept.")
        expect(page.locator("#run-exit")).to_have_text("exit 1")
    finally:
        app.stop()
