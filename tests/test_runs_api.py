"""Runs end to end through the API: real worker, real launcher, real log files."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from _marked import MARK, kill_marked, marked

from support import Server, wait_terminal

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


def _task(http: httpx.Client, command: str, **extra: object) -> str:
    r = http.post("/api/v1/tasks", json={"name": "t", "command": command, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _run(http: httpx.Client, task_id: str) -> str:
    r = http.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code == 202, r.text
    return str(r.json()["run"]["id"])


def _terminal_events(http: httpx.Client, run_id: str) -> list[str]:
    items = http.get(f"/api/v1/runs/{run_id}/events").json()["items"]
    return [e["type"] for e in items if e["type"] in ("attempt.finished", "run.finished")]


def test_lines_and_exit_code(server: Server) -> None:
    http = server.http
    run_id = _run(http, _task(http, 'i=1; while [ $i -le 200 ]; do echo "line $i"; '
                                    "i=$((i+1)); done; exit 3"))
    run = wait_terminal(http, run_id)
    assert (run["status"], run["exit_code"], run["reason_code"]) == ("failed", 3, "EXITED")
    assert _terminal_events(http, run_id) == ["attempt.finished", "run.finished"]
    log = http.get(f"/api/v1/runs/{run_id}/log")
    assert log.content == b"".join(f"line {i}\n".encode() for i in range(1, 201))
    assert log.headers["x-run-terminal"] == "true"
    assert int(log.headers["x-log-next-offset"]) == len(log.content)
    part = http.get(f"/api/v1/runs/{run_id}/log", params={"offset": 7, "limit": 6})
    assert part.content == b"line 2" and part.headers["x-log-next-offset"] == "13"
    events = http.get(f"/api/v1/runs/{run_id}/events").json()["items"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == [
        "run.created", "attempt.created", "attempt.started", "run.started",
        "attempt.finished", "run.finished"]


@pytest.mark.parametrize(("command", "status", "code"), [
    ("true", "succeeded", 0),
    ("exit 1", "failed", 1),
    ("kill -9 $$", "failed", 137),
    ("no-such-command-qledge", "failed", 127),
])
def test_exit_code_mapping(server: Server, command: str, status: str, code: int) -> None:
    run_id = _run(server.http, _task(server.http, command))
    run = wait_terminal(server.http, run_id)
    assert (run["status"], run["exit_code"]) == (status, code)
    assert run["attempts"][0]["exit_code"] == code
    assert _terminal_events(server.http, run_id) == ["attempt.finished", "run.finished"]


def test_forbid_answers_409_with_active_run(server: Server) -> None:
    task = _task(server.http, "sleep 1")
    first = _run(server.http, task)
    r = server.http.post(f"/api/v1/tasks/{task}/runs")
    assert r.status_code == 409 and r.json()["active_run_id"] == first
    assert wait_terminal(server.http, first)["status"] == "succeeded"
    second = _run(server.http, task)
    assert wait_terminal(server.http, second)["status"] == "succeeded"


def test_max_concurrent_limit_queues(tmp_path: object) -> None:

    srv = Server(Path(str(tmp_path)) / "s", max_concurrent_attempts="2")
    try:
        task = _task(srv.http, "sleep 0.4", concurrency="allow")
        runs = [_run(srv.http, task) for _ in range(5)]
        finished = [wait_terminal(srv.http, r) for r in runs]
        assert [r["status"] for r in finished] == ["succeeded"] * 5
        # Each attempt holds its slot from spawn step 1 (created_at_ms) until after its
        # process exited (finished_at_ms), so these intervals may overlap at most
        # `limit` deep. (Polling run statuses one GET at a time is no snapshot: a run
        # seen running may have ended before the next GET saw another one start.)
        edges = sorted(
            (t, step) for run in finished for a in run["attempts"]
            for t, step in ((a["created_at_ms"], 1), (a["finished_at_ms"], -1)))
        depth = peak = 0
        for _, step in edges:  # at equal times an end (-1) sorts before a start
            depth += step
            peak = max(peak, depth)
        assert peak == 2
    finally:
        srv.stop()


def test_bad_ids_and_states(server: Server) -> None:
    http = server.http
    assert http.get("/api/v1/runs/not-a-uuid").status_code == 404
    assert http.get("/api/v1/runs/01a22c6f-dc91-7024-a839-591fbcd14523").status_code == 404
    assert http.get("/api/v1/runs", params={"status": "weird"}).status_code == 422
    assert http.get("/api/v1/runs", params={"limit": 0}).status_code == 422
    assert http.get("/api/v1/runs", params={"cursor": "x"}).status_code == 422
    run_id = _run(http, _task(http, "echo hi"))
    wait_terminal(http, run_id)
    assert http.get(f"/api/v1/runs/{run_id}/log", params={"offset": -1}).status_code == 422
    assert http.get(f"/api/v1/runs/{run_id}/log", params={"offset": 999}).status_code == 422
    r = http.post(f"/api/v1/runs/{run_id}/cancel")
    assert r.status_code == 409
    assert http.post("/api/v1/tasks/01a22c6f-dc91-7024-a839-591fbcd14523/runs").status_code == 404


def test_runs_pagination_and_filters(server: Server) -> None:
    http = server.http
    ok = _task(http, "true", concurrency="allow")
    bad = _task(http, "false", concurrency="allow")
    ids = [_run(http, ok) for _ in range(3)] + [_run(http, bad) for _ in range(2)]
    for run_id in ids:
        wait_terminal(http, run_id)
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = http.get("/api/v1/runs", params=params).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == sorted(ids, reverse=True)
    failed = http.get("/api/v1/runs", params={"status": "failed"}).json()["items"]
    assert sorted(r["id"] for r in failed) == sorted(ids[3:])
    mine = http.get("/api/v1/runs", params={"task_id": ok}).json()["items"]
    assert len(mine) == 3


def test_events_carry_no_command_env_or_output(server: Server) -> None:
    secret = "s3cr3t-VALUE-4711"
    task = _task(server.http, f"echo {secret}-out; exit 2", env={"MY_SECRET": secret})
    run_id = _run(server.http, task)
    wait_terminal(server.http, run_id)
    body = server.http.get(f"/api/v1/runs/{run_id}/events").text
    assert secret not in body and "MY_SECRET" not in body and "echo" not in body
    assert server.http.get(f"/api/v1/runs/{run_id}/log").content == f"{secret}-out\n".encode()
    assert secret not in server.output.read_text()


# -- what a task leaves running (docs/tasks.md) -----------------------------------

def _finished_data(http: httpx.Client, run_id: str) -> dict[str, object]:
    items = http.get(f"/api/v1/runs/{run_id}/events").json()["items"]
    return dict(next(e["data"] for e in items if e["type"] == "run.finished"))


def test_background_processes_are_ended_and_counted(server: Server) -> None:
    kill_marked()
    http = server.http
    task = _task(http, f"i=0; while [ $i -lt 50 ]; do sleep {MARK} & i=$((i+1)); done; exit 0")
    assert http.get(f"/api/v1/tasks/{task}").json()["keep_background"] is False
    run_id = _run(http, task)
    run = wait_terminal(http, run_id)
    assert (run["status"], run["exit_code"]) == ("succeeded", 0)
    assert _finished_data(http, run_id) == {"status": "succeeded", "exit_code": 0,
                                            "reason_code": "EXITED", "leftover_processes": 50}
    assert marked() == []


def test_keep_background_leaves_them_running(server: Server) -> None:
    kill_marked()
    http = server.http
    task = _task(http, f"sleep {MARK} & exit 0", keep_background=True)
    try:
        run_id = _run(http, task)
        assert wait_terminal(http, run_id)["status"] == "succeeded"
        assert "leftover_processes" not in _finished_data(http, run_id)
        deadline = time.monotonic() + 10
        while len(marked()) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(marked()) == 1
        # The opt-out is a task field like any other: switched off, they are ended.
        r = http.patch(f"/api/v1/tasks/{task}", json={"keep_background": False})
        assert r.status_code == 200 and r.json()["keep_background"] is False
        again = _run(http, task)
        assert wait_terminal(http, again)["status"] == "succeeded"
        assert _finished_data(http, again)["leftover_processes"] == 1
        assert len(marked()) == 1  # the first run's, in its own session: not this run's
    finally:
        kill_marked()


def test_runs_list_pages_by_offset_with_a_total_and_task_names(server: Server) -> None:
    http = server.http
    ok = _task(http, "true", concurrency="allow")
    ids = [_run(http, ok) for _ in range(5)]
    for run_id in ids:
        wait_terminal(http, run_id)
    newest = sorted(ids, reverse=True)
    pages = [http.get("/api/v1/runs", params={"task_id": ok, "limit": 2, "offset": o}).json()
             for o in (0, 2, 4)]
    assert [p["total"] for p in pages] == [5, 5, 5]
    assert [r["id"] for p in pages for r in p["items"]] == newest
    assert {r["task_name"] for p in pages for r in p["items"]} == {"t"}
    assert {r["earlier_attempts"] for p in pages for r in p["items"]} == {0}
    assert http.get("/api/v1/runs", params={"status": "failed", "task_id": ok}
                    ).json()["total"] == 0
    r = http.get("/api/v1/runs", params={"offset": 2, "cursor": newest[0]})
    assert r.status_code == 422 and r.json()["field"] == "offset"
    assert http.get("/api/v1/runs", params={"offset": -1}).status_code == 422


def test_each_attempt_of_a_retried_run_keeps_its_own_log(server: Server) -> None:
    http = server.http
    flag = "./retried-flag"  # in the task's working folder, which its user may write
    task_id = _task(http, f"if [ -e {flag} ]; then echo second-try; exit 0; fi;"
                          f" touch {flag}; echo first-try; exit 3",
                    retries=2, retry_delay_s=0)
    run_id = _run(http, task_id)
    done = wait_terminal(http, run_id)
    assert done["status"] == "succeeded", (done, http.get(f"/api/v1/runs/{run_id}/log").text)
    run = http.get(f"/api/v1/runs/{run_id}").json()
    assert run["task_name"] == "t"
    assert [(a["attempt_no"], a["exit_code"]) for a in run["attempts"]] == [(1, 3), (2, 0)]
    log = f"/api/v1/runs/{run_id}/log"
    first = http.get(log, params={"attempt": 1})
    assert first.text == "first-try\n" and first.headers["X-Run-Terminal"] == "true"
    assert http.get(log, params={"attempt": 2}).text == "second-try\n"
    assert http.get(log).text == "second-try\n"  # no attempt: the latest, as before
    with http.stream("GET", f"{log}/stream", params={"attempt": 1}) as sse:
        body = "".join(sse.iter_text())
    assert '"text":"first-try\\n"' in body and "event: end" in body
    assert "second-try" not in body
    for bad, status in (("3", 404), ("0", 422), ("x", 422)):
        assert http.get(log, params={"attempt": bad}).status_code == status, bad
    listed = http.get("/api/v1/runs", params={"task_id": task_id}).json()["items"]
    assert [(r["status"], r["earlier_attempts"]) for r in listed] == [("succeeded", 1)]
