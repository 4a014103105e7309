"""Fleet drills (issue 23): three real nodes on loopback over one real PostgreSQL.

Each drill breaks one part — a node's worker, a whole node, the database, the
scheduler's leader — and checks across every node, through the API and through
marker files the tasks themselves write outside the state dirs:

* 0 lost: every run the API accepted ends with a result or a stated reason;
* 0 invented: every `succeeded`/`failed` result is the exit code the task wrote;
  a late receipt (recorded after its node's lease expired, never applied) carries
  the code the task wrote too;
* 0 duplicated: one `run.finished` per run and one `attempt.finished` per attempt.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from _pg import Cluster
from qledge.launch import identity
from qledge.settings import PROFILES

from ._fleet import (  # noqa: F401  (the two fixtures)
    Fleet,
    cluster_fixture,
    fleet_fixture,
    freeze,
    freeze_processes,
    nodes_view,
    thaw_processes,
    wait_node_state,
)
from .conftest import (
    api,
    events_of,
    get_run,
    make_task,
    ok,
    output,
    receipts_root,
    stop_leaving_tasks,
    system,
    trigger,
    wait_backlog_drained,
    wait_terminal,
    wait_until,
)
from _appliance import launcher_pids

pytestmark = [pytest.mark.drill]


def placed(node: str | None = None, labels: list[str] | None = None) -> dict[str, Any]:
    return {"placement": {"node": node, "labels": labels or []}}


def attempt_nodes(run: dict[str, Any]) -> list[str]:
    return [a["node"] for a in run["attempts"]]


def check_fleet(fleet: Fleet, app: Any, runs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """0 lost, 0 invented, 0 duplicated over `runs` (run id -> marker tag)."""
    seen: dict[str, dict[str, Any]] = {}
    for run_id, tag in runs.items():
        run = wait_terminal(app, run_id, 120)
        seen[run_id] = run
        assert run["status"] in ("succeeded", "failed", "lost", "cancelled", "timed_out"), run
        assert run["reason_code"], f"a result without a reason: {run}"
        mark = fleet.marker(tag)
        if run["status"] in ("succeeded", "failed"):
            assert mark is not None, f"{run_id}: a result no task wrote: {run}"
            assert run["exit_code"] == mark[1], f"{run_id}: invented exit code: {run} vs {mark}"
            assert attempt_nodes(run)[-1] == mark[0], (run, mark)
        for a in run["attempts"]:
            if a.get("late_exit_code") is not None:
                assert mark is not None and a["late_exit_code"] == mark[1], (a, mark)
        counts = Counter(e["type"] for e in events_of(app, run_id))
        assert counts["run.finished"] == 1, (run_id, counts)
        assert counts["attempt.finished"] == len(run["attempts"]), (run_id, counts, run)
    return seen


# -- 1. placement ----------------------------------------------------------------------


def test_placement_by_node_and_label_and_on_a_down_node(fleet: Fleet) -> None:
    n1 = fleet.start("n1")
    fleet.start("n2")
    fleet.start("n3", labels="gpio")
    runs: dict[str, str] = {}
    for i in range(3):
        task = make_task(n1, fleet.marked(f"pin{i}", 0), **placed(node="n2"))
        runs[trigger(n1, task["id"])] = f"pin{i}"
        task = make_task(n1, fleet.marked(f"gpio{i}", 3), **placed(labels=["gpio"]))
        runs[trigger(n1, task["id"])] = f"gpio{i}"
    seen = check_fleet(fleet, n1, runs)
    for run_id, tag in runs.items():
        where = fleet.marker(tag)
        assert where is not None
        assert where[0] == ("n2" if tag.startswith("pin") else "n3"), (tag, where)
        assert attempt_nodes(seen[run_id]) == [where[0]]
    # A run placed on a node that is down waits, says why, and runs when it returns.
    fleet.nodes["n2"].stop()
    wait_node_state(n1, "n2", "expired", 30)
    task = make_task(n1, fleet.marked("later", 0), **placed(node="n2"))
    run_id = trigger(n1, task["id"])
    time.sleep(2)
    run = get_run(n1, run_id)
    assert run["status"] == "queued", run
    assert run["waiting"]["node"] == "n2", run
    fleet.restart("n2")
    check_fleet(fleet, n1, {run_id: "later"})
    assert fleet.marker("later") == ("n2", 0)


# -- 2. a worker killed mid-run ----------------------------------------------------------


def test_worker_kill_mid_run_recovers_on_the_same_node(fleet: Fleet) -> None:
    n1 = fleet.start("n1")
    n2 = fleet.start("n2")
    gate = fleet.root / "gate-kill"
    runs = {}
    for i in range(4):
        task = make_task(n1, fleet.marked(f"k{i}", i, gate=gate), **placed(node="n2"))
        runs[trigger(n1, task["id"])] = f"k{i}"
    wait_until(lambda: all(get_run(n1, r)["status"] == "running" for r in runs), 30,
               "all running on n2")
    epoch = nodes_view(n1)["n2"]["epoch"]
    n2.kill_worker()
    gate.touch()
    seen = check_fleet(fleet, n1, runs)
    assert {r["status"] for r in seen.values()} == {"succeeded", "failed"}
    # The restarted worker kept its lease (same epoch): nothing was declared lost.
    wait_until(lambda: n2.ready(), 40, "n2 ready again")
    assert nodes_view(n1)["n2"]["epoch"] == epoch


# -- 3. a whole node frozen beyond its lease ----------------------------------------------


@pytest.mark.parametrize("fenced_tasks", ["leave", "stop"])
def test_frozen_node_is_taken_over_and_its_late_receipts_are_recorded(
        fleet: Fleet, fenced_tasks: str) -> None:
    n1 = fleet.start("n1")
    n2 = fleet.start("n2", fenced_tasks=fenced_tasks)
    fleet.start("n3")
    gate = fleet.root / "gate-freeze"
    runs = {}
    for i in range(3):
        task = make_task(n1, fleet.marked(f"f{i}", 4, gate=gate), **placed(node="n2"))
        runs[trigger(n1, task["id"])] = f"f{i}"
    wait_until(lambda: all(get_run(n1, r)["status"] == "running" for r in runs), 30,
               "all running on n2")
    epoch = nodes_view(n1)["n2"]["epoch"]
    pids = freeze(n2)
    try:
        wait_node_state(n1, "n2", "expired", 30)
        for run_id in runs:
            run = wait_terminal(n1, run_id, 30)
            assert (run["status"], run["reason_code"]) == ("lost", "NODE_LEASE_EXPIRED"), run
        gate.touch()  # the frozen tasks see it only once thawed
    finally:
        thaw_processes(pids)
    # n2 finds itself fenced, registers again under a new epoch and says so.
    wait_until(lambda: nodes_view(n1)["n2"]["state"] == "live"
               and nodes_view(n1)["n2"]["epoch"] > epoch, 40, "n2 live again, new epoch")
    wait_until(lambda: "fenced" in output(n2), 10, "n2 logs that it was fenced")
    if fenced_tasks == "leave":
        # Their receipts come, are refused by epoch and recorded, never applied.
        def late() -> bool:
            return all(any(a.get("late_exit_code") is not None
                           for a in get_run(n1, r)["attempts"]) for r in runs)
        wait_until(late, 40, "late receipts recorded")
    seen = check_fleet(fleet, n1, runs)
    for run in seen.values():
        assert (run["status"], run["reason_code"]) == ("lost", "NODE_LEASE_EXPIRED"), run
        if fenced_tasks == "leave":
            assert run["attempts"][0]["late_exit_code"] == 4, run
        evs = [e["type"] for e in events_of(n1, run["id"])]
        assert evs.count("run.finished") == 1, evs


# -- 3b. a node frozen within the identity grace of a task it just started ---------------


def launcher_of(app: Any) -> tuple[int, int] | None:
    """(pid, start time) of the one launcher running on `app`'s node, if there is one.
    Its task's process has the launcher's argv too between fork and exec: a process
    whose parent is itself a match is that child, not a launcher."""
    pids = launcher_pids(app.state)
    for pid in sorted(pids):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) in pids:
            continue
        start = identity.start_time(pid)
        if start is not None:
            return pid, start
    return None


def still_runs(launcher: tuple[int, int]) -> bool:
    """The very process (pid and start time), not a zombie left for its parent."""
    ident = identity.Identity(pid=launcher[0], start_time=launcher[1], boot_id="b")
    return identity.check(ident, "b") is identity.Liveness.RUNNING


def frozen_within_grace(fleet: Fleet, n1: Any, n3: Any, tag: str, gate: Path
                        ) -> tuple[str, str, tuple[int, int], set[int], int] | None:
    """Start a task on n3 and freeze n3's supervisord and worker as soon as its launcher
    appears (well within the identity grace: 0.5 s on cluster-control, 2 s on
    cluster-worker), until the takeover has decided the run `lost` with no pid. Returns
    (marker tag, run id, launcher, frozen pids, fencings logged before) with n3 still
    frozen; None, with n3 thawed and that try cleaned up, when the freeze missed the
    premise: the pid was recorded first (a slow poll under load), or the freeze caught a
    transaction of n3 holding its node row or the attempt (its takeover then waits for
    the thaw — a lock, not what this drill is about)."""
    assert n3.proc is not None
    # Only the control plane is frozen; the task runs on.
    control = {n3.proc.pid, n3.worker_pid()}
    fencings = output(n3).count("node n3 fenced")
    task = make_task(n1, fleet.marked(tag, 5, gate=gate), **placed(node="n3"))
    run_id = trigger(n1, task["id"])
    launcher = wait_until(lambda: launcher_of(n3), 30, "the task's launcher on n3",
                          interval=0.002)
    freeze_processes(control)
    try:
        wait_node_state(n1, "n3", "expired", 20)
        run = wait_terminal(n1, run_id, 20)
        assert (run["status"], run["reason_code"]) == ("lost", "NODE_LEASE_EXPIRED"), run
        assert still_runs(launcher), "the task ended while its node was frozen"
        if run["attempts"][0]["pid"] is None:
            return tag, run_id, launcher, control, fencings
    except AssertionError as missed:
        if "timed out" not in str(missed):
            raise
    thaw_processes(control)
    wait_until(n3.ready, 60, "n3 ready again after a missed freeze")
    if still_runs(launcher):
        os.killpg(launcher[0], signal.SIGKILL)
    wait_terminal(n1, run_id, 60)
    return None


@pytest.mark.parametrize("profile", ["cluster-control", "cluster-worker"])
@pytest.mark.parametrize("fenced_tasks", ["stop", "leave"])
def test_node_frozen_within_the_identity_grace_handles_that_task_once_fenced(
        fleet: Fleet, fenced_tasks: str, profile: str) -> None:
    """Issue 41: the takeover decides such a task `lost` with no pid recorded (its
    identity was still in the frozen worker's memory). Once thawed and fenced, the node
    stops it within the kill grace (`stop`) or leaves it to its end (`leave`); either
    way its late receipt is recorded, once, and the run keeps its one result."""
    n1 = fleet.start("n1")
    fleet.start("n2")
    n3 = fleet.start("n3", profile=profile, fenced_tasks=fenced_tasks)
    kill_grace_s = PROFILES[profile].kill_grace_s
    gate = fleet.root / "gate-grace"
    for tries in range(1, 4):
        got = frozen_within_grace(fleet, n1, n3, f"g{tries}", gate)
        if got is not None:
            break
    else:
        raise AssertionError("three freezes missed the identity grace or held a lock")
    tag, run_id, launcher, control, fencings = got
    thaw_processes(control)
    thawed = time.monotonic()
    wait_until(lambda: output(n3).count("node n3 fenced") > fencings, 30,
               "n3 logs that it was fenced")
    if fenced_tasks == "stop":
        # Stopped at the fence (the first heartbeat after the thaw), TERM then KILL
        # after the kill grace at the latest: never left to overlap a retry for longer.
        wait_until(lambda: not still_runs(launcher), kill_grace_s + 30,
                   "the old epoch's task stopped")
        assert time.monotonic() - thawed < kill_grace_s + 5, "not stopped within the kill grace"
        assert fleet.marker(tag) is None, "the task ran to its end"
    else:
        # `leave`: it runs on past the fence and the kill grace, to its own end.
        deadline = time.monotonic() + kill_grace_s + 2
        while time.monotonic() < deadline:
            assert still_runs(launcher), "fenced_tasks=leave stopped the task"
            time.sleep(0.2)
        gate.touch()
        wait_until(lambda: fleet.marker(tag), 30, "the task ran to its end")
        assert fleet.marker(tag) == ("n3", 5)

    def late() -> dict[str, Any] | None:
        got = get_run(n1, run_id)
        return got if got["attempts"][0]["late_exit_code"] is not None else None
    run = wait_until(late, 40, "the late receipt recorded")
    assert (run["status"], run["reason_code"]) == ("lost", "NODE_LEASE_EXPIRED"), run
    attempt = run["attempts"][0]
    if fenced_tasks == "leave":
        assert attempt["late_exit_code"] == 5, run
    else:
        assert attempt["late_exit_code"] != 5, run  # the stop's, not an end of its own
    # The identity n3 held in memory is recorded beside the decision.
    assert attempt["pid"] == launcher[0], run
    counts = Counter(e["type"] for e in events_of(n1, run_id))
    assert counts["run.finished"] == 1, counts
    assert counts["attempt.finished"] == 1, counts
    assert counts["attempt.late_receipt"] == 1, counts
    # The refused receipt is kept for the operator, and its entry is not lost.
    quarantined = wait_until(lambda: [p for p in receipts_root(n3).rglob(f"{attempt['id']}*")
                                      if ".quarantine" in p.parts], 10,
                             "the late receipt quarantined")
    assert len(quarantined) == 1, quarantined
    # Logged once by the consumer, not once per path that found it (the exit watcher's
    # and the supervision rounds' that follow).
    rounds = system(n3)["rounds"]
    wait_until(lambda: system(n3)["rounds"] >= rounds + 2, 30, "two supervision rounds")
    assert output(n3).count(f"receipt of attempt {attempt['id']} quarantined") == 1


# -- 4. PostgreSQL crashed and restarted mid-load ------------------------------------------


def test_postgresql_crash_mid_load_loses_nothing(fleet: Fleet, cluster: Cluster) -> None:
    # Leases longer than the outage (the drills' 3 s would not cover a restart on a
    # loaded machine): "back within its lease, nothing happened" is what is checked
    # here; a node away beyond its lease is the frozen-node drill's case.
    within = {"node_lease_s": "30", "node_heartbeat_s": "1"}
    nodes = [fleet.start("n1", **within), fleet.start("n2", **within),
             fleet.start("n3", profile="cluster-worker", **within)]
    n1 = nodes[0]
    epochs = {name: node["epoch"] for name, node in nodes_view(n1).items()}
    tasks = [make_task(n1, fleet.marked(f"load{i}", i % 3, sleep="0.3")) for i in range(24)]
    runs: dict[str, str] = {}
    # A run triggered through a node starts there when it has room: spread the load.
    for i, task in enumerate(tasks[:12]):
        runs[trigger(nodes[i % 3], task["id"])] = f"load{i}"
    time.sleep(0.5)
    cluster.crash()
    time.sleep(2)  # tasks keep running and finishing; receipts wait on their nodes
    cluster.start_again()
    for i, task in enumerate(tasks[12:], start=12):
        node = nodes[i % 3]
        runs[ok(api(node, "POST", f"/tasks/{task['id']}/runs"), 202)["run"]["id"]] = f"load{i}"
    seen = check_fleet(fleet, n1, runs)
    odd = {k: (r["status"], r["reason_code"], r["attempts"]) for k, r in seen.items()
           if r["status"] not in ("succeeded", "failed")}
    assert not odd, odd
    assert {name: node["epoch"] for name, node in nodes_view(n1).items()} == epochs
    assert {m[0] for m in map(fleet.marker, runs.values()) if m} == {"n1", "n2", "n3"}
    # Every receipt kept through the outage was acknowledged afterwards: each node's
    # journal is drained and its receipts directory holds no result file any more.
    for node in nodes:
        wait_backlog_drained(node, 60)
        wait_until(lambda node=node: not [
            p for p in receipts_root(node).rglob("*.json")
            if ".quarantine" not in p.parts], 30, "receipts reaped")


# -- 5. the scheduler's leader killed at a tick -----------------------------------------------


def leader(app: Any) -> str | None:
    for name, node in nodes_view(app).items():
        if node.get("leader"):
            return name
    return None


@pytest.mark.parametrize("point", ["scheduler.before_commit", "scheduler.after_commit"])
def test_leader_killed_at_a_tick_fires_that_tick_once(fleet: Fleet, point: str) -> None:
    n1 = fleet.start("n1", failpoints=f"{point}=exit")
    wait_until(lambda: leader(n1) == "n1", 20, "n1 leads the scheduler")
    n2 = fleet.start("n2")
    task = make_task(n2, "true", schedule="*/3 * * * * *")
    wait_until(lambda: "exit status 86" in output(n1), 30, f"n1's worker dies at {point}")
    stop_leaving_tasks(n1)
    wait_until(lambda: leader(n2) == "n2", 20, "n2 takes the lease")

    def fired() -> list[int] | None:
        items = ok(api(n2, "GET", "/runs", params={"task_id": task["id"], "limit": 100}))
        dues = []
        for run in items["items"]:
            ev = next(e for e in events_of(n2, run["id"]) if e["type"] == "run.scheduled")
            dues.append(int(ev["data"]["scheduled_for_ms"]))
        return dues if len(dues) >= 3 else None
    dues = wait_until(fired, 40, "three ticks fired")
    assert len(dues) == len(set(dues)), f"a tick fired twice: {sorted(dues)}"


# -- 6. cancel from any node -------------------------------------------------------------------


def test_cancel_on_one_node_stops_the_run_on_another(fleet: Fleet) -> None:
    n1 = fleet.start("n1", round_interval_s="30")  # the NOTIFY, not the periodic sweep
    fleet.start("n2", round_interval_s="30")
    gate = fleet.root / "never"
    task = make_task(n1, fleet.marked("c", 0, gate=gate), **placed(node="n2"))
    run_id = trigger(n1, task["id"])
    wait_until(lambda: get_run(n1, run_id)["status"] == "running", 30, "running on n2")
    t0 = time.monotonic()
    ok(api(n1, "POST", f"/runs/{run_id}/cancel"), 202)
    run = wait_terminal(n1, run_id, 20)
    assert (run["status"], run["reason_code"]) == ("cancelled", "CANCEL_REQUESTED"), run
    assert time.monotonic() - t0 < 15, "the owner was not woken: it waited for a round"
    assert fleet.marker("c") is None, "the task ran to its end"
    assert attempt_nodes(run) == ["n2"]
    evs = [e["type"] for e in events_of(n1, run_id)]
    assert evs.count("run.finished") == 1, evs
