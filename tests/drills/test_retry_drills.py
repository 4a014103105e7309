"""Retry drills (issue 20): the backoff wait and the next attempt survive kill -9.

A retry is a new attempt of the same run after a persisted not-before time: a
worker killed during the wait, or while attempt 2 runs, neither loses nor
doubles an attempt, and the run still ends exactly once.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from .conftest import (
    Factory,
    alive,
    events_of,
    get_run,
    kill_worker,
    make_task,
    start_worker,
    stop_worker,
    trigger,
    wait_running,
    wait_terminal,
    wait_until,
)

pytestmark = pytest.mark.drill


def test_kill_during_backoff_and_during_attempt_two_still_three_attempts(
        appliance: Factory) -> None:
    app = appliance()
    work = app.state / "work"
    gate, counter = work / "gate", work / "n"
    # Fails on attempts 1 and 2 (attempt 2 only once the gate opens), succeeds on 3.
    command = (f'n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "{counter}";'
               f' if [ "$n" -eq 2 ]; then while [ ! -e "{gate}" ]; do sleep 0.05; done; fi;'
               f' echo "attempt $n"; [ "$n" -ge 3 ]')
    task = make_task(app, command, retries=2, retry_delay_s=3, retry_on=["failed"])
    run_id = trigger(app, task["id"])

    def retry_events() -> list[dict[str, Any]]:
        return [e for e in events_of(app, run_id) if e["type"] == "run.retry_scheduled"]

    first = wait_until(retry_events, 30, "the first retry scheduled")[0]
    waiting = get_run(app, run_id)
    assert waiting["status"] == "queued" and len(waiting["attempts"]) == 1, waiting
    kill_worker(app)  # during the backoff wait (3 s + jitter)

    def second_running() -> dict[str, Any] | None:
        run = get_run(app, run_id)
        attempts = run["attempts"]
        return run if len(attempts) == 2 and attempts[1]["status"] == "running" else None

    run = wait_until(second_running, 40, "attempt 2 running")
    assert run["attempts"][1]["created_at_ms"] >= first["data"]["not_before_ms"], run
    pid = run["attempts"][1]["pid"]
    kill_worker(app)  # during attempt 2: its launcher lives on
    assert alive(pid), "attempt 2's launcher died with the worker"
    gate.touch()

    run = wait_terminal(app, run_id, timeout=90)
    assert run["status"] == "succeeded" and run["exit_code"] == 0, run
    assert [(a["attempt_no"], a["status"]) for a in run["attempts"]] == [
        (1, "failed"), (2, "failed"), (3, "succeeded")], run
    assert counter.read_text().strip() == "3"  # the command ran three times, no more
    evs = events_of(app, run_id)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1)), evs
    kinds = [e["type"] for e in evs]
    assert kinds.count("run.finished") == 1 and kinds[-1] == "run.finished", kinds
    assert kinds.count("attempt.finished") == 3 and kinds.count("attempt.created") == 3, kinds
    assert [e["data"]["attempt_no"] for e in evs if e["type"] == "run.retry_scheduled"] == [1, 2]


def test_an_attempt_lost_while_the_worker_was_down_is_retried(appliance: Factory) -> None:
    """`lost` retries by default: the launcher of attempt 1 dies with no receipt while
    no worker runs; recovery finds it lost, and the same run gets attempt 2."""
    app = appliance()
    work = app.state / "work"
    counter = work / "n"
    command = (f'n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "{counter}";'
               f' if [ "$n" -eq 1 ]; then sleep 600; fi; exit 0')
    run_id = trigger(app, make_task(app, command, retries=1, retry_delay_s=1)["id"])
    pid = wait_running(app, run_id)["attempts"][0]["pid"]
    stop_worker(app)
    os.killpg(pid, signal.SIGKILL)  # the launcher and the task under it
    wait_until(lambda: not alive(pid), 10, "launcher dead")
    start_worker(app)
    run = wait_terminal(app, run_id)
    assert run["status"] == "succeeded", run
    assert [(a["attempt_no"], a["status"], a["reason_code"]) for a in run["attempts"]] == [
        (1, "lost", "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT"), (2, "succeeded", "EXITED")], run
    kinds = [e["type"] for e in events_of(app, run_id)]
    assert kinds.count("run.finished") == 1 and kinds.count("run.retry_scheduled") == 1, kinds
