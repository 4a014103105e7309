"""Chain drills (issue 20): a worker killed around the upstream run's end never loses
or doubles the downstream run — it commits in the same transaction."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import (
    Factory,
    api,
    events_of,
    get_run,
    make_task,
    ok,
    output,
    stop_leaving_tasks,
    trigger,
    wait_running,
    wait_terminal,
    wait_until,
)

pytestmark = pytest.mark.drill


@pytest.mark.parametrize("failpoint", [
    "chain.after_commit",  # upstream end and downstream run committed, not yet started
    "consumer.before_commit",  # neither committed: the receipt replays both
])
def test_kill_around_the_upstream_end_leaves_exactly_one_downstream_run(
        appliance: Factory, failpoint: str) -> None:
    first = appliance(failpoints=f"{failpoint}=exit")
    work = first.state / "work"
    gate, ledger = work / "gate", work / "ledger"
    down = make_task(first, f'echo ran >> "{ledger}"')
    up = make_task(first, f'while [ ! -e "{gate}" ]; do sleep 0.05; done; exit 0',
                   on_success=[down["id"]])
    run_id = trigger(first, up["id"])
    wait_running(first, run_id)
    gate.touch()
    wait_until(lambda: "exit status 86" in output(first), 30, f"worker exit at {failpoint}")
    stop_leaving_tasks(first)

    app = appliance(first.state)  # same state, no failpoint
    assert wait_terminal(app, run_id)["status"] == "succeeded"

    def downstream() -> list[dict[str, Any]] | None:
        runs: list[dict[str, Any]] = ok(api(app, "GET", "/runs",
                                            params={"task_id": down["id"]}))["items"]
        return runs if runs and all(r["terminal"] for r in runs) else None

    runs = wait_until(downstream, 30, "the downstream run ended")
    assert [(r["trigger"], r["status"]) for r in runs] == [("chain", "succeeded")], runs
    assert ledger.read_text() == "ran\n"  # it ran once
    up_events = events_of(app, run_id)
    assert [e["data"] for e in up_events if e["type"] == "chain.triggered"] == [
        {"run_id": runs[0]["id"], "task_id": down["id"]}]
    assert [e["type"] for e in up_events].count("run.finished") == 1
    by = [e["data"] for e in events_of(app, runs[0]["id"]) if e["type"] == "chain.triggered_by"]
    assert by == [{"run_id": run_id, "task_id": up["id"], "status": "succeeded"}]
    assert get_run(app, runs[0]["id"])["attempts"][0]["status"] == "succeeded"
