"""`task … conc` under a worker kill -9: real supervisord, worker, ql-launch, scripts.

The parent run has no process; its children are ordinary runs. A worker killed
while they run must lose no child (each keeps its launcher, log and exit code)
and must not invent the parent's result: the parent finishes only when the last
child's result commits, with exactly what the children did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    Factory,
    alive,
    api,
    assert_one_terminal,
    events_of,
    full_log,
    get_run,
    kill_worker,
    make_task,
    ok,
    trigger,
    wait_backlog_drained,
    wait_terminal,
    wait_until,
)

pytestmark = pytest.mark.drill


def _running_children(app: Any, parent_id: str, n: int) -> list[dict[str, Any]] | None:
    kids = get_run(app, parent_id)["children"]
    if len(kids) != n or any(k["status"] != "running" for k in kids):
        return None
    runs = [get_run(app, k["id"]) for k in kids]
    if not all(r["attempts"] and r["attempts"][0]["pid"] for r in runs):
        return None  # `running` from spawn step 1; the pid comes with the identity
    logs = [full_log(app, k["id"]) for k in kids]
    return runs if all(b"start" in log for log in logs) else None


def test_worker_killed_during_conc_loses_no_child_and_invents_no_result(
        appliance: Factory) -> None:
    app = appliance()
    scripts = Path(app.state) / "work" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    gate = Path(app.state) / "work" / "gate"
    (scripts / "c.sh").write_text(
        f'echo "start $V"\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done\n'
        'echo "end $V"\ncase "$V" in b) exit 3;; esac\n')
    task = make_task(app, "task c.sh conc V", env={"V": "a&b&c"})
    parent_id = trigger(app, task["id"])
    kids = wait_until(lambda: _running_children(app, parent_id, 3), 30, "3 children running")
    pids = [k["attempts"][0]["pid"] for k in kids]

    for _ in range(2):
        kill_worker(app)
        assert all(alive(pid) for pid in pids), "a child's launcher died with the worker"
        assert get_run(app, parent_id)["status"] == "running"
    gate.touch()

    parent = wait_terminal(app, parent_id)
    assert (parent["status"], parent["exit_code"], parent["reason_code"]) == (
        "failed", 3, "CONC_CHILDREN")
    assert parent["attempts"] == []
    children = parent["children"]
    assert [(c["id"], c["conc_index"]) for c in children] == [
        (k["id"], i) for k, i in zip(kids, (1, 2, 3), strict=True)]
    for child, value, code in zip(children, "abc", (0, 3, 0), strict=True):
        run = wait_terminal(app, child["id"])
        assert (run["status"], run["exit_code"], run["reason_code"]) == (
            "succeeded" if code == 0 else "failed", code, "EXITED")
        assert run["attempts"][0]["pid"] == kids[children.index(child)]["attempts"][0]["pid"]
        assert full_log(app, child["id"]) == f"start {value}\nend {value}\n".encode()
        assert_one_terminal(app, child["id"])
    finished = [e for e in events_of(app, parent_id) if e["type"] == "run.finished"]
    assert len(finished) == 1 and finished[0]["data"]["children_succeeded"] == 2
    # Nothing else was started: the parent and its three children are the task's runs.
    runs = ok(api(app, "GET", "/runs", params={"task_id": task["id"]}))["items"]
    assert len(runs) == 4
    wait_backlog_drained(app)
