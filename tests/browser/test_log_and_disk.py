"""The panel when a log cannot be read or is incomplete, and when a volume's free space
is unknown — each under the real condition: a task that replaces its log with a FIFO
or a directory (task isolation off), a log cut short after the run (what a power cut
leaves), a log on a FUSE filesystem whose daemon is stopped (a hung filesystem), and a
logs volume on FUSE without statfs (no size at all)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from drills._forgetful import ForgetfulMount, available

from .conftest import FAST, Watched, api_task, shoot, sign_in, sign_in_at, wait_run
from _appliance import Appliance
from support import free_port, unavailable

pytestmark = pytest.mark.slow

# The task finds its log through its stdout and swaps it for something else.
SWAP = 'L=$(readlink /proc/$$/fd/1); rm "$L"; {make}; {then}'
MAKERS = {"fifo": 'mkfifo "$L"', "directory": 'mkdir "$L"'}
WORDS = {"fifo": "named pipe (FIFO)", "directory": "directory"}
WORDS_ZH = {"fifo": "命名管道（FIFO）", "directory": "目录"}


def _log_file(logs: Path, run: dict[str, object]) -> Path:
    attempt = str(run["attempts"][-1]["id"])  # type: ignore[index]
    return logs / attempt[-2:] / f"{attempt}.log"


@pytest.fixture(scope="module")
def unconfined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    """Task isolation off: with Landlock in effect a task cannot touch the logs dir, so
    only where isolation is not in effect (off, or `auto` on a kernel without Landlock)
    can a task replace its own log (docs/security.md)."""
    app = Appliance(tmp_path_factory.mktemp("unconfined") / "state", free_port(),
                    task_isolation="off", **FAST)
    try:
        app.start(timeout=60)
        yield app
    finally:
        app.stop()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_log_replaced_by_a_special_file_is_explained_and_not_reopened(
        watched: Watched, unconfined: Appliance, kind: str) -> None:
    page, appliance = watched.page, unconfined
    then = "sleep 120" if kind == "fifo" else "true"  # a FIFO run goes on; the other ends
    task = api_task(appliance, name=f"swaps-{kind}",
                    command=SWAP.format(make=MAKERS[kind], then=then))
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    try:
        sign_in_at(page, appliance)
        page.goto(f"http://127.0.0.1:{appliance.port}/#/runs/{run_id}")
        state = page.locator("#log-state")
        problem = page.locator("#log-problem")
        expect(state).to_have_attribute("data-state", "error")
        status = "running" if kind == "fifo" else "succeeded"
        expect(state).to_have_text(f"stopped — the log cannot be read (run {status})")
        expect(problem.locator("p").first).to_have_text(
            f"The log cannot be shown: the task replaced its log file with a {WORDS[kind]}, "
            "and qledge reads regular files only. The run itself is not affected.")
        expect(problem.locator("[data-role='api-message']")).to_have_text(
            f"the log path holds a {kind}, not a regular file")
        expect(problem).to_have_attribute("data-error", "LOG_NOT_REGULAR_FILE")
        expect(page.locator("#run-status .badge")).to_have_attribute("data-status", status)
        if kind == "fifo":
            shoot(page, "run-log-unreadable")
        # the end was final: no second ticket, no second stream, while the page stays open
        time.sleep(2.5)
        streams = [u for u in watched.urls if f"/runs/{run_id}/log/stream" in u]
        tickets = [u for u in watched.urls if u.endswith(f"/runs/{run_id}/log/ticket")]
        assert (len(streams), len(tickets)) == (1, 1), watched.urls
        expect(page.locator("#log-section")).to_have_attribute("data-reconnects", "0")

        # Download: the API's 409, in the log card (not a toast that vanishes)
        api = appliance.api("GET", f"/runs/{run_id}/log")
        assert api.status_code == 409 and api.json()["kind"] == kind, api.text
        problem.evaluate("el => { el.hidden = true; el.textContent = ''; }")
        page.get_by_role("button", name="Download").click()
        expect(problem).to_be_visible()
        expect(problem).to_have_attribute("data-from", "download")
        expect(problem.locator("p").first).to_contain_text(f"with a {WORDS[kind]}")
        expect(problem.locator("[data-role='api-message']")).to_have_text(api.json()["message"])
        expect(page.get_by_role("button", name="Download")).to_be_enabled()

        page.locator("[data-action='lang']").click()  # the page is drawn again, in Chinese
        expect(page.locator("#log-state")).to_have_attribute("data-state", "error")
        expect(page.locator("#log-state")).to_contain_text("无法读取日志")
        expect(page.locator("#log-problem p").first).to_contain_text(
            f"任务把自己的日志文件换成了{WORDS_ZH[kind]}")
        page.locator("[data-action='lang']").click()
    finally:
        appliance.api("POST", f"/runs/{run_id}/cancel")


def test_a_log_cut_short_by_a_power_loss_says_so_above_the_log(
        page: Page, appliance: Appliance) -> None:
    out = "".join(f"line {i}\n" for i in range(1, 201))
    task = api_task(appliance, name="power-cut",
                    command='for i in $(seq 1 200); do echo "line $i"; done; exit 3')
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    run = wait_run(appliance, run_id, {"failed"})
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    note = page.locator("#log-note")
    expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
    expect(page.locator("#log")).to_have_text(out)
    expect(note).to_be_hidden()  # a whole log: nothing to say

    os.truncate(_log_file(appliance.state / "logs", run), 100)  # what the power cut left
    (attempt,) = appliance.api("GET", f"/runs/{run_id}").json()["attempts"]
    assert (attempt["log_truncated"], attempt["log_size"]) == (True, 100), attempt
    page.reload()
    expect(page.locator("#log-state")).to_have_text("ended, log incomplete — run failed")
    expect(note).to_have_text(
        f"Log truncated by power loss: 100 of {len(out)} bytes survived. The output after "
        "that was lost; the run’s result is not affected.")
    expect(page.locator("#log")).to_have_text(out[:100])
    # above the log, and the result still stands
    assert page.evaluate("""() => {
        const n = document.getElementById('log-note'), l = document.getElementById('log');
        return !!(n.compareDocumentPosition(l) & Node.DOCUMENT_POSITION_FOLLOWING); }""")
    expect(page.locator("#run-exit")).to_have_text("exit 3")
    page.locator("[data-action='lang']").click()
    expect(note).to_have_text(re.compile(
        rf"^日志因断电被截断：{len(out)} 字节中只保留了 100 字节"))
    page.locator("[data-action='lang']").click()


# -- FUSE filesystems: a hung one under a log, one without statfs as the logs volume ----

def _fuse_or_skip() -> None:
    why = available()
    if why:
        unavailable(f"a FUSE filesystem: {why}")


def test_a_hung_log_filesystem_times_out_in_words(page: Page, tmp_path: Path) -> None:
    """The log's shard directory becomes a FUSE mount whose daemon is then stopped (a
    hung filesystem: every read there blocks). The file pool gives up after 5 s: the
    download shows the API's 503 LOG_READ_TIMEOUT, the stream ends with it, and the run's
    record answers with its log state unknown — no power loss note on a guess.

    Only the shard is on FUSE, not the logs volume, so that the run's own record stays
    measurable (a hung logs volume is tested in test_diskpressure.py)."""
    _fuse_or_skip()
    app = Appliance(tmp_path / "state", free_port(), retention_interval_s="3600", **FAST)
    rig: ForgetfulMount | None = None
    try:
        app.start(timeout=60)
        task = api_task(app, name="hello", command="echo hello; echo world")
        run_id = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
        log = _log_file(app.state / "logs", wait_run(app, run_id, {"succeeded"}))
        backing = tmp_path / "backing"
        (backing / "root").mkdir(parents=True)
        (backing / "root" / log.name).write_bytes(log.read_bytes())
        log.parent.rename(log.parent.with_name(log.parent.name + ".aside"))
        log.parent.mkdir()
        rig = ForgetfulMount(backing, log.parent)
        rig.mount()
        assert log.read_text() == "hello\nworld\n"  # the same log, now on FUSE

        sign_in_at(page, app)
        page.goto(f"http://127.0.0.1:{app.port}/#/runs/{run_id}")
        expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")
        expect(page.locator("#log")).to_have_text("hello\nworld\n")
        page.get_by_role("navigation").get_by_role("link", name="System").click()
        expect(page.locator("#sys-file-reads")).to_have_text(
            re.compile(r"^threads: \d+ \(\d+ idle\) · waiting: \d+ · timed out: 0$"))
        expect(page.locator("#sys-file-reads")).not_to_have_class("warn-text")
        page.go_back()
        expect(page.locator("#log-state")).to_have_attribute("data-state", "ended")

        assert rig.proc is not None
        os.kill(rig.proc.pid, signal.SIGSTOP)  # the filesystem hangs: every call blocks
        try:
            page.get_by_role("button", name="Download").click()
            problem = page.locator("#log-problem")
            expect(problem).to_have_attribute("data-error", "LOG_READ_TIMEOUT", timeout=20_000)
            expect(problem).to_have_attribute("data-from", "download")
            expect(problem.locator("p").first).to_have_text(
                "Reading the log took too long (its filesystem may be stuck), so it stopped. "
                "Try again later; the run itself is not affected.")
            expect(problem.locator("[data-role='api-message']")).to_have_text(
                "file read took longer than 5 s; try again later")
            expect(page.get_by_role("button", name="Download")).to_be_enabled()
            # a fresh page: its stream ends with the same error, and stays closed
            page.reload()
            state = page.locator("#log-state")
            expect(state).to_have_attribute("data-state", "error", timeout=20_000)
            expect(state).to_have_text("stopped — the log cannot be read (run succeeded)")
            expect(problem).to_have_attribute("data-from", "stream")
            expect(problem).to_have_attribute("data-error", "LOG_READ_TIMEOUT")
            expect(page.locator("#run-status .badge")).to_have_attribute(
                "data-status", "succeeded", timeout=20_000)
            (attempt,) = app.api("GET", f"/runs/{run_id}", timeout=20).json()["attempts"]
            assert (attempt["log_truncated"], attempt["log_size"]) == (None, None), attempt
            expect(page.locator("#log-note")).to_be_hidden()
            page.locator("[data-action='lang']").click()
            expect(page.locator("#log-problem p").first).to_contain_text(
                "读取日志超时", timeout=20_000)
            page.locator("[data-action='lang']").click()
        finally:
            os.kill(rig.proc.pid, signal.SIGCONT)

        # the pool's timeouts show on the System page
        page.get_by_role("navigation").get_by_role("link", name="System").click()
        reads = page.locator("#sys-file-reads")
        expect(reads).to_have_text(re.compile(r"^threads: \d+ \(\d+ idle\) · waiting: \d+ · "
                                              r"timed out: [1-9]\d*$"))
        expect(reads).to_have_class("warn-text")
        shown = int(re.findall(r"timed out: (\d+)", reads.inner_text())[0])
        assert shown == app.api("GET", "/system").json()["file_reads"]["timeouts"]
    finally:
        if rig is not None and rig.proc is not None:
            os.kill(rig.proc.pid, signal.SIGCONT)  # never leave a filesystem stopped
        app.stop()
        if rig is not None:
            rig.unmount()


def test_unknown_free_space_is_not_a_zero_byte_bar(page: Page, tmp_path: Path) -> None:
    """The logs volume on a FUSE filesystem without statfs (size 0), default guard "off"."""
    _fuse_or_skip()
    logs = tmp_path / "logs"
    rig = ForgetfulMount(tmp_path / "backing", logs, statfs=False)
    rig.mount()
    app = Appliance(tmp_path / "state", free_port(), logs_dir=str(logs), **FAST)
    try:
        app.start(timeout=60)
        system = app.api("GET", "/system").json()
        assert system["volumes"]["logs"]["free_space_known"] is False, system["volumes"]
        assert system["volumes"]["logs"]["free_bytes"] is None
        assert system["pressure"]["guard_unknown"] == "off"
        sign_in_at(page, app)
        page.get_by_role("navigation").get_by_role("link", name="System").click()
        logs_vol = page.locator(".volume[data-volume='logs']")
        expect(logs_vol).to_have_attribute("data-free", "unknown")
        expect(logs_vol.locator("[data-role='free-unknown']")).to_have_text(
            "free space unknown (the filesystem reports no size)")
        expect(logs_vol.locator("[data-role='guard']")).to_have_text(
            "disk guard: off — runs still start; a full disk shows in the writes "
            "(QLEDGE_DISK_GUARD_UNKNOWN)")
        expect(logs_vol.locator("meter")).to_have_count(0)
        expect(logs_vol).not_to_contain_text("0 B")
        expect(logs_vol.locator(".badge")).to_have_count(0)  # "off": nothing is held
        expect(page.locator(".volume[data-volume='data']")).to_have_attribute("data-free", "known")
        expect(page.locator(".volume[data-volume='data'] meter")).to_have_count(1)
        expect(page.locator("#sys-pressure")).to_have_count(0)
        page.locator("[data-action='lang']").click()
        expect(logs_vol.locator("[data-role='free-unknown']")).to_have_text(
            "可用空间未知（文件系统不报告容量）")
        expect(logs_vol.locator("[data-role='guard']")).to_contain_text("磁盘保护：关闭")
        page.locator("[data-action='lang']").click()
    finally:
        app.stop()
        rig.unmount()


def test_runs_held_because_free_space_is_unknown_say_so(page: Page, tmp_path: Path) -> None:
    """QLEDGE_DISK_GUARD_UNKNOWN=hold on a logs volume without statfs: the run waits with
    a `run.held` DISK_FREE_UNKNOWN event, and the System page says why."""
    _fuse_or_skip()
    logs = tmp_path / "logs"
    rig = ForgetfulMount(tmp_path / "backing", logs, statfs=False)
    rig.mount()
    app = Appliance(tmp_path / "state", free_port(), logs_dir=str(logs),
                    disk_guard_unknown="hold", **FAST)
    try:
        app.start(timeout=60)
        task = api_task(app, name="waits", command="true")
        run_id = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
        deadline = time.monotonic() + 30
        while not (held := [e for e in app.api("GET", f"/runs/{run_id}/events").json()["items"]
                            if e["type"] == "run.held"]):
            assert time.monotonic() < deadline, "no run.held event"
            time.sleep(0.2)
        assert held[0]["data"] == {"reason": "DISK_FREE_UNKNOWN", "volumes": "logs"}, held
        sign_in_at(page, app)
        page.goto(f"http://127.0.0.1:{app.port}/#/runs/{run_id}")
        item = page.locator("#timeline li[data-type='run.held'] .ev-text")
        expect(item).to_have_text(
            "Held in the queue: the free space of logs is unknown (its filesystem reports no "
            "size or does not answer) and the disk guard is set to hold; it starts when that "
            "changes")
        expect(page.locator("#run-status .badge")).to_have_attribute("data-status", "queued")
        page.locator("[data-action='lang']").click()
        expect(item).to_have_text(re.compile(r"^在队列中暂缓：logs 的可用空间未知"))
        page.locator("[data-action='lang']").click()

        page.get_by_role("navigation").get_by_role("link", name="System").click()
        expect(page.locator("#sys-pressure")).to_have_text(
            "New runs are held: the free space of logs is unknown and the disk guard is set "
            "to hold (QLEDGE_DISK_GUARD_UNKNOWN).")
        logs_vol = page.locator(".volume[data-volume='logs']")
        expect(logs_vol.locator(".badge")).to_have_text("runs held")
        expect(logs_vol.locator("[data-role='guard']")).to_have_text(
            "disk guard: hold — new runs wait while the free space is unknown "
            "(QLEDGE_DISK_GUARD_UNKNOWN)")
        expect(logs_vol.locator("meter")).to_have_count(0)
        shoot(page, "system-free-unknown")
        assert app.api("GET", f"/runs/{run_id}").json()["status"] == "queued"
    finally:
        app.stop()
        rig.unmount()
