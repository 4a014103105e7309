"""Recovery drills: real supervisord, real worker, real ql-launch, real kill -9.

Each drill starts the supervised appliance in a temp state dir, breaks the
control plane at a chosen moment and checks the promise only through the API
and the files: a running task, its log and its real exit code survive; a
result is never invented; every run ends with exactly one terminal event.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    Factory,
    alive,
    assert_one_terminal,
    assert_receipt_reaped,
    events_of,
    full_log,
    get_run,
    is_ready,
    kill_worker,
    make_task,
    output,
    proc_state,
    quarantine_file,
    receipt_file,
    start_worker,
    stop_leaving_tasks,
    stop_worker,
    system,
    terminal_events,
    trigger,
    wait_backlog_drained,
    wait_ready,
    wait_running,
    wait_terminal,
    wait_until,
)

pytestmark = pytest.mark.drill


def counter(lines: int, code: int, gate: Path | None = None, step: str = "0.05") -> str:
    """A task that prints `line 1..N`, one every `step` seconds, then exits `code`;
    N = `lines`, or more until the `gate` file exists."""
    more = f' || [ ! -e "{gate}" ]' if gate else ""
    return (f'i=1; while [ "$i" -le {lines} ]{more}; do echo "line $i"; i=$((i+1)); '
            f"sleep {step}; done; exit {code}")


def gated(gate: Path, tail: str) -> str:
    """A task that waits (quietly) until the test creates `gate`, then runs `tail`."""
    return f'while [ ! -e "{gate}" ]; do sleep 0.05; done; {tail}'


def gate_of(app: Any, name: str = "gate") -> Path:
    return Path(app.state) / "work" / name


def numbered(text: str) -> int:
    """N if `text` is exactly the lines `line 1` .. `line N` (no gap, no duplicate)."""
    lines = text.splitlines()
    assert lines == [f"line {k}" for k in range(1, len(lines) + 1)], text[-400:]
    return len(lines)


def log_file(app: Any, attempt_id: str) -> Path:
    return Path(app.state) / "logs" / attempt_id[-2:] / f"{attempt_id}.log"


def lines_in(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def sockets(pid: int) -> set[str]:
    """The sockets (`socket:[inode]`) a process holds open."""
    links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    return {link for link in links if link.startswith("socket:")}


def status_for(code: int) -> str:
    return "succeeded" if code == 0 else "failed"


def assert_exited(run: dict[str, Any], code: int) -> None:
    assert run["status"] == status_for(code), run
    assert run["exit_code"] == code and run["reason_code"] == "EXITED", run
    assert len(run["attempts"]) == 1, run
    attempt = run["attempts"][0]
    assert attempt["status"] == status_for(code) and attempt["exit_code"] == code, run


# -- 1. the worker dies while tasks run ---------------------------------------------


def test_worker_killed_mid_run_tasks_keep_log_and_exit_code(appliance: Factory) -> None:
    app = appliance()
    gate = gate_of(app)
    lines = 60  # at least ~3 s of output at 50 ms a line; more until the gate opens
    codes = [0, 3, 42, 255]
    runs = {trigger(app, make_task(app, counter(lines, c, gate))["id"]): c for c in codes}
    attempts = {rid: wait_running(app, rid)["attempts"][0] for rid in runs}
    logs = {rid: log_file(app, a["id"]) for rid, a in attempts.items()}

    kills = []  # (lines written when the worker died, seconds until ready again)
    for _ in range(2):
        wait_until(lambda: all(lines_in(p) >= 5 for p in logs.values()), 30, "output flowing")
        before = {rid: lines_in(p) for rid, p in logs.items()}
        kills.append((min(before.values()), round(kill_worker(app), 2)))
        for rid, a in attempts.items():
            assert alive(a["pid"]), f"the launcher of {rid} died with the worker"
        # the output keeps flowing into the same files, written by the same processes
        wait_until(lambda b=before: all(lines_in(p) >= b[rid] + 5 for rid, p in logs.items()),
                   30, "output after the kill")
        for rid in runs:
            assert get_run(app, rid)["status"] == "running"
    print(f"kills (lines written at the kill, s to ready): {kills}")
    gate.touch()

    for rid, code in runs.items():
        run = wait_terminal(app, rid)
        assert_exited(run, code)
        assert run["attempts"][0]["id"] == attempts[rid]["id"]
        assert run["attempts"][0]["pid"] == attempts[rid]["pid"]
        assert_one_terminal(app, rid)
        n = numbered(full_log(app, rid).decode())
        assert n >= lines and n == lines_in(logs[rid])
        assert_receipt_reaped(app, attempts[rid]["id"])
    wait_backlog_drained(app)


def test_restarted_worker_serves_while_old_tasks_still_run(appliance: Factory) -> None:
    """A killed worker's replacement must come up at once, not when the old tasks end.

    Anything the worker leaks into ql-launch (e.g. an inheritable listening
    socket) outlives the worker and can block its successor.
    """
    app = appliance()
    run_id = trigger(app, make_task(app, gated(gate_of(app), "exit 9"))["id"])
    pid = wait_running(app, run_id)["attempts"][0]["pid"]
    worker = app.worker_pid()
    leaked = sorted(sockets(pid) & sockets(worker))
    app.kill_worker()
    t0 = time.monotonic()
    wait_until(lambda: is_ready(app), 20, "the new worker ready while the old task runs")
    took = time.monotonic() - t0
    assert alive(pid)
    run = get_run(app, run_id)
    assert run["status"] == "running" and run["attempts"][0]["pid"] == pid
    assert took < 10, f"restart took {took:.1f}s"
    assert not leaked, f"ql-launch holds the worker's sockets: {leaked}"
    gate_of(app).touch()
    assert_exited(wait_terminal(app, run_id), 9)
    assert_one_terminal(app, run_id)


def test_worker_killed_inside_the_identity_grace_adopts_the_launcher(
        appliance: Factory) -> None:
    """The launcher's identity waits in memory for its result's commit (the identity
    grace, launch/unrecorded.py): a kill -9 then leaves the attempt `preparing` with
    no pid recorded. The next worker adopts the launcher by its attempt id in /proc —
    never a bare pid — and the task's own exit code and whole log still decide."""
    app = appliance(identity_grace_s="60")
    gate = gate_of(app)
    run_id = trigger(app, make_task(app, "echo started; " + gated(gate, "echo done; exit 13"))
                     ["id"])
    run = wait_until(lambda: (r := get_run(app, run_id))["attempts"] and b"started" in
                     output_of(app, r["attempts"][0]["id"]) and r, 30, "the task started")
    attempt = run["attempts"][0]
    assert (run["status"], attempt["status"], attempt["pid"]) == ("running", "preparing", None)
    kill_worker(app)
    run = get_run(app, run_id)
    adopted = run["attempts"][0]
    assert (run["status"], adopted["status"]) == ("running", "running"), run
    assert alive(adopted["pid"])
    assert system(app)["startup_recovery"]["counts"].get("adopted") == 1
    gate.touch()
    assert_exited(wait_terminal(app, run_id), 13)
    assert_one_terminal(app, run_id)
    assert full_log(app, run_id) == b"started\ndone\n"
    assert [e["type"] for e in events_of(app, run_id)].count("attempt.started") == 1
    assert_receipt_reaped(app, attempt["id"])


def output_of(app: Any, attempt_id: str) -> bytes:
    try:
        return log_file(app, attempt_id).read_bytes()
    except FileNotFoundError:
        return b""


# -- 2. tasks finish while no worker runs ---------------------------------------------


def test_tasks_finishing_while_worker_is_down_are_recovered_from_receipts(
        appliance: Factory) -> None:
    app = appliance()
    gate = gate_of(app)
    cases = {"exit 0": 0, "exit 1": 1, "echo out; exit 77": 77, "exit 200": 200,
             "kill -TERM $$": 128 + signal.SIGTERM, "kill -KILL $$": 128 + signal.SIGKILL}
    runs = {trigger(app, make_task(app, gated(gate, cmd))["id"]): code
            for cmd, code in cases.items()}
    attempts = {rid: wait_running(app, rid)["attempts"][0] for rid in runs}
    stop_worker(app)
    assert all(alive(a["pid"]) for a in attempts.values())
    gate.touch()  # the tasks end while no worker runs
    receipts = {rid: receipt_file(app, a["id"]) for rid, a in attempts.items()}
    wait_until(lambda: all(p.exists() for p in receipts.values()), 30, "receipts published")
    wait_until(lambda: not any(alive(a["pid"]) for a in attempts.values()), 10,
               "launchers exited")

    start_worker(app)
    for rid, code in runs.items():
        run = get_run(app, rid)  # decided by start-up recovery, before /readyz said 200
        assert run["terminal"], run
        assert_exited(run, code)
        assert_one_terminal(app, rid)
        # Deleted once an fsync covers the recovered result (group_commit_s at the
        # latest), not necessarily by the time /readyz says 200.
        assert_receipt_reaped(app, attempts[rid]["id"])
    info = system(app)
    assert info["startup_recovery"]["counts"].get("receipt_applied") == len(runs), info
    assert info["journal_backlog"] == 0, info


# -- 3. crash windows around the completion commit ------------------------------------


def crash_at(appliance: Factory, failpoint: str, tail: str
             ) -> tuple[Any, str, dict[str, Any]]:
    """Start with `failpoint=exit`, run a task ending with `tail` until the worker dies
    there (it keeps dying there while supervisord restarts it), then stop everything."""
    app = appliance(failpoints=f"{failpoint}=exit")
    assert "exit status 86" not in output(app)
    run_id = trigger(app, make_task(app, gated(gate_of(app), tail))["id"])
    attempt = wait_running(app, run_id)["attempts"][0]
    gate_of(app).touch()
    wait_until(lambda: "exit status 86" in output(app), 30, f"worker exit at {failpoint}")
    assert receipt_file(app, attempt["id"]).exists(), "the receipt is kept until consumed"
    stop_leaving_tasks(app)
    return app, run_id, attempt


def test_crash_before_completion_commit_replays_once(appliance: Factory) -> None:
    first, run_id, attempt = crash_at(appliance, "consumer.before_commit", "exit 7")
    app = appliance(first.state)  # same state, no failpoint
    run = get_run(app, run_id)
    assert_exited(run, 7)
    assert_one_terminal(app, run_id)
    assert system(app)["startup_recovery"]["counts"].get("receipt_applied") == 1
    assert_receipt_reaped(app, attempt["id"])
    wait_backlog_drained(app)


def test_crash_after_completion_commit_replays_into_already_terminal(
        appliance: Factory) -> None:
    first, run_id, attempt = crash_at(appliance, "consumer.after_commit", "exit 0")
    app = appliance(first.state)
    receipt = receipt_file(app, attempt["id"])
    run = get_run(app, run_id)
    assert_exited(run, 0)  # committed before the crash
    # its journal row was settled in that commit, so the start-up reconciler looks at
    # the file once and replays the left-over receipt: no new event, file gone
    wait_until(lambda: not receipt.exists(), 30, "left-over receipt cleaned")
    counts = system(app)["startup_recovery"]["counts"]
    assert counts.get("late_receipt_already_terminal") == 1, counts
    assert_one_terminal(app, run_id)
    assert_exited(get_run(app, run_id), 0)


def test_crash_after_prepare_is_lost_without_a_process(appliance: Factory) -> None:
    app = appliance(failpoints="spawn.after_prepare=exit")
    marker = app.state / "work" / "ran"
    run_id = trigger(app, make_task(app, f"touch {marker}; exit 0")["id"])
    wait_until(lambda: "exit status 86" in output(app), 30, "worker exit at spawn")
    wait_ready(app)
    run = wait_terminal(app, run_id)
    assert run["status"] == "lost" and run["reason_code"] == "RECOVERY_SPAWN_UNCONFIRMED", run
    assert_one_terminal(app, run_id)
    assert not marker.exists(), "nothing was spawned"


def test_crash_before_identity_persist_adopts_the_running_launcher(
        appliance: Factory) -> None:
    """The launcher runs but its identity never reached the DB. The restarted worker
    finds it by its unique attempt id, records its identity and waits: the run ends
    with the task's true exit code, never `lost` while its task was alive."""
    app = appliance(failpoints="spawn.before_persist=exit")
    marker = app.state / "work" / "finished"
    run_id = trigger(app, make_task(app, gated(gate_of(app), f"touch {marker}; exit 5"))["id"])
    wait_until(lambda: "exit status 86" in output(app), 30, "worker exit before persist")
    wait_ready(app)
    wait_until(lambda: "adopted the unconfirmed launcher" in output(app), 30, "adoption")
    run = get_run(app, run_id)
    assert run["status"] == "running" and run["attempts"][0]["pid"], run
    gate_of(app).touch()
    run = wait_terminal(app, run_id)
    assert marker.exists()
    assert_exited(run, 5)
    assert_one_terminal(app, run_id)


# -- 4. the launcher itself is killed while no worker runs ----------------------------


def test_launcher_killed_while_worker_down_is_lost_never_succeeded(appliance: Factory) -> None:
    app = appliance()
    run_id = trigger(app, make_task(app, gated(gate_of(app), "exit 0"))["id"])  # never opened
    attempt = wait_running(app, run_id)["attempts"][0]
    pid = attempt["pid"]
    stop_worker(app)
    assert alive(pid)
    assert os.getpgid(pid) == pid, "the launcher leads its own process group"
    os.killpg(pid, signal.SIGKILL)  # the launcher and the task under it
    wait_until(lambda: not alive(pid), 10, "launcher dead")
    start_worker(app)
    run = get_run(app, run_id)
    assert run["status"] == "lost", run
    assert run["reason_code"] == "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT", run
    assert run["exit_code"] is None, run
    assert run["attempts"][0]["status"] == "lost", run
    evs = assert_one_terminal(app, run_id)
    assert all(e["data"].get("status") != "succeeded" for e in evs), evs
    assert_receipt_reaped(app, attempt["id"])
    wait_backlog_drained(app)


# -- 5. invalid receipts planted for known attempts -----------------------------------


def receipt_doc(run_id: str, attempt_id: str, **over: Any) -> dict[str, Any]:
    doc = {"schemaVersion": 1, "runId": run_id, "attemptId": attempt_id,
           "callbackSequence": 1, "token": "x" * 43, "startedAtMs": 1, "finishedAtMs": 2,
           "exitCode": 0}
    doc.update(over)
    return doc


def planted(kind: str, marker: str, run_id: str, attempt_id: str, other: str) -> bytes:
    """An invalid receipt claiming success, carrying `marker` somewhere in its bytes."""
    body = json.dumps(receipt_doc(run_id, attempt_id, token=marker), separators=(",", ":"))
    if kind == "duplicate_key":
        return (body[:-1] + ',"exitCode":0}').encode()
    if kind == "unknown_field":
        return json.dumps(receipt_doc(run_id, attempt_id, note=marker)).encode()
    if kind == "wrong_token":
        return body.encode()  # well-formed, but not the attempt's token
    if kind == "wrong_sequence":
        return json.dumps(receipt_doc(run_id, attempt_id, token=marker,
                                      callbackSequence=0)).encode()
    if kind == "oversize":
        return json.dumps(receipt_doc(run_id, attempt_id, token=marker,
                                      pad=marker * (5000 // len(marker)))).encode()
    if kind == "other_attempt":
        return json.dumps(receipt_doc(run_id, other, token=marker)).encode()
    raise ValueError(kind)


REASONS = {
    "duplicate_key": "RECEIPT_DUPLICATE_KEY",
    "unknown_field": "RECEIPT_UNKNOWN_FIELD",
    "wrong_token": "COMPLETION_BAD_TOKEN",
    "wrong_sequence": "RECEIPT_BAD_SEQUENCE",
    "oversize": "RECEIPT_TOO_LARGE",
    "other_attempt": "RECEIPT_ATTEMPT_MISMATCH",
}


def test_invalid_receipts_are_quarantined_and_the_real_result_still_wins(
        appliance: Factory) -> None:
    app = appliance()
    kinds = list(REASONS)
    codes = {kind: 10 + i for i, kind in enumerate(kinds)}
    gate = gate_of(app)
    runs = {kind: trigger(app, make_task(app, gated(gate, f"exit {codes[kind]}"))["id"])
            for kind in kinds}
    attempts = {kind: wait_running(app, rid)["attempts"][0] for kind, rid in runs.items()}
    stop_worker(app)
    contents = {}
    for i, kind in enumerate(kinds):
        attempt_id = attempts[kind]["id"]
        other = attempts[kinds[(i + 1) % len(kinds)]]["id"]
        marker = f"PLANTED{kind.replace('_', '')}{os.urandom(6).hex()}"
        data = planted(kind, marker, runs[kind], attempt_id, other)
        assert (len(data) > 4096) == (kind == "oversize")
        path = receipt_file(app, attempt_id)
        assert not path.exists()
        path.write_bytes(data)
        contents[kind] = (marker, data)
    start_worker(app)

    info = system(app)
    counts = info["startup_recovery"]["counts"]
    assert counts.get("receipt_quarantined") == len(kinds), info
    assert counts.get("reattached") == len(kinds), info
    assert info["journal"]["quarantined"] == len(kinds), info
    log_text = output(app)
    for kind in kinds:
        attempt_id = attempts[kind]["id"]
        assert_receipt_reaped(app, attempt_id)
        moved = quarantine_file(app, attempt_id)
        assert moved.read_bytes() == contents[kind][1], kind
        assert oct(moved.parent.stat().st_mode & 0o777) == "0o700"
        assert f"attempt {attempt_id} quarantined ({REASONS[kind]})" in log_text, kind
        run = get_run(app, runs[kind])
        assert run["status"] == "running" and run["attempts"][0]["status"] == "running", run
        assert terminal_events(events_of(app, runs[kind])) == {
            "attempt.finished": 0, "run.finished": 0}

    gate.touch()  # now the real launchers publish under the freed names
    for kind in kinds:
        run = wait_terminal(app, runs[kind])
        assert_exited(run, codes[kind])
        assert_one_terminal(app, runs[kind])
        assert_receipt_reaped(app, attempts[kind]["id"])
    log_text = output(app)
    for kind, (marker, _) in contents.items():
        assert marker not in log_text, f"{kind} receipt content leaked into the log"
    wait_backlog_drained(app)


@pytest.mark.slow
def test_real_receipt_published_after_a_quarantined_plant_is_consumed(
        appliance: Factory) -> None:
    """After a plant was quarantined, the journal row stays `quarantined`; the supervision
    round must not move the launcher's genuine receipt, published later under the freed
    name, into quarantine before the exit watcher consumes it (that turns a real exit
    code into `lost`). A race: many staggered exits against rounds every 20 ms."""
    n = 48
    # No periodic rounds while spawning (start-up recovery only).
    app = appliance(round_interval_s="3600", max_concurrent_attempts="64")
    gates = [gate_of(app, f"gate-{i}") for i in range(n)]
    task_runs = [trigger(app, make_task(app, gated(g, "exit 3"))["id"]) for g in gates]
    attempts = [wait_running(app, rid)["attempts"][0] for rid in task_runs]
    stop_leaving_tasks(app)
    for rid, a in zip(task_runs, attempts, strict=True):
        receipt_file(app, a["id"]).write_bytes(
            planted("duplicate_key", "PLANTEDxxxxxxxxxxxxx", rid, a["id"], a["id"]))
    # standalone: one round visits all 48 journal rows (edge: 16 a round)
    app = appliance(app.state, profile="standalone", round_interval_s="0.02",
                    max_concurrent_attempts="64")
    assert system(app)["startup_recovery"]["counts"].get("receipt_quarantined") == n
    for g in gates:
        g.touch()
        time.sleep(0.1)  # staggered exits (pacing, not waiting for a condition)
    results = [wait_terminal(app, rid) for rid in task_runs]
    wrong = [(r["id"], r["status"], r["exit_code"], r["reason_code"]) for r in results
             if (r["status"], r["exit_code"]) != ("failed", 3)]
    assert not wrong, f"{len(wrong)} genuine results lost: {wrong}"


def test_supervision_round_never_decides_an_attempt_being_spawned(appliance: Factory) -> None:
    """A periodic round pages active attempts; one the dispatcher is still spawning
    (`preparing` in the round's read, launcher already started) must be left alone,
    not marked lost with RECOVERY_SPAWN_UNCONFIRMED while its task runs."""
    app = appliance(round_interval_s="0.01", max_concurrent_attempts="64")
    gate = gate_of(app)
    task = make_task(app, gated(gate, "exit 4"))
    run_ids = [trigger(app, task["id"]) for _ in range(48)]

    def all_started() -> list[dict[str, Any]] | None:
        runs = [get_run(app, rid) for rid in run_ids]
        return runs if all(r["status"] != "queued" and r["attempts"]
                           and r["attempts"][-1]["status"] != "preparing"
                           for r in runs) else None
    runs = wait_until(all_started, 60, "every run started", interval=0.2)
    gate.touch()
    early = [(r["id"], r["status"], r["reason_code"]) for r in runs if r["terminal"]]
    assert not early, f"decided while their tasks were running: {early}"
    for rid in run_ids:
        assert_exited(wait_terminal(app, rid), 4)


# -- the worker's process group is not the tasks' -------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
def test_signal_to_worker_process_group_does_not_reach_tasks(
        appliance: Factory, sig: signal.Signals) -> None:
    app = appliance()
    gate = gate_of(app)
    codes = [0, 5, 130]
    runs = {trigger(app, make_task(app, counter(20, c, gate))["id"]): c for c in codes}
    attempts = {rid: wait_running(app, rid)["attempts"][0] for rid in runs}
    worker = app.worker_pid()
    pgid = os.getpgid(worker)
    assert pgid == worker, "supervisord starts the worker as its own group leader"
    for a in attempts.values():
        assert os.getpgid(a["pid"]) == a["pid"] != pgid
        assert os.getsid(a["pid"]) == a["pid"] != os.getsid(worker)
    os.killpg(pgid, sig)
    wait_until(lambda: proc_state(worker) in (None, "Z"), 20, "worker gone")
    assert all(alive(a["pid"]) for a in attempts.values()), "a task died with the worker"
    wait_ready(app)
    assert app.worker_pid() != worker
    assert all(alive(a["pid"]) for a in attempts.values())
    gate.touch()
    for rid, code in runs.items():
        run = wait_terminal(app, rid)
        assert_exited(run, code)
        assert_one_terminal(app, rid)
        assert numbered(full_log(app, rid).decode()) >= 20
