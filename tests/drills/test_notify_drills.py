"""Notification drills: the real supervised appliance, real apprise, real receivers on
loopback, real kill -9. The outbox row commits with the result, so a worker killed
between that commit and the send loses nothing, and one killed mid-send sends that
message once more — never more."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    Factory,
    alive,
    api,
    get_run,
    make_task,
    ok,
    output,
    start_worker,
    stop_leaving_tasks,
    stop_worker,
    trigger,
    wait_running,
    wait_terminal,
    wait_until,
)
from _receivers import HttpReceiver, SmtpReceiver, text_of

pytestmark = pytest.mark.drill

NOTIFY = {"notify_retry_base_s": "0.2", "notify_interval_s": "1"}


def add_channel(app: Any, name: str, url: str) -> None:
    ok(api(app, "POST", "/notifications/channels", json={"name": name, "url": url}), 201)


def messages(app: Any, run_id: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = ok(api(app, "GET", "/notifications/messages",
                                       params={"run_id": run_id}))["items"]
    return got


def gated(gate: Path, tail: str) -> str:
    return f'while [ ! -e "{gate}" ]; do sleep 0.05; done; {tail}'


def test_killed_between_commit_and_send_delivers_once_after_restart(
        appliance: Factory) -> None:
    hook = HttpReceiver().start()
    try:
        first = appliance(failpoints="notify.before_send=exit", **NOTIFY)
        add_channel(first, "hook", f"json://127.0.0.1:{hook.port}/h")
        run_id = trigger(first, make_task(first, "exit 9", name="nightly")["id"])
        # The worker dies at the send, after the result and its outbox row committed
        # (and again after each restart by supervisord, until this test stops it).
        wait_until(lambda: "exit status 86" in output(first), 30, "worker exit at send")
        stop_leaving_tasks(first)
        assert hook.requests == []
        app = appliance(first.state, **NOTIFY)  # same state, no failpoint
        run = get_run(app, run_id)
        assert (run["status"], run["exit_code"]) == ("failed", 9)
        (got,) = hook.wait(1)
        assert got.json()["title"] == "[qledge] nightly: failed"
        wait_until(lambda: [m["state"] for m in messages(app, run_id)] == ["sent"], 20,
                   "marked sent")
        time.sleep(1.5)
        assert len(hook.requests) == 1
    finally:
        hook.stop()


def test_killed_right_after_the_result_commit_still_notifies(appliance: Factory) -> None:
    """The outbox row is part of the result's commit: a worker that dies right after
    that commit (before anything else ran) leaves the message for the next one."""
    hook = HttpReceiver().start()
    try:
        first = appliance(failpoints="consumer.after_commit=exit", **NOTIFY)
        add_channel(first, "hook", f"json://127.0.0.1:{hook.port}/h")
        run_id = trigger(first, make_task(first, "exit 6", name="etl")["id"])
        wait_until(lambda: "exit status 86" in output(first), 30, "worker exit after commit")
        stop_leaving_tasks(first)
        app = appliance(first.state, **NOTIFY)
        assert get_run(app, run_id)["status"] == "failed"
        (got,) = hook.wait(1)
        assert got.json()["title"] == "[qledge] etl: failed"
        wait_until(lambda: [m["state"] for m in messages(app, run_id)] == ["sent"], 20,
                   "marked sent")
        time.sleep(1.5)
        assert len(hook.requests) == 1
    finally:
        hook.stop()


def test_killed_mid_send_sends_at_most_one_duplicate(appliance: Factory) -> None:
    hook = HttpReceiver().start()
    hook.delay_s = 3.0  # the first send is in flight when the worker is killed
    try:
        app = appliance(**NOTIFY)
        add_channel(app, "hook", f"json://127.0.0.1:{hook.port}/h")
        run_id = trigger(app, make_task(app, "exit 3", name="flaky")["id"])
        hook.wait(1)
        hook.delay_s = 0.0
        app.kill_worker()  # kill -9 while the receiver holds the request
        wait_until(lambda: [m["state"] for m in messages(app, run_id)] == ["sent"], 40,
                   "delivered after the restart")
        time.sleep(1.5)
        got = hook.requests
        assert len(got) == 2, "one send before the kill, one after: at most one duplicate"
        assert got[0].body == got[1].body
    finally:
        hook.stop()


def test_lost_and_recovered_runs_after_a_worker_kill_reach_every_receiver(
        appliance: Factory) -> None:
    hook, ntfy, smtp = HttpReceiver().start(), HttpReceiver().start(), SmtpReceiver().start()
    try:
        app = appliance(**NOTIFY)
        add_channel(app, "hook", f"json://127.0.0.1:{hook.port}/h")
        add_channel(app, "ntfy", f"ntfy://127.0.0.1:{ntfy.port}/alerts")
        add_channel(app, "mail", smtp.url)
        gate = Path(app.state) / "work" / "gate"
        never = Path(app.state) / "work" / "never"
        lost_id = trigger(app, make_task(app, gated(never, "exit 0"), name="doomed")["id"])
        late_id = trigger(app, make_task(app, gated(gate, "exit 4"), name="late")["id"])
        pid = wait_running(app, lost_id)["attempts"][0]["pid"]
        wait_running(app, late_id)
        stop_worker(app)
        os.killpg(pid, signal.SIGKILL)  # the launcher and its task: no receipt, ever
        gate.touch()  # the other one finishes while no worker runs
        wait_until(lambda: not alive(pid), 10, "launcher dead")
        time.sleep(0.5)
        start_worker(app)
        assert wait_terminal(app, lost_id)["status"] == "lost"
        assert wait_terminal(app, late_id)["status"] == "failed"

        def by_title(items: list[Any], title: Any, text: Any) -> dict[str, str]:
            return {title(i): text(i) for i in items}

        hooks = by_title(hook.wait(2), lambda r: r.json()["title"], lambda r: r.json()["message"])
        ntfys = by_title(ntfy.wait(2), lambda r: r.json()["title"], lambda r: r.json()["message"])
        mails = by_title(smtp.wait(2), lambda m: m["Subject"], text_of)
        for got in (hooks, ntfys, mails):
            assert set(got) == {"[qledge] doomed: lost", "[qledge] late: failed"}, got
            lost = got["[qledge] doomed: lost"]
            assert "Reason: ended while the worker was down and left no result" \
                   " (RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT)" in lost
            assert "Exit code: none" in lost
            assert "Recovered after a restart" not in lost
            late = got["[qledge] late: failed"]
            assert "Exit code: 4" in late and "Recovered after a restart" in late
        time.sleep(1.5)
        assert (len(hook.requests), len(ntfy.requests), len(smtp.messages)) == (2, 2, 2)
    finally:
        hook.stop()
        ntfy.stop()
        smtp.stop()
