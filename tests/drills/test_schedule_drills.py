"""@boot with the real supervised appliance (issue 20): once after each start of the
appliance (after recovery), not again when supervisord respawns a killed worker."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import (
    Factory,
    api,
    kill_worker,
    make_task,
    ok,
    stop_leaving_tasks,
    wait_until,
)

pytestmark = pytest.mark.drill


def runs_of(app: Any, task_id: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = ok(api(app, "GET", "/runs", params={"task_id": task_id}))[
        "items"]
    return runs


def test_boot_runs_once_per_appliance_start_not_per_worker_respawn(appliance: Factory) -> None:
    first = appliance()
    task = make_task(first, "true", schedule="@boot")
    kill_worker(first)  # supervisord respawns the worker: the same appliance start
    assert runs_of(first, task["id"]) == []
    stop_leaving_tasks(first)

    app = appliance(first.state)  # a new start of the appliance
    runs = wait_until(lambda: [r for r in runs_of(app, task["id"]) if r["terminal"]], 30,
                      "the @boot run ended")
    assert [(r["trigger"], r["status"]) for r in runs] == [("schedule", "succeeded")], runs
    kill_worker(app)
    assert len(runs_of(app, task["id"])) == 1
