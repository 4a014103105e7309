"""Live log tails over SSE: on demand, resumable, never back-pressuring the task."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from conftest import Server, wait_terminal


def _start(server: Server, command: str) -> str:
    task = server.http.post("/api/v1/tasks", json={"name": "s", "command": command}).json()
    r = server.http.post(f"/api/v1/tasks/{task['id']}/runs")
    return str(r.json()["run"]["id"])


def _events(lines: Iterator[str]) -> Iterator[tuple[str, int | None, str]]:
    event, ident, data = "message", None, []
    for line in lines:
        if line == "":
            if data:
                yield event, ident, "\n".join(data)
            event, ident, data = "message", None, []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: "):
            data.append(line[6:])


def _follow(server: Server, run_id: str, offset: int = 0, stop_after: int | None = None,
            on_text: Callable[[str], None] | None = None
            ) -> tuple[str, dict[str, object] | None, int]:
    text, end, last = "", None, offset
    with httpx.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream",
                      params={"offset": offset}, headers=server.http.headers,
                      timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for event, ident, data in _events(r.iter_lines()):
            if event == "log":
                text += json.loads(data)["text"]
                assert ident is not None and ident > last
                last = ident
                if on_text is not None:
                    on_text(text)
                if stop_after is not None and text.count("\n") >= stop_after:
                    break
            elif event == "end":
                end = json.loads(data)
                break
    return text, end, last


def test_stream_follows_lines_live_and_ends_with_status(server: Server) -> None:
    # The task prints its lines, then waits for the gate: every line must come
    # through while it still runs, and the end event only after it exits.
    gate = server.state.parent / "gate"
    run_id = _start(server, f'for i in $(seq 1 30); do echo "n $i"; sleep 0.02; done;'
                            f" while [ ! -e {gate} ]; do sleep 0.05; done; exit 4")

    def open_gate_after_the_last_line(text: str) -> None:
        if text.count("\n") == 30 and not gate.exists():
            run = server.http.get(f"/api/v1/runs/{run_id}").json()
            assert (run["status"], run["terminal"]) == ("running", False), run
            gate.touch()

    text, end, _ = _follow(server, run_id, on_text=open_gate_after_the_last_line)
    assert gate.exists(), "the 30 lines never came while the task ran"
    assert text == "".join(f"n {i}\n" for i in range(1, 31))
    assert end == {"status": "failed", "exit_code": 4, "reason_code": "EXITED",
                   "log_bytes_at_exit": len(text), "log_truncated": False, "log_note": None}


def test_resume_from_offset_without_gap_or_duplicate(server: Server) -> None:
    run_id = _start(server, 'for i in $(seq 1 40); do echo "row $i"; sleep 0.02; done')
    first, end, offset = _follow(server, run_id, stop_after=5)
    assert end is None and first.startswith("row 1\n")
    rest, end, _ = _follow(server, run_id, offset=offset)
    assert first + rest == "".join(f"row {i}\n" for i in range(1, 41))
    assert end is not None and end["status"] == "succeeded"


def test_two_subscribers_see_the_same_bytes(server: Server) -> None:
    run_id = _start(server, 'for i in $(seq 1 50); do echo "x $i é"; sleep 0.01; done')
    results: list[str] = []

    def sub() -> None:
        results.append(_follow(server, run_id)[0])

    threads = [threading.Thread(target=sub) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2 and results[0] == results[1]
    assert results[0] == "".join(f"x {i} é\n" for i in range(1, 51))


def test_a_stalled_subscriber_never_slows_the_task(server: Server) -> None:
    # 50 MB written while one subscriber holds its stream open and reads nothing.
    run_id = _start(server, "head -c 50000000 /dev/zero | tr '\\0' 'a'; echo")
    stalled = httpx.Client(timeout=60, headers=server.http.headers)
    with stalled.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream") as r:
        assert r.status_code == 200
        run = wait_terminal(server.http, run_id, timeout=60)
        assert run["status"] == "succeeded"
        size = int(server.http.get(f"/api/v1/runs/{run_id}/log",
                                   params={"limit": 1}).headers["x-log-size"])
        assert size == 50_000_001
    stalled.close()


def test_no_tail_is_left_after_the_last_subscriber(server: Server) -> None:
    run_id = _start(server, "sleep 30")
    with httpx.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream",
                      headers=server.http.headers, timeout=10) as r:
        assert r.status_code == 200, r.read()
        lines = r.iter_lines()  # keep a reference: a collected iterator closes the stream
        assert next(lines) == "retry: 1000"
        assert server.http.get("/api/v1/system").json()["log_streams"] == 1
    deadline = time.monotonic() + 10
    while server.http.get("/api/v1/system").json()["log_streams"] != 0:
        assert time.monotonic() < deadline, "tail still running after the client left"
        time.sleep(0.1)
    server.http.post(f"/api/v1/runs/{run_id}/cancel")


def test_stream_unknown_run_is_404(server: Server) -> None:
    r = server.http.get("/api/v1/runs/01a22c6f-dc91-7024-a839-591fbcd14523/log/stream")
    assert r.status_code == 404


def _log_file(server: Server, run: dict[str, object]) -> Path:
    attempt_id = str(run["attempts"][0]["id"])  # type: ignore[index]
    return server.state / "logs" / attempt_id[-2:] / f"{attempt_id}.log"


def test_a_log_cut_short_by_a_power_loss_says_so(server: Server) -> None:
    """The receipt records the log's length at exit (logBytes); a log file found
    shorter (a power cut took its unsynced tail) is reported as truncated
    everywhere: run detail, log read headers, the stream's end event."""
    out = "".join(f"line {i}\n" for i in range(1, 201))
    run_id = _start(server, "for i in $(seq 1 200); do echo \"line $i\"; done; exit 3")
    run = wait_terminal(server.http, run_id)
    assert run["exit_code"] == 3
    (attempt,) = run["attempts"]  # type: ignore[misc]
    assert attempt["log_bytes_at_exit"] == len(out) == attempt["log_size"]
    assert attempt["log_truncated"] is False and attempt["log_note"] is None
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.content.decode() == out
    assert r.headers["X-Log-Expected-Size"] == str(len(out))
    assert r.headers["X-Log-Truncated"] == "false" and "X-Log-Note" not in r.headers
    _, end, _ = _follow(server, run_id)
    assert end is not None and end["log_truncated"] is False
    assert end["log_bytes_at_exit"] == len(out)

    os.truncate(_log_file(server, run), 100)  # what the power cut left on the card
    run = server.http.get(f"/api/v1/runs/{run_id}").json()
    (attempt,) = run["attempts"]
    assert (attempt["log_size"], attempt["log_truncated"]) == (100, True)
    note = f"log truncated by power loss: 100 of {len(out)} bytes"
    assert attempt["log_note"] == note
    assert run["exit_code"] == 3  # the result stands; only the log is incomplete
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.content.decode() == out[:100]
    assert r.headers["X-Log-Truncated"] == "true" and r.headers["X-Log-Note"] == note
    assert r.headers["X-Log-Size"] == "100"
    text, end, _ = _follow(server, run_id)
    assert text == out[:100]
    assert end is not None and end["log_truncated"] is True and end["log_note"] == note

    _log_file(server, run).unlink()  # nothing at all survived
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.headers["X-Log-Note"] == f"log truncated by power loss: 0 of {len(out)} bytes"


def test_later_output_of_a_background_process_is_not_truncation(server: Server) -> None:
    run_id = _start(server, "(sleep 0.3; echo late) & echo early; exit 0")
    run = wait_terminal(server.http, run_id)
    (attempt,) = run["attempts"]  # type: ignore[misc]
    assert attempt["log_bytes_at_exit"] == len("early\n")
    deadline = time.monotonic() + 10
    while server.http.get(f"/api/v1/runs/{run_id}/log").content != b"early\nlate\n":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (attempt,) = server.http.get(f"/api/v1/runs/{run_id}").json()["attempts"]
    assert attempt["log_size"] == len("early\nlate\n") and attempt["log_truncated"] is False
